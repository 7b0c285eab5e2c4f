"""Exceptions raised by the loop. Every error derives from :class:`AirlockError`."""

from __future__ import annotations


class AirlockError(Exception):
    """Airlock failed."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())


class ToolArgumentsError(AirlockError):
    """The arguments do not match the tool's schema."""


class DecisionError(AirlockError):
    """The decisions do not fit the suspended turn."""


class StateError(AirlockError):
    """The suspended run state is malformed or has been tampered with."""


class StateVersionError(StateError):
    """The suspended run state was written by a newer Airlock."""


class ScriptExhaustedError(AirlockError):
    """The scripted model was called more times than it has steps."""


class ModelError(AirlockError):
    """The model call failed.

    ``retryable`` is a property of the error: transient provider failures (429,
    5xx, timeouts) are retried by the worker, everything else fails the run.
    """

    def __init__(
        self,
        message: str | None = None,
        *,
        retryable: bool = False,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.retry_after = retry_after
