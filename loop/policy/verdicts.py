"""What a policy file decides about one gated call: the verdict, the rule that made it
and the file's digest, recorded with the call when its turn is judged (once, at
suspension) so that no reload changes it."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

Verdict = Literal["allow", "ask", "deny"]
ExpiryDefault = Literal["deny", "cancel"]

RANK: dict[Verdict, int] = {"allow": 0, "ask": 1, "deny": 2}

NO_RULE = "(no rule matched)"
"""The rule named by a fail-closed ``ask`` that no rule of the file decided."""


@dataclass(frozen=True, slots=True)
class Judgement:
    """A verdict on one call, and why.

    ``approvers``: role sets a deciding principal must hold one role of each (a layer
    or a code declaration that asks adds its set: the strictest wins). ``expires_in``
    in seconds. ``error``: why evaluation failed closed (a missing or mistyped argument).
    """

    verdict: Verdict
    rule: str
    sha256: str
    reason: str = ""
    approvers: tuple[tuple[str, ...], ...] = ()
    quorum: int = 1
    expires_in: float | None = None
    default: ExpiryDefault | None = None
    edits: bool = True
    error: str | None = None

    def line(self) -> str:
        """One line for a person: ``ask by rule "x" (policy 1a2b3c4d)``."""
        why = f": {self.error}" if self.error else (f": {self.reason}" if self.reason else "")
        return f'{self.verdict} by rule "{self.rule}" (policy {self.sha256[:12]}){why}'


def strictest(first: Judgement, second: Judgement) -> Judgement:
    """The stricter of two judgements (deny > ask > allow); two asks merge: every role
    set, the larger quorum, the shorter expiry, ``cancel`` over ``deny``, edits only
    when both allow them. The first names the rule when they tie."""
    if RANK[first.verdict] != RANK[second.verdict]:
        return first if RANK[first.verdict] > RANK[second.verdict] else second
    if first.verdict != "ask":
        return first
    expiries = [e for e in (first.expires_in, second.expires_in) if e is not None]
    defaults = {first.default, second.default}
    sets = first.approvers + tuple(s for s in second.approvers if s not in first.approvers)
    return replace(
        first,
        rule=first.rule if first.rule == second.rule else f"{first.rule} + {second.rule}",
        approvers=sets,
        quorum=max(first.quorum, second.quorum),
        expires_in=min(expiries) if expiries else None,
        default="cancel" if "cancel" in defaults else ("deny" if "deny" in defaults else None),
        edits=first.edits and second.edits,
        error=first.error or second.error,
    )
