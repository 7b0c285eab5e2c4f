"""Persistence: the SQLAlchemy models (``models``; the MCP rows in ``models_mcp`` and
the tallies in ``models_tallies``, registered on the same metadata here), the store,
engine, crypto."""

from airlock.persistence import models_mcp, models_tallies  # noqa: F401 - every table on the metadata
