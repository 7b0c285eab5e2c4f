"""Persistence: the SQLAlchemy models (split over ``models``, ``models_mcp`` and
``models_tallies``; ``metadata`` holds every table), the store, engine, crypto."""
