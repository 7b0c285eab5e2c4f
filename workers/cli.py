"""The ``airlock`` command: a thin shell over the service layer."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from alembic.config import Config as AlembicConfig

from alembic import command as alembic_command
from persistence.db import ConfigurationError
from workers.settings import settings

ROOT = Path(__file__).resolve().parent.parent

app = typer.Typer(
    name="airlock",
    help="Durable, human-approved LLM agent tool calls on Celery.",
    no_args_is_help=True,
    add_completion=False,
)
db_app = typer.Typer(help="Database schema (Alembic migrations).", no_args_is_help=True)
app.add_typer(db_app, name="db")

PASSTHROUGH = {"allow_extra_args": True, "ignore_unknown_options": True}


def alembic_config(url: str) -> AlembicConfig:
    cfg = AlembicConfig(str(ROOT / "alembic.ini"))
    cfg.attributes["url"] = url
    return cfg


@db_app.command("upgrade")
def db_upgrade(revision: Annotated[str, typer.Argument(help="Target revision.")] = "head") -> None:
    """Apply migrations to AIRLOCK_DATABASE_URL (default: sqlite:///./airlock.db)."""
    alembic_command.upgrade(alembic_config(settings().database_url), revision)
    typer.echo(f"database at {settings().database_url} is at revision {revision}")


@app.command(context_settings=PASSTHROUGH)
def worker(ctx: typer.Context) -> None:
    """Run a Celery worker (extra arguments go to `celery worker`, e.g. -c 4 -l info)."""
    from workers.celery_app import app as celery  # noqa: PLC0415 - load Celery on demand

    celery.worker_main(["worker", *ctx.args])


@app.command(context_settings=PASSTHROUGH)
def beat(ctx: typer.Context) -> None:
    """Run Celery beat: the sweeper, approval expiry and retention purge."""
    from workers.celery_app import app as celery  # noqa: PLC0415 - load Celery on demand

    celery.start(["beat", *ctx.args])


@app.command()
def api(
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    workers: Annotated[int, typer.Option(help="Worker processes.")] = 1,
) -> None:
    """Serve the HTTP API (workers.api:app) with uvicorn."""
    import uvicorn  # noqa: PLC0415 - load the server on demand

    settings()  # fail now, naming the variable, on bad configuration
    uvicorn.run("workers.api:app", host=host, port=port, workers=workers)


def main() -> None:
    try:
        app()
    except ConfigurationError as exc:
        typer.secho(f"airlock: {exc}", err=True, fg="red")
        raise SystemExit(2) from exc


if __name__ == "__main__":
    main()
