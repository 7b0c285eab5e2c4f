"""Canonical JSON and digests: the same value always hashes the same way."""

from __future__ import annotations

import hashlib
import json

from pydantic import JsonValue


def canonical_json(value: JsonValue) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def sha256_hex(value: JsonValue) -> str:
    # surrogates passed through: a model's lone surrogate still hashes, the same each time
    return hashlib.sha256(canonical_json(value).encode("utf-8", "surrogatepass")).hexdigest()
