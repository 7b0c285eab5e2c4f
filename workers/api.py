"""``airlock.workers.api:app``, the ASGI app's public name (DESIGN §5). The HTTP door lives in
``airlock.workers.http.api``; the app is built there on first access, not at import."""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    from airlock.workers.http import api  # noqa: PLC0415 - the door, when asked

    if name in ("app", "default_app", "create_app"):
        return getattr(api, name)
    raise AttributeError(f"module 'airlock.workers.api' has no attribute {name!r}")
