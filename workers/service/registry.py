"""The agents this deployment offers, loaded from ``AIRLOCK_AGENTS``.

Whatever command loads them (``airlock api``, ``run``, ``approve``, ``worker``, ``dev``,
``celery -A airlock.workers``…), their modules are looked for in the current folder first, then
on the Python path, as ``python -m``, ``celery`` and ``uvicorn`` look for an app."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import traceback
from collections.abc import Iterable
from types import ModuleType

from airlock.loop import Agent, AirlockError
from airlock.persistence.db import ConfigurationError

GATEWAY = "mcp"
"""The MCP gateway's built-in agent (present where ``AIRLOCK_MCP_SERVERS`` is set)."""


class UnknownAgentError(AirlockError, LookupError):
    """No agent of this name is configured."""


class Registry:
    def __init__(self, agents: Iterable[Agent], built_in: Iterable[str] = ()) -> None:
        self._agents: dict[str, Agent] = {}
        self._built_in = frozenset(built_in)
        """Agents of Airlock's own (the MCP gateway's ``mcp``): their runs are started by
        Airlock alone, never by a caller's request."""
        for agent in agents:
            if agent.name in self._agents:
                raise ConfigurationError(f"AIRLOCK_AGENTS: two agents are named {agent.name!r}")
            self._agents[agent.name] = agent

    @classmethod
    def from_paths(cls, paths: str) -> Registry:
        agents: list[Agent] = []
        for path in (p.strip() for p in paths.split(",") if p.strip()):
            agents.extend(_load(path))
        return cls(agents)

    def with_agent(self, agent: Agent) -> Registry:
        """This registry and ``agent`` (a built-in one); two of one name are refused."""
        return Registry([*self._agents.values(), agent], {*self._built_in, agent.name})

    def startable(self, name: str) -> Agent:
        """The agent ``name``, for a caller's new run: a built-in one is refused (the
        gateway's runs hold exactly the call it judged, under its rules)."""
        if name in self._built_in:
            raise UnknownAgentError(
                f"agent {name!r} is Airlock's own (the MCP gateway's): its runs are started "
                "by calls to /mcp or airlock gateway, not by a request for a run"
            )
        return self.get(name)

    def get(self, name: str) -> Agent:
        try:
            return self._agents[name]
        except KeyError:
            known = ", ".join(sorted(self._agents)) or "none"
            hint = " (the MCP gateway's agent: set AIRLOCK_MCP_SERVERS)" if name == GATEWAY else ""
            raise UnknownAgentError(f"unknown agent {name!r}{hint} (configured: {known})") from None

    def __contains__(self, name: object) -> bool:
        return name in self._agents

    @property
    def names(self) -> list[str]:
        return sorted(self._agents)


def _load(path: str) -> list[Agent]:
    module_name, colon, attribute = (part.strip() for part in path.partition(":"))
    if not (module_name and colon and attribute):
        raise ConfigurationError(
            f"AIRLOCK_AGENTS: {path!r} is not of the form module:NAME (e.g. myagents:AGENTS)"
        )
    module = _import(module_name, path)
    try:
        value = getattr(module, attribute)
    except AttributeError:
        known = ", ".join(_agents_in(module)) or "none"
        raise ConfigurationError(
            f"AIRLOCK_AGENTS: module {module_name!r} ({_file_of(module)}) has no {attribute!r} "
            f"(the agents it has: {known})"
        ) from None
    items = value if isinstance(value, list | tuple) else [value]
    if not all(isinstance(a, Agent) for a in items):
        raise ConfigurationError(f"AIRLOCK_AGENTS: {path!r} is not an Agent or a list of Agents")
    return list(items)


def current_folder_first() -> None:
    """The current folder first on ``sys.path`` (unless it is on it already), as
    ``python -m``, ``celery`` and ``uvicorn`` have it."""
    try:
        here = os.getcwd()
    except OSError:  # a folder removed under the process: nothing to find there
        return
    if not any(os.path.abspath(entry or os.curdir) == here for entry in sys.path):
        sys.path.insert(0, here)


def _import(module_name: str, path: str) -> ModuleType:
    """``module_name``, or a ``ConfigurationError`` that says where it was looked for and
    how to make it found, or where importing it failed."""
    current_folder_first()
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (module_name + ".").startswith(exc.name + "."):
            raise ConfigurationError(_not_found(module_name, path)) from exc
        raise ConfigurationError(_failed(module_name, exc)) from exc
    except Exception as exc:  # the module's own code failed: say where
        raise ConfigurationError(_failed(module_name, exc)) from exc


def _not_found(module_name: str, path: str) -> str:
    file = module_name.replace(".", os.sep) + ".py"
    return (
        f"AIRLOCK_AGENTS: cannot load {path!r}: no module {module_name!r} ({file}) in "
        f"{', '.join(_searched(module_name))}. Run the command from the folder that holds "
        f"{file}, or add that folder to PYTHONPATH (PYTHONPATH=/path/to/folder); "
        "AIRLOCK_AGENTS is module:NAME, comma-separated (e.g. myagents:AGENTS)"
    )


def _searched(module_name: str) -> list[str]:
    """The folders ``module_name`` was looked for in: its package's, or the path's."""
    parent = module_name.rpartition(".")[0]
    if parent:
        try:
            spec = importlib.util.find_spec(parent)
        except ImportError:
            spec = None
        if spec is not None and spec.submodule_search_locations is not None:
            return list(spec.submodule_search_locations)
    folders = (os.path.abspath(entry or os.curdir) for entry in sys.path)
    return [folder for folder in dict.fromkeys(folders) if os.path.isdir(folder)]


def _failed(module_name: str, exc: BaseException) -> str:
    """Importing the module failed in its own code (or in a module it imports)."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = next((f for f in reversed(frames) if not f.filename.startswith("<frozen")), None)
    at = f" at {where.filename}:{where.lineno}" if where is not None else ""
    return (
        f"AIRLOCK_AGENTS: importing module {module_name!r} failed{at}: {type(exc).__name__}: {exc}"
    )


def _file_of(module: ModuleType) -> str:
    return getattr(module, "__file__", None) or module.__name__


def _agents_in(module: ModuleType) -> list[str]:
    def holds_agents(value: object) -> bool:
        items = value if isinstance(value, list | tuple) else [value]
        return bool(items) and all(isinstance(a, Agent) for a in items)

    return sorted(name for name, value in vars(module).items() if holds_agents(value))
