"""The client's typed results: the run view (``GET /v1/runs/{id}``), its events, the
answer to a decision, and a notification. They mirror the API's OpenAPI document
(a test holds them to the served one) and ignore fields a newer server adds."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, JsonValue

from airlock.persistence.status import RunStatus as RunStatus  # noqa: PLC0414 - one list


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class Usage(_Model):
    prompt_tokens: int
    completion_tokens: int


class PolicyJudgement(_Model):
    """The policy file's judgement of a call, made when the run was suspended."""

    rule: str
    verdict: str
    sha256: str
    reason: str | None
    error: str | None
    approvers: list[list[str]]
    quorum: int
    line: str


class Approval(_Model):
    """One principal's approval of a call, toward its quorum."""

    principal: str
    auth: dict[str, JsonValue]
    decision: str
    arguments: dict[str, JsonValue]
    reason: str | None
    at: datetime | None


class PendingCall(_Model):
    id: str
    name: str
    arguments: dict[str, JsonValue]
    effect: str
    requires_approval: bool
    verdict: str
    """``asks``, ``approved_by_policy``, ``denied_by_policy``, or why no person is asked."""
    policy_reason: str | None
    approvers: list[str] | None
    quorum: int
    approvals: list[Approval]
    policy: PolicyJudgement | None = None


class Pending(_Model):
    """The turn a waiting run waits on: quote ``turn_digest`` in a decision."""

    turn_digest: str | None
    calls: list[PendingCall]
    suspended_at: datetime | None
    expires_at: datetime | None
    error: str | None = None


class Run(_Model):
    """The run view."""

    id: str
    agent: str
    status: RunStatus
    termination: str | None
    iterations: int
    usage: Usage
    output: str | None
    error: str | None
    metadata: dict[str, JsonValue]
    created_at: datetime | None
    updated_at: datetime | None
    pending: Pending | None

    @property
    def settled(self) -> bool:
        """Waiting for a decision, or finished: what ``wait`` waits for."""
        return self.status is RunStatus.WAITING_FOR_APPROVAL or self.status.terminal


class Event(_Model):
    """One event of a run's audit stream."""

    seq: int
    kind: str
    payload: dict[str, JsonValue]
    created_at: datetime | None


class Decision(_Model):
    """What the approval webhook answered: ``recorded`` (this request won: the run
    resumes), ``partial`` (an approval toward a quorum not reached yet), ``duplicate``
    (the same decision again), ``withdrawn``."""

    run_id: str
    result: Literal["recorded", "partial", "duplicate", "withdrawn"]
    decision: dict[str, JsonValue]
    approver: str | None
    approved_by: list[str]
    quorum: int
    grants: list[str] | None = None


class Notification(_Model):
    """An outbound notification, as ``verify_notification`` returns it."""

    type: Literal["run.waiting_for_approval", "run.completed", "run.failed", "run.cancelled"]
    timestamp: datetime
    data: Run
