"""What the client raises: every refusal of the API as an ``AirlockError`` of its status,
carrying the problem+json it was answered with."""

from __future__ import annotations

from typing import Any

import httpx

from airlock.loop.errors import AirlockError as _Root


class AirlockError(_Root):
    """The Airlock API refused the request."""

    def __init__(self, status: int, problem: dict[str, Any]) -> None:
        detail = problem.get("detail") or problem.get("title") or f"HTTP {status}"
        super().__init__(f"{status}: {detail}")
        self.status = status
        self.problem = problem
        """The problem+json (``type``, ``title``, ``status``, ``detail``)."""


class BadRequestError(AirlockError):
    """400."""


class UnauthorizedError(AirlockError):
    """401: no credential, a bad one, or a bad signature."""


class ForbiddenError(AirlockError):
    """403: the principal may not do this."""


class NotFoundError(AirlockError):
    """404: no such run."""


class ConflictError(AirlockError):
    """409: the run is not in a state that allows this, or another decision won."""


class GoneError(AirlockError):
    """410: the stream's cursor was purged."""


class PayloadTooLargeError(AirlockError):
    """413."""


class UnprocessableError(AirlockError):
    """422: malformed for the API (an unknown agent or call id, a bad cursor)."""


class TooManyRequestsError(AirlockError):
    """429."""


class ServerError(AirlockError):
    """5xx."""


class ServiceUnavailableError(ServerError):
    """503: the API's database or schema is not ready, or approvals are not configured."""


BY_STATUS: dict[int, type[AirlockError]] = {
    400: BadRequestError,
    401: UnauthorizedError,
    403: ForbiddenError,
    404: NotFoundError,
    409: ConflictError,
    410: GoneError,
    413: PayloadTooLargeError,
    422: UnprocessableError,
    429: TooManyRequestsError,
    503: ServiceUnavailableError,
}


class InvalidSignatureError(_Root):
    """The notification's signature does not verify with the secret."""


class WaitTimeoutError(_Root, TimeoutError):
    """The run neither waited for a decision nor finished in time."""


def error_of(response: httpx.Response) -> AirlockError:
    """The refusal ``response`` (status 400 or above) as the error of its status."""
    try:
        problem = response.json()
    except ValueError:
        problem = None
    if not isinstance(problem, dict):
        problem = {"title": response.reason_phrase, "status": response.status_code}
        problem["detail"] = response.text[:500] or response.reason_phrase
    kind = BY_STATUS.get(response.status_code)
    if kind is None:
        kind = ServerError if response.status_code >= 500 else AirlockError
    return kind(response.status_code, problem)
