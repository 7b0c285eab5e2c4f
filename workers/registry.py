"""The agents this deployment offers, loaded from ``AIRLOCK_AGENTS``."""

from __future__ import annotations

import importlib
from collections.abc import Iterable

from loop import Agent
from persistence.db import ConfigurationError


class UnknownAgentError(LookupError):
    """No agent of this name is configured."""


class Registry:
    def __init__(self, agents: Iterable[Agent]) -> None:
        self._agents: dict[str, Agent] = {}
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

    def get(self, name: str) -> Agent:
        try:
            return self._agents[name]
        except KeyError:
            known = ", ".join(sorted(self._agents)) or "none"
            raise UnknownAgentError(f"unknown agent {name!r} (configured: {known})") from None

    def __contains__(self, name: object) -> bool:
        return name in self._agents

    @property
    def names(self) -> list[str]:
        return sorted(self._agents)


def _load(path: str) -> list[Agent]:
    module_name, _, attribute = path.partition(":")
    try:
        value = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise ConfigurationError(f"AIRLOCK_AGENTS: cannot load {path!r}: {exc}") from exc
    items = value if isinstance(value, list | tuple) else [value]
    if not all(isinstance(a, Agent) for a in items):
        raise ConfigurationError(f"AIRLOCK_AGENTS: {path!r} is not an Agent or a list of Agents")
    return list(items)
