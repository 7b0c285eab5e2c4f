"""Errors as ``application/problem+json``: the one table of how the service's errors
are answered, and responses a lone surrogate cannot break."""

from __future__ import annotations

import json
from typing import Any

from fastapi.responses import JSONResponse

from airlock.loop import AirlockError, DecisionError, StateError
from airlock.persistence.schema import SchemaState, SchemaStatus
from airlock.persistence.store import BadCursorError, UnknownRunError
from airlock.workers.service import ConflictError, IdempotencyMismatchError
from airlock.workers.service.principals import ForbiddenError
from airlock.workers.service.registry import UnknownAgentError


class ProblemError(AirlockError):
    """An error answered as application/problem+json."""

    def __init__(self, status: int, title: str, detail: str, *, type: str = "about:blank") -> None:
        super().__init__(detail)
        self.status = status
        self.title = title
        self.detail = detail
        self.type = type


APPROVAL_EXPIRED = "/problems/approval-expired"
"""The problem type of a decision that came after the approval's ``expires_at``."""
IDEMPOTENCY_MISMATCH = "/problems/idempotency-mismatch"
"""The problem type of a create that reuses its caller's idempotency key for another
request."""
SCHEMA_NOT_READY = "/problems/schema-not-ready"
"""The problem type of a request to an API whose database has no tables, or a schema
behind (or ahead of) this version's: ``airlock db upgrade`` fixes it."""
DATABASE_UNAVAILABLE = "/problems/database-unavailable"
"""The problem type of a request to an API that cannot reach its database."""

PROBLEMS: dict[type[Exception], tuple[int, str, str]] = {
    IdempotencyMismatchError: (409, "Idempotency key reused", IDEMPOTENCY_MISMATCH),
    UnknownRunError: (404, "Not found", "about:blank"),
    ConflictError: (409, "Conflict", "about:blank"),
    ForbiddenError: (403, "Forbidden", "about:blank"),
    StateError: (409, "Unreadable state", "about:blank"),
    DecisionError: (422, "Decision refused", "about:blank"),
    BadCursorError: (422, "Bad cursor", "about:blank"),
    UnknownAgentError: (422, "Unknown agent", "about:blank"),
}
"""How the service's errors (each an ``AirlockError``) are answered: status, title and
problem type, the first kind the error is an instance of (a subclass before its
base). Every route lets them through to the app's exception handlers, which answer
from here (``refusal``); so does the ``BodyGate`` for a ``ProblemError``."""


REFUSALS: tuple[type[Exception], ...] = (ProblemError, *PROBLEMS)
"""What a route may raise to refuse a request (``refusal``)."""


def refusal(exc: Exception) -> JSONResponse:
    """The answer to a request refused by ``exc`` (one of ``REFUSALS``), wherever it
    was raised: the app's exception handlers (``airlock.workers.http.api``) answer every route with
    it."""
    p = exc if isinstance(exc, ProblemError) else problem_of(exc)
    return problem_response(p.status, p.title, p.detail, type=p.type)


def problem_of(exc: Exception) -> ProblemError:
    if isinstance(exc, ConflictError) and exc.expired:
        return ProblemError(409, "Approval expired", str(exc), type=APPROVAL_EXPIRED)
    status, title, type = next(p for kind, p in PROBLEMS.items() if isinstance(exc, kind))
    return ProblemError(status, title, str(exc), type=type)


class SafeJSONResponse(JSONResponse):
    """JSON that a lone surrogate (in a model's or a tool's text) cannot break: it is
    written as its ``\\ud800`` escape instead of failing the response."""

    def render(self, content: Any) -> bytes:
        try:
            return super().render(content)
        except UnicodeEncodeError:
            return json.dumps(content, separators=(",", ":")).encode()


def problem_response(
    status: int, title: str, detail: str, *, type: str = "about:blank"
) -> JSONResponse:
    return JSONResponse(
        {"type": type, "title": title, "status": status, "detail": detail},
        status_code=status,
        media_type="application/problem+json",
    )


def schema_problem(status: SchemaStatus) -> JSONResponse:
    """503: the database is not ready for this version (``status``), said without its
    URL."""
    if status.state is SchemaState.UNREACHABLE:
        title, type = "Database unavailable", DATABASE_UNAVAILABLE
    else:
        title, type = "Database schema not ready", SCHEMA_NOT_READY
    return problem_response(503, title, status.explain(named=False), type=type)
