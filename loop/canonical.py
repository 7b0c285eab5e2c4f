"""Canonical JSON and digests: the same value always hashes the same way."""

from __future__ import annotations

import hashlib
import json

from pydantic import JsonValue


def canonical_json(value: JsonValue) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def sha256_hex(value: JsonValue) -> str:
    return hashlib.sha256(canonical_json(value).encode()).hexdigest()
