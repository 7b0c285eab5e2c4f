"""Persistence: the SQLAlchemy models (``models``; the MCP rows in ``models_mcp``,
registered on the same metadata here), the store, engine, crypto."""

from airlock.persistence import models_mcp  # noqa: F401 - every table on Base.metadata
