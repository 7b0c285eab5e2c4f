"""Every table on the one metadata: the models are split over modules, and a table is on
``Base.metadata`` once its module is imported (Alembic's comparison, ``drop_all``)."""

from airlock.persistence import models_mcp, models_tallies  # noqa: F401 - their tables
from airlock.persistence.models import Base

METADATA = Base.metadata
