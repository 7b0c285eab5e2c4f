"""Principals end to end: a real API process verifying tokens of a local issuer (its
JWKS served by the test) and named approval clients' signatures, a real worker on
Redis and PostgreSQL resuming what they decide."""

from __future__ import annotations

import base64
import json
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from standardwebhooks import Webhook

from airlock.persistence.domain import RunStatus
from airlock.workers.testing import SECRET, TOKEN, Stack, wait_for
from tests.integration.conftest import StackFactory
from tests.issuer import AUDIENCE, Issuer

pytestmark = pytest.mark.integration

TREASURY_SECRET = "whsec_" + base64.b64encode(b"treasury-desk-secret-0123456789").decode()
TREASURY = ["treasury"]
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def issuer() -> Iterator[Issuer]:
    with Issuer() as issuer:
        yield issuer


class Deployment:
    def __init__(self, stack: Stack, base: str, issuer: Issuer) -> None:
        self.stack, self.base, self.issuer = stack, base, issuer

    def create(self, agent: str, headers: dict[str, str] = AUTH) -> str:
        created = httpx.post(
            f"{self.base}/v1/runs", json={"agent": agent, "input": "go"}, headers=headers
        )
        assert created.status_code == 201, created.text
        run_id: str = created.json()["id"]
        return run_id

    def view(self, run_id: str) -> dict[str, Any]:
        found: dict[str, Any] = httpx.get(f"{self.base}/v1/runs/{run_id}", headers=AUTH).json()
        return found

    def waiting(self, run_id: str) -> str:
        """The digest of the turn the run comes to wait on."""

        def digest() -> str | None:
            view = self.view(run_id)
            return (
                view["pending"]["turn_digest"] if view["status"] == "waiting_for_approval" else None
            )

        found: str = wait_for(f"run {run_id} to wait", digest, timeout=30)
        return found

    def by_token(
        self, run_id: str, body: dict[str, Any], sub: str, roles: list[str]
    ) -> httpx.Response:
        return httpx.post(
            f"{self.base}/v1/runs/{run_id}/approval",
            json=body,
            headers=self.issuer.bearer(sub, roles),
            timeout=30,
        )

    def signed(
        self, run_id: str, body: dict[str, Any], secret: str, webhook_id: str | None = None
    ) -> httpx.Response:
        data = json.dumps(body)
        webhook_id = webhook_id or f"msg_{uuid.uuid4().hex}"
        now = datetime.now(UTC)
        headers = {
            "webhook-id": webhook_id,
            "webhook-timestamp": str(int(now.timestamp())),
            "webhook-signature": Webhook(secret).sign(webhook_id, now, data),
            "content-type": "application/json",
        }
        return httpx.post(
            f"{self.base}/v1/runs/{run_id}/approval", content=data, headers=headers, timeout=30
        )

    def kinds(self, run_id: str) -> list[str]:
        events = httpx.get(f"{self.base}/v1/runs/{run_id}/events", headers=AUTH).json()["events"]
        return [e["kind"] for e in events]


@pytest.fixture
def deployment(
    make_stack: StackFactory, postgres_url: str, shared_redis: str, issuer: Issuer
) -> Deployment:
    stack = make_stack(
        AIRLOCK_DATABASE_URL=postgres_url,
        AIRLOCK_BROKER_URL=shared_redis,
        AIRLOCK_WEBHOOK_SECRET=SECRET,
        AIRLOCK_API_TOKEN=TOKEN,
    )
    clients = {"treasury-desk": {"secret": TREASURY_SECRET, "roles": TREASURY}}
    base = stack.api(
        AIRLOCK_OIDC_ISSUER=issuer.url,
        AIRLOCK_OIDC_AUDIENCE=AUDIENCE,
        AIRLOCK_APPROVAL_CLIENTS=json.dumps(clients),
    )
    stack.worker()
    return Deployment(stack, base, issuer)


def approve(digest: str) -> dict[str, Any]:
    return {"turn_digest": digest, "decision": "approve"}


