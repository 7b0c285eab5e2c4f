"""Persistence: the SQLAlchemy models (``models``; the MCP gateway's rows in
``models_gateway``, registered on the same metadata here), the store, engine, crypto."""

from airlock.persistence import models_gateway  # noqa: F401 - every table on Base.metadata
