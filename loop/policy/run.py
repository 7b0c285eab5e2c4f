"""The policy a run is judged by: the enforced file, a shadow file (judged and recorded,
never enforced), and the run's facts rules may look at (requester, metadata)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from pydantic import JsonValue

from airlock.loop.policy.evaluate import CallFacts, judge
from airlock.loop.policy.rules import Policy
from airlock.loop.policy.verdicts import Judgement


@dataclass(frozen=True)
class RunPolicy:
    policy: Policy | None = None
    shadow: Policy | None = None
    requester: str | None = None
    metadata: Mapping[str, JsonValue] = field(default_factory=dict)

    def facts(
        self,
        agent: str,
        tool: str,
        arguments: Mapping[str, JsonValue],
        effect: str | None,
        schema: Mapping[str, JsonValue],
    ) -> CallFacts:
        return CallFacts(agent, tool, arguments, effect, self.requester, self.metadata, schema)

    def judge(self, facts: CallFacts) -> Judgement | None:
        return judge(self.policy, facts) if self.policy is not None else None

    def judge_shadow(self, facts: CallFacts) -> Judgement | None:
        return judge(self.shadow, facts) if self.shadow is not None else None