def test_roles_and_the_requester_are_enforced_before_a_real_worker_resumes(
    deployment: Deployment,
) -> None:
    d, stack = deployment, deployment.stack
    run_id = d.create("payments")
    digest = d.waiting(run_id)
    # the default client speaks for no role; a token without the role is refused
    assert d.signed(run_id, {**approve(digest), "approver": "eve"}, SECRET).status_code == 403
    assert d.by_token(run_id, approve(digest), "sam", ["support"]).status_code == 403
    # nothing moved: no resume can claim a run that still waits
    assert stack.run(run_id).status is RunStatus.WAITING_FOR_APPROVAL
    assert stack.service.store.decisions.decision_for(run_id, digest) is None
    assert d.by_token(run_id, approve(digest), "paula", ["payments"]).status_code == 202
    stack.wait_status(run_id, RunStatus.COMPLETED)
    assert stack.executions()[f"pay {run_id}:call_0_0"] == 1

    # alice asks; she may not approve; bob may
    mine = d.create("payments", headers=d.issuer.bearer("alice"))
    digest = d.waiting(mine)
    refused = d.by_token(mine, approve(digest), "alice", ["payments"])
    assert refused.status_code == 403 and "requested this run" in refused.json()["detail"]
    assert stack.run(mine).status is RunStatus.WAITING_FOR_APPROVAL
    assert d.by_token(mine, approve(digest), "bob", ["payments"]).status_code == 202
    stack.wait_status(mine, RunStatus.COMPLETED)
    assert stack.executions()[f"pay {mine}:call_0_0"] == 1


def test_a_two_of_three_quorum_resumes_once_under_ten_concurrent_approvals(
    deployment: Deployment,
) -> None:
    """Alice, bob and carol approve, each several times at once; carol also through the
    treasury desk's webhook, delivered twice with one webhook-id: one request decides,
    the worker resumes once, the transfer runs once."""
    d, stack = deployment, deployment.stack
    run_id = d.create("four_eyes")
    digest = d.waiting(run_id)
    replayed = f"msg_{uuid.uuid4().hex}"
    vouched = {**approve(digest), "approver": "carol"}
    senders: list[Callable[[], httpx.Response]] = [
        *(lambda: d.by_token(run_id, approve(digest), "alice", TREASURY) for _ in range(3)),
        *(lambda: d.by_token(run_id, approve(digest), "bob", TREASURY) for _ in range(3)),
        *(lambda: d.by_token(run_id, approve(digest), "carol", TREASURY) for _ in range(2)),
        *(lambda: d.signed(run_id, vouched, TREASURY_SECRET, replayed) for _ in range(2)),
    ]
    barrier = threading.Barrier(len(senders))
    answers: list[httpx.Response] = []

    def send(i: int) -> None:
        barrier.wait()
        answers.append(senders[i]())

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(senders))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    statuses = Counter(a.status_code for a in answers)
    assert statuses == {202: 1, 200: 9}, [a.text for a in answers]
    (won,) = [a.json() for a in answers if a.status_code == 202]
    assert len(won["approved_by"]) == 2 and won["quorum"] == 2
    stack.wait_status(run_id, RunStatus.COMPLETED)
    assert stack.executions()[f"transfer {run_id}:call_0_0"] == 1
    kinds = d.kinds(run_id)
    assert kinds.count("decision") == 1 and kinds.count("resumed") == 1
    assert 1 <= kinds.count("approval") <= 2  # every counted approval but the deciding one
    approvals = stack.service.store.decisions.approvals(run_id, digest)
    assert len({a.identity for a in approvals}) == len(approvals) <= 3  # distinct principals


def test_a_deny_during_a_partial_quorum_ends_it(deployment: Deployment) -> None:
    d, stack = deployment, deployment.stack
    run_id = d.create("four_eyes")
    digest = d.waiting(run_id)
    first = d.by_token(run_id, approve(digest), "alice", TREASURY)
    assert first.status_code == 200 and first.json()["result"] == "partial"
    deny = {"turn_digest": digest, "decision": "deny", "reason": "not this month"}
    assert d.by_token(run_id, deny, "bob", TREASURY).status_code == 202
    stack.wait_status(run_id, RunStatus.COMPLETED)
    assert d.by_token(run_id, approve(digest), "carol", TREASURY).status_code == 409
    assert stack.executions()[f"transfer {run_id}:call_0_0"] == 0
    assert stack.service.store.ledger.entries(run_id) == []
