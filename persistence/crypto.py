"""Encryption at rest of ``suspended_state`` (Fernet: AES-CBC + HMAC-SHA256, authenticated).

``AIRLOCK_STATE_KEY`` holds one key, or several separated by commas: the first
encrypts, all decrypt (key rotation).
"""

from __future__ import annotations

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

from loop import StateError
from persistence.db import ConfigurationError

PREFIX = "fernet:"


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

    def seal(self, plaintext: str) -> str:
        if self._fernet is None:
            return plaintext
        return PREFIX + self._fernet.encrypt(plaintext.encode()).decode()

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
        try:
            return self._fernet.decrypt(stored[len(PREFIX) :].encode()).decode()
        except InvalidToken as exc:
            raise StateError(
                "suspended state cannot be decrypted: "
                "it was tampered with or sealed with another key"
            ) from exc
