"""Issue 26, found in review: a webhook-id was forgotten when the approval it recorded
was replaced, and was shared by every approval client instead of being each sender's
own. Each test failed on the code before receipts (``webhook_receipts``).

Standard Webhooks: a webhook-id identifies one message of one sender; a redelivery of
it (a client's retry, a proxy's replay within the timestamp tolerance) must be a no-op.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from contextlib import suppress

import pytest
from sqlalchemy import Engine

from airlock.persistence.domain import RunStatus
from airlock.workers.service import ConflictError, Outcome, Service
from airlock.workers.service.decisions import CallDecisionBody
from airlock.workers.service.principals import Principal
from tests.api.conftest import Api, make_api
from tests.conftest import FakeClock
from tests.contract.test_decision_races import approve, deny, first_digest, make_service

TREASURY = frozenset({"treasury"})


def client(name: str, approver: str) -> Principal:
    """As ``Handlers.approve`` builds it for a signed webhook."""
    return Principal.of_client(name, TREASURY, approver)


def waiting(engine: Engine) -> tuple[Service, str, str]:
    clock = FakeClock()
    service = make_service(engine, clock)
    run, _ = service.start_run("treasury", "pay the supplier", requested_by="mallory")
    assert service.run_segment(run.id, "worker").outcome is Outcome.SUSPENDED
    return service, run.id, first_digest(run.id)


def test_a_replayed_webhook_id_does_not_bring_back_a_replaced_approval(engine: Engine) -> None:
    service, run_id, digest = waiting(engine)
    alice = client("bank-bot", "alice")
    small = approve(
        digest, calls={"t1": CallDecisionBody(decision="edit", arguments={"amount": 1})}
    )
    full = approve(digest)
    # alice approves the full amount (message w1), then thinks better of it: 1 only (w2)
    assert service.record_decision(run_id, full, alice, webhook_id="w1").result == "partial"
    assert service.record_decision(run_id, small, alice, webhook_id="w2").result == "partial"
    # w1 is delivered again (a retry, a replay within the tolerance): it must change nothing
    with suppress(ConflictError):
        service.record_decision(run_id, full, alice, webhook_id="w1")
    # bob approves the full amount: that must not make a quorum with alice's replaced one
    bob = client("bank-bot", "bob")
    result = service.record_decision(run_id, full, bob, webhook_id="w3")
    assert result.result == "partial", (
        f"released ({result.result}) by {result.approved_by}: alice's current approval is "
        "for 1, her replaced approval of 5000 came back with the replay of w1"
    )
    assert service.get_run(run_id).status is RunStatus.WAITING_FOR_APPROVAL


def test_another_clients_webhook_id_is_not_answered_as_a_duplicate(engine: Engine) -> None:
    """Two approval clients each number their messages (evt-1, evt-2, ...): bob's
    approval, under an id alice's client used, is answered 200 'duplicate' and dropped."""
    service, run_id, digest = waiting(engine)
    first = service.record_decision(
        run_id, approve(digest), client("client-a", "alice"), webhook_id="evt-1"
    )
    assert first.result == "partial"
    second = service.record_decision(
        run_id, approve(digest), client("client-b", "bob"), webhook_id="evt-1"
    )
    approvers = {a.principal for a in service.store.decisions.approvals(run_id, digest)}
    assert second.result == "recorded" or "bob" in approvers, (
        f"bob's approval was answered {second.result!r} (200) and not recorded: {approvers}"
    )


def test_a_webhook_id_used_on_another_run_by_another_client_does_not_block(
    engine: Engine,
) -> None:
    service, run_a, digest_a = waiting(engine)
    run_b, _ = service.start_run("treasury", "pay another", requested_by="mallory")
    assert service.run_segment(run_b.id, "worker").outcome is Outcome.SUSPENDED
    digest_b = first_digest(run_b.id)
    service.record_decision(
        run_a, approve(digest_a), client("client-a", "alice"), webhook_id="evt-7"
    )
    # client b's own message evt-7, on its own run
    result = service.record_decision(
        run_b.id, approve(digest_b), client("client-b", "bob"), webhook_id="evt-7"
    )
    assert result.result == "partial"


# -- over HTTP ----------------------------------------------------------------------------

DESK = "whsec_" + base64.b64encode(b"treasury-desk-secret-0123456789").decode()


@pytest.fixture
def api(db_url: str) -> Iterator[Api]:
    api = make_api(
        db_url, approval_clients={"treasury-desk": {"secret": DESK, "roles": ["treasury"]}}
    )
    yield api
    api.service.store.engine.dispose()


