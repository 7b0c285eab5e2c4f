"""Alembic, configured for a database URL: the one place the CLI, the demo and the tests
find the migrations. They live in the repository's ``alembic/`` folder (``env.py``,
``script.py.mako``, ``versions/``) and ship in the wheel as ``airlock/migrations``
(``airlock/migrations`` links to ``alembic/`` in a checkout), found with
``importlib.resources``, so an installed wheel migrates from any folder;
``alembic.ini`` at the repository's root points at ``alembic/`` for developers."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from alembic import command
from alembic.config import Config


def location() -> Path:
    """The folder of the migration scripts, wherever the package is installed."""
    return Path(str(files("airlock") / "migrations"))


def alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(location()))
    cfg.attributes["url"] = url
    cfg.attributes["configure_logging"] = False
    return cfg


MIGRATION_LOCK = 0x4149524C  # "AIRL"
"""The PostgreSQL advisory lock every migrator takes in its transaction (env.py):
replicas that run ``airlock db upgrade`` at once (an init container each) migrate one
after the other, the later ones finding the schema at head, instead of racing on the
DDL."""


def upgrade(url: str, revision: str = "head") -> None:
    command.upgrade(alembic_config(url), revision)
