"""Standing grants end to end: a real worker on Redis and PostgreSQL. An approver
approves a refund and grants it: a repeat of exactly the same call (another run) is
released and runs without a person, a changed one waits; revoking the grant stops it."""

from __future__ import annotations

import pytest

from airlock.persistence.domain import RunStatus
from airlock.workers.service.decisions import DecisionBody, GrantBody
from airlock.workers.service.principals import Principal
from airlock.workers.testing import Stack
from tests.integration.conftest import StackFactory

pytestmark = pytest.mark.integration

SUPPORT = Principal.of_client("support-desk", frozenset({"support"}), "sasha")


@pytest.fixture
def deployment(make_stack: StackFactory, postgres_url: str, shared_redis: str) -> Stack:
    stack = make_stack(AIRLOCK_DATABASE_URL=postgres_url, AIRLOCK_BROKER_URL=shared_redis)
    stack.worker()
    return stack


def refund(stack: Stack, amount: int) -> str:
    run, _ = stack.service.start_run("refund_asked", f"refund order 17: {amount}")
    return run.id


def test_a_grant_releases_the_same_call_not_a_changed_one_until_revoked(
    deployment: Stack,
) -> None:
    first = refund(deployment, 5_000)
    waiting = deployment.wait_status(first, RunStatus.WAITING_FOR_APPROVAL)
    assert waiting.turn_digest is not None
    body = DecisionBody(
        turn_digest=waiting.turn_digest,
        decision="approve",
        grant=GrantBody(scope="call", expires_in="1h"),
    )
    assert deployment.service.record_decision(first, body, SUPPORT).result == "recorded"
    deployment.wait_status(first, RunStatus.COMPLETED)
    (grant,) = deployment.service.grants.list()

    repeat = refund(deployment, 5_000)
    run = deployment.wait_status(repeat, RunStatus.COMPLETED)
    assert run.output == "the tool said: refunded 5000 cents on order 17"
    assert "waiting_for_approval" not in deployment.kinds(repeat)
    (decision,) = [e.payload for e in deployment.service.events(repeat) if e.kind == "decision"]
    assert (decision["source"], decision["approver"]) == ("grant", "sasha")
    assert deployment.executions()[f"refund {repeat}:call_0_0"] == 1

    changed = refund(deployment, 5_001)
    deployment.wait_status(changed, RunStatus.WAITING_FOR_APPROVAL)
    assert deployment.executions()[f"refund {changed}:call_0_0"] == 0

    deployment.service.grants.revoke(grant.id, by=SUPPORT)
    after = refund(deployment, 5_000)
    deployment.wait_status(after, RunStatus.WAITING_FOR_APPROVAL)
    assert deployment.executions()[f"refund {after}:call_0_0"] == 0
    assert deployment.service.grants.get(grant.id).uses == 1