def test_a_resent_webhook_does_not_revive_a_replaced_approval(api: Api) -> None:
    view = api.waiting("four_eyes")
    run_id, digest = view["id"], view["pending"]["turn_digest"]
    (call,) = view["pending"]["calls"]
    now = time.time()
    full = {"turn_digest": digest, "decision": "approve", "approver": "alice"}
    less = {
        **full,
        "calls": {
            call["id"]: {"decision": "edit", "arguments": {**call["arguments"], "amount": 1}}
        },
    }
    first = api.approve(run_id, full, secret=DESK, webhook_id="msg_w1", timestamp=now)
    assert first.json()["result"] == "partial", first.text
    second = api.approve(run_id, less, secret=DESK, webhook_id="msg_w2", timestamp=now + 1)
    assert second.json()["result"] == "partial", second.text
    # the first message, byte for byte, again (a retry or a replay within the tolerance)
    again = api.approve(run_id, full, secret=DESK, webhook_id="msg_w1", timestamp=now)
    bob = {**full, "approver": "bob"}
    last = api.approve(run_id, bob, secret=DESK, webhook_id="msg_w3", timestamp=now + 2)
    assert api.run(run_id)["status"] == "waiting_for_approval", (
        f"resend answered {again.status_code} {again.json()['result']}; then bob's "
        f"approval: {last.status_code} {last.json()}: released with alice's replaced approval"
    )


def test_an_approver_withdraws_over_the_webhook_once(api: Api) -> None:
    """Issue 26, defect 5: a webhook's approver takes back their approval (``decision:
    withdraw``) until the quorum is reached; a resend of the withdrawal is a replay,
    and does not take back the approval given again after it."""
    view = api.waiting("four_eyes")
    run_id, digest = view["id"], view["pending"]["turn_digest"]
    now = time.time()
    give = {"turn_digest": digest, "decision": "approve", "approver": "alice"}
    take = {"turn_digest": digest, "decision": "withdraw", "approver": "alice"}
    first = api.approve(run_id, give, secret=DESK, webhook_id="msg_a1", timestamp=now)
    assert first.json()["result"] == "partial", first.text
    taken = api.approve(run_id, take, secret=DESK, webhook_id="msg_a2", timestamp=now)
    assert taken.status_code == 200, taken.text
    assert (taken.json()["result"], taken.json()["approved_by"]) == ("withdrawn", [])
    assert taken.json()["quorum"] == 2
    assert api.run(run_id)["pending"]["calls"][0]["approvals"] == []
    again = api.approve(run_id, give, secret=DESK, webhook_id="msg_a3", timestamp=now)
    assert again.json()["result"] == "partial", again.text
    resent = api.approve(run_id, take, secret=DESK, webhook_id="msg_a2", timestamp=now)
    assert resent.status_code == 200 and resent.json()["result"] == "duplicate", resent.text
    (approval,) = api.run(run_id)["pending"]["calls"][0]["approvals"]
    assert approval["principal"] == "alice"
    # nothing to withdraw (bob never approved), or naming calls: refused, nothing changes
    bob = {**take, "approver": "bob"}
    nothing = api.approve(run_id, bob, secret=DESK, webhook_id="msg_b1", timestamp=now)
    assert nothing.status_code == 409 and "no approval" in nothing.json()["detail"]
    calls = {**take, "calls": {"x": {"decision": "approve"}}}
    assert api.approve(run_id, calls, secret=DESK, timestamp=now).status_code == 422
    # bob approves: the quorum is reached, and alice can no longer take hers back
    done = api.approve(run_id, {**give, "approver": "bob"}, secret=DESK, timestamp=now)
    assert done.status_code == 202, done.text
    late = api.approve(run_id, take, secret=DESK, webhook_id="msg_a4", timestamp=now)
    assert late.status_code == 409, late.text


def test_a_reused_webhook_id_asking_for_another_decision_is_refused(engine: Engine) -> None:
    """Found in the second review: a client's approval kept under ``msg_1``, then a deny
    under ``msg_1``, was answered 200 ``duplicate`` with the deny as its decision."""
    service = make_service(engine, FakeClock())
    run, _ = service.start_run("treasury", "pay the supplier", requested_by="mallory")
    assert service.run_segment(run.id, "worker").outcome is Outcome.SUSPENDED
    digest = first_digest(run.id)
    desk = Principal.of_client("payments-desk", TREASURY, "alice")
    first = service.record_decision(run.id, approve(digest), desk, webhook_id="msg_1")
    assert first.result == "partial"
    # before, answered 200 'duplicate' echoing the deny it never applied
    with pytest.raises(ConflictError, match="another request"):
        service.record_decision(run.id, deny(digest), desk, webhook_id="msg_1")
    assert service.store.decisions.decision_for(run.id, digest) is None  # nothing applied
    again = service.record_decision(run.id, approve(digest), desk, webhook_id="msg_1")
    assert (again.result, again.approved_by) == ("duplicate", ("alice",))
