"""The ``airlock`` command's app, what its commands share, and its one answer table:
the service's errors as exit codes, for every command.

Exit codes: 0 done · 1 refused (the run is not in a state that allows it) ·
2 bad usage or configuration · 3 the database is not ready (no tables, a schema behind
or ahead of this version's, or a database that cannot be reached) · 4 no such run.
"""

from __future__ import annotations

import sys
from functools import lru_cache
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from typer.core import TyperGroup

from airlock.workers.cli.output import errors, fail

if TYPE_CHECKING:
    from airlock.loop.errors import AirlockError
    from airlock.persistence.domain import Run
    from airlock.workers.service import Service

NOT_READY = 3
"""The exit code of a command whose database is not ready for it."""


def answers() -> tuple[tuple[type[AirlockError], int], ...]:
    """The exit code of each error the service raises for what it was asked (the first
    that matches); any other is a bug, and shows its traceback. Imported when a command
    failed: by then it has loaded them (``--help`` loads none of them)."""
    from airlock.loop import DecisionError, StateError
    from airlock.persistence.db import ConfigurationError
    from airlock.persistence.store import BadCursorError, UnknownRunError
    from airlock.workers.service import ConflictError, ForbiddenError
    from airlock.workers.service.registry import UnknownAgentError

    return (
        (UnknownRunError, 4),
        (UnknownAgentError, 2),
        (BadCursorError, 2),
        (DecisionError, 2),
        (ConfigurationError, 2),
        (ConflictError, 1),
        (ForbiddenError, 1),
        (StateError, 1),
    )


STREAMS_GRACE = 5
"""Seconds a stopping API waits for its responses to end before it closes them: uvicorn
waits for every one, and a live event stream does not end by itself (its client
resumes from its last event id, on another replica or this one restarted)."""


def exit_code(exc: BaseException) -> int | None:
    if "airlock.loop.errors" not in sys.modules:  # no AirlockError can have been raised
        return None
    from airlock.loop.errors import AirlockError

    if not isinstance(exc, AirlockError):
        return None
    return next((code for kind, code in answers() if isinstance(exc, kind)), None)


class Answering(TyperGroup):
    """Typer's group (its ``cls`` extension point), answering the service's errors with
    one line and the table's exit code, whichever command raised them."""

    def invoke(self, ctx: Any) -> Any:  # typer.Context (its click, vendored)
        try:
            return super().invoke(ctx)
        except Exception as exc:
            code = exit_code(exc)
            if code is None:
                raise
            errors.print(f"[red]airlock:[/red] {exc}", highlight=False, soft_wrap=True)
            raise typer.Exit(code) from exc


app = typer.Typer(
    cls=Answering,
    name="airlock",
    help="Durable, human-approved LLM agent tool calls on Celery.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
)
db_app = typer.Typer(help="Database schema (Alembic migrations).", no_args_is_help=True)
runs_app = typer.Typer(help="Inspect runs.", no_args_is_help=True)
app.add_typer(db_app, name="db")
app.add_typer(runs_app, name="runs")

PASSTHROUGH = {"allow_extra_args": True, "ignore_unknown_options": True}
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]


def service() -> Service:
    """The service, once the database is known to be this version's: before that,
    nothing is built (no SQLite file, no broker folder is made by a command that fails)."""
    ready_database()
    return built()


@lru_cache(maxsize=1)
def built() -> Service:
    """The command's one service. It publishes through the Celery runtime, imported when
    a command first publishes: a command that only reads (``runs list``, ``stats``) loads
    no Celery. No notification dispatcher runs in a command: nothing to wake."""
    from airlock.workers.service.assembly import build_service
    from airlock.workers.service.settings import settings

    return build_service(settings(), publish)


def publish(run_id: str, delay: float | None = None) -> None:
    from airlock.workers.tasks.broker import enqueue_segment

    enqueue_segment(run_id, delay)


@lru_cache(maxsize=1)
def ready_database() -> None:
    """Exit 3, saying in one line what is wrong and what fixes it, unless the
    database's schema is this version's."""
    from airlock.persistence import schema
    from airlock.workers.service.settings import settings

    status = schema.check_url(settings().database_url)
    if not status.ready:
        fail(status.problem, NOT_READY)


def require_run(run_id: str) -> Run:
    """The run, or exit 4 (the answer table's ``UnknownRunError``)."""
    return service().get_run(run_id)


def one_line(message: str, code: int) -> NoReturn:
    """``message`` on one line of stderr, however long (for logs and healthchecks)."""
    typer.echo(f"airlock: {message}", err=True)
    raise typer.Exit(code)
