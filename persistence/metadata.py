"""Every table on the one metadata: the models are split over modules, and a table is on
``Base.metadata`` once its module is imported (Alembic's comparison, ``drop_all``)."""

from airlock.persistence import (  # noqa: F401 - their tables
    models_gateway,
    models_mcp,
    models_tallies,
)
from airlock.persistence.models import Base

METADATA = Base.metadata
