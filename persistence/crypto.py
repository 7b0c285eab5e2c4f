"""Encryption at rest (Fernet: AES-CBC + HMAC-SHA256, authenticated).

``AIRLOCK_STATE_KEY`` holds one key, or several separated by commas: the first
encrypts, all decrypt (key rotation). With a key set, everything that holds prompt
or tool data is sealed: the checkpoint, a run's input, output and error, event
payloads, the ledger's arguments and results, decisions and notification bodies.

The checkpoint decides what runs next, so it is opened strictly: with a key set,
a plaintext checkpoint is refused as possibly tampered with. The other columns
are records; a plaintext value (written before the key was set) is read as it is.
Without a key, a value that would read as sealed is escaped, so it round-trips.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

from airlock.loop import StateError
from airlock.persistence.db import ConfigurationError

PREFIX = "fernet:"
_PLAIN = "plain:"
"""Marks a plaintext value that begins like a sealed one (or like this mark)."""
SEALED_MARKS = (PREFIX, _PLAIN)
"""How a text value that may need opening begins."""
_SEALED_KEY = "$sealed"
_PLAIN_KEY = "$plain"


class StateCipher:
    def __init__(self, keys: str | None = None) -> None:
        self._fernet: MultiFernet | None = None
        if keys:
            try:
                self._fernet = MultiFernet(
                    [Fernet(k.strip()) for k in keys.split(",") if k.strip()]
                )
            except ValueError as exc:
                raise ConfigurationError(
                    "AIRLOCK_STATE_KEY must be one or more comma-separated Fernet keys "
                    "(32 url-safe base64-encoded bytes; make one with "
                    "cryptography's Fernet.generate_key())"
                ) from exc

    @property
    def enabled(self) -> bool:
        return self._fernet is not None

    # -- the checkpoint: strict ------------------------------------------------------

    def seal(self, plaintext: str) -> str:
        if self._fernet is None:
            return plaintext
        return PREFIX + self._fernet.encrypt(plaintext.encode("utf-8", "surrogatepass")).decode()

    def open(self, stored: str) -> str:
        encrypted = stored.startswith(PREFIX)
        if self._fernet is None:
            if encrypted:
                raise StateError("suspended state is encrypted but AIRLOCK_STATE_KEY is not set")
            return stored
        if not encrypted:
            raise StateError(
                "suspended state is not encrypted although AIRLOCK_STATE_KEY is set; refusing it"
            )
        return self._decrypt(stored, "suspended state")

    def _decrypt(self, stored: str, what: str) -> str:
        if self._fernet is None:
            raise StateError(f"{what} is encrypted but AIRLOCK_STATE_KEY is not set")
        try:
            token = stored[len(PREFIX) :].encode()
            return self._fernet.decrypt(token).decode("utf-8", "surrogatepass")
        except InvalidToken as exc:
            raise StateError(
                f"{what} cannot be decrypted: it was tampered with or sealed with another key"
            ) from exc

    # -- records: text and JSON ------------------------------------------------------

    def seal_text(self, value: str) -> str:
        if self._fernet is not None:
            return self.seal(value)
        if value.startswith((PREFIX, _PLAIN)):
            return _PLAIN + value
        return value

    def open_text(self, stored: str, what: str = "a run's data") -> str:
        """Raises ``StateError`` for a sealed value that cannot be opened."""
        if stored.startswith(PREFIX):
            return self._decrypt(stored, what)
        if stored.startswith(_PLAIN):
            return stored[len(_PLAIN) :]
        return stored

    def seal_json(self, value: Mapping[str, Any]) -> dict[str, Any]:
        if self._fernet is not None:
            return {_SEALED_KEY: self.seal(json.dumps(value, separators=(",", ":")))}
        if len(value) == 1 and (_SEALED_KEY in value or _PLAIN_KEY in value):
            return {_PLAIN_KEY: dict(value)}
        return value if isinstance(value, dict) else dict(value)  # no copy on the hot path

    def open_json(self, stored: Mapping[str, Any], what: str = "a run's data") -> dict[str, Any]:
        """Raises ``StateError`` for a sealed value that cannot be opened."""
        if len(stored) == 1:
            sealed = stored.get(_SEALED_KEY)
            if isinstance(sealed, str):
                opened: dict[str, Any] = json.loads(self._decrypt(sealed, what))
                return opened
            plain = stored.get(_PLAIN_KEY)
            if isinstance(plain, dict):
                return plain
        return dict(stored)
