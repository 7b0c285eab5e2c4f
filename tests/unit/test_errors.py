"""One error root: every public error Airlock raises is an ``AirlockError``, so a caller
can catch Airlock's errors apart from everyone else's."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

from airlock import loop, persistence, providers, workers
from airlock.loop import AirlockError
from airlock.loop.runner import ApprovalRequired
from airlock.workers.http.problems import PROBLEMS, problem_of

CONTROL_FLOW = {ApprovalRequired}
"""Raised and caught inside the loop, never seen by a caller."""


def _modules() -> list[str]:
    names = []
    for package in (loop, persistence, providers, workers):
        names.append(package.__name__)
        for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
            if ".migrations." not in info.name and not info.name.endswith("__main__"):
                names.append(info.name)
    return names


def test_every_public_error_is_an_airlock_error() -> None:
    outside = []
    for name in _modules():
        module = importlib.import_module(name)
        for attr, value in vars(module).items():
            defined_here = inspect.isclass(value) and value.__module__ == name
            if not defined_here or attr.startswith("_") or not issubclass(value, BaseException):
                continue
            if value not in CONTROL_FLOW and not issubclass(value, AirlockError):
                outside.append(f"{name}.{attr}")
    assert not outside, outside


def test_the_http_doors_table_answers_each_error_by_its_own_kind() -> None:
    """One answer table for the HTTP door (``airlock.workers.http.problems.PROBLEMS``): every kind
    in
    it is an ``AirlockError``, and a subclass comes before its base, or the base's
    answer would be given for it (an idempotency mismatch as a plain conflict)."""
    kinds = list(PROBLEMS)
    assert all(issubclass(kind, AirlockError) for kind in kinds)
    for i, kind in enumerate(kinds):
        assert not any(issubclass(kind, base) for base in kinds[:i]), kind
        status, title, type_ = PROBLEMS[kind]
        problem = problem_of(kind("refused"))
        assert (problem.status, problem.title, problem.type) == (status, title, type_), kind
