"""Persistence: the SQLAlchemy models (split over ``models``, ``models_mcp``,
``models_tallies`` and ``models_gateway``; ``metadata`` holds every table), the store,
engine, crypto."""
