"""One error root: every public error Airlock raises is an ``AirlockError``, so a caller
can catch Airlock's errors apart from everyone else's."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import loop
import persistence
import providers
import workers
from loop import AirlockError
from loop.runner import ApprovalRequired

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
