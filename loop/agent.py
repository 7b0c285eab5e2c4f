"""An agent: a model, its instructions, the tools it is offered and its limits."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum

from pydantic import JsonValue

from airlock.loop.canonical import sha256_hex
from airlock.loop.decisions import PolicyVerdict
from airlock.loop.messages import JsonObject
from airlock.loop.model import Model
from airlock.loop.tools import Tool, approval_rule

ApprovalPolicy = Callable[[Tool, JsonObject], PolicyVerdict]
"""Given a gated call (tool, validated arguments): ``Approve()``, ``Deny(reason)`` or ``Ask()``."""


class ExpiryAction(StrEnum):
    DENY = "deny"
    CANCEL = "cancel"


@dataclass(frozen=True)
class Agent:
    name: str
    model: Model
    tools: Sequence[Tool] = ()
    instructions: str = ""
    max_iterations: int = 10
    token_budget: int | None = None
    approval_policy: ApprovalPolicy | None = None
    approval_ttl: timedelta | None = None
    on_expiry: ExpiryAction = ExpiryAction.DENY
    approvers: Sequence[str] = ()
    """The roles that may decide calls of its tools that name none of their own."""
    self_approval: bool = False
    """Whether a run's requester may decide its calls (by default they may not)."""
    _by_name: dict[str, Tool] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.max_iterations < 1:
            raise ValueError(f"agent {self.name!r}: max_iterations must be at least 1")
        if self.token_budget is not None and self.token_budget < 1:
            raise ValueError(f"agent {self.name!r}: token_budget must be positive or None")
        by_name: dict[str, Tool] = {}
        for t in self.tools:
            if t.name in by_name:
                raise ValueError(f"agent {self.name!r}: two tools are named {t.name!r}")
            by_name[t.name] = t
        object.__setattr__(self, "tools", tuple(self.tools))
        roles, _ = approval_rule(f"agent {self.name!r}", self.approvers, 1)
        object.__setattr__(self, "approvers", roles)
        object.__setattr__(self, "_by_name", by_name)

    def tool(self, name: str) -> Tool | None:
        return self._by_name.get(name)

    def approval_of(self, name: str) -> tuple[tuple[str, ...], int]:
        """Who may decide a call of tool ``name`` (roles; none: anyone), and how many
        distinct principals must approve it."""
        found = self._by_name.get(name)
        if found is None:
            return tuple(self.approvers), 1
        return found.approvers or tuple(self.approvers), found.quorum

    @property
    def tool_names(self) -> tuple[str, ...]:
        return tuple(self._by_name)

    def fingerprint(self) -> str:
        """A digest of the definition that shapes a run (not of the model object)."""
        definition: JsonValue = {
            "name": self.name,
            "instructions": self.instructions,
            "max_iterations": self.max_iterations,
            "token_budget": self.token_budget,
            "tools": [
                {
                    "name": s.name,
                    "description": s.description,
                    "parameters": s.parameters,
                    "effect": t.effect.value,
                }
                for t in self.tools
                for s in [t.schema()]
            ],
        }
        return sha256_hex(definition)
