"""A principal is its method, the authority that vouches for it and its subject, never its
name alone (issue 42, items 3 and 4), on both databases: an approval client's ``pat``, a
token's subject ``pat``, an inbox sign-in or the CLI's ``--as pat`` are four people.
Authorisation comes before any answer: a principal that may not decide a turn gets 403,
also once it was decided, never the stored decision."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import pytest

from airlock.workers.service.decisions import DecisionBody
from airlock.workers.service.principals import Principal
from tests.api.conftest import Api, make_api
from tests.api.test_principals import PAYMENTS_SECRET, by_token, events, problem, state_of
from tests.issuer import Issuer

TREASURY_SECRET = "whsec_" + base64.b64encode(b"treasury-desk-secret-012345678").decode()
GRANT = {"scope": "call", "expires_in": "1h"}


@pytest.fixture
def api(db_url: str, issuer: Issuer) -> Iterator[Api]:
    api = make_api(
        db_url,
        approval_clients={
            "payments-desk": {"secret": PAYMENTS_SECRET, "roles": ["payments"]},
            "treasury-desk": {"secret": TREASURY_SECRET, "roles": ["treasury"]},
        },
        **issuer.settings(),
    )
    yield api
    api.service.store.engine.dispose()


def approve(digest: str, **extra: Any) -> dict[str, Any]:
    return {"turn_digest": digest, "decision": "approve", **extra}


def test_a_subject_named_as_a_clients_approver_may_not_revoke_their_grant(
    api: Api, issuer: Issuer
) -> None:
    view = api.waiting("payments")
    body = approve(view["pending"]["turn_digest"], approver="pat", grant=GRANT)
    sent = api.approve(view["id"], body, secret=PAYMENTS_SECRET)
    assert sent.status_code == 202, sent.text
    (grant_id,) = sent.json()["grants"]
    pat = issuer.bearer("pat", [])  # the issuer's pat, holding no role
    refused = api.client.post(f"/v1/grants/{grant_id}/revoke", headers=pat)
    problem(refused, 403, "may not revoke")
    shown = api.client.get(f"/v1/grants/{grant_id}", headers=api.headers()).json()
    assert shown["state"] == "active" and shown["granted_by"] == "pat"
    assert shown["auth"]["identity"] == "webhook:payments-desk:pat"


def test_a_subject_named_as_a_clients_approver_neither_withdraws_nor_repeats_their_vote(
    api: Api, issuer: Issuer
) -> None:
    view = api.waiting("four_eyes")  # two treasury approvals
    run_id, digest = view["id"], view["pending"]["turn_digest"]
    desk = api.approve(run_id, approve(digest, approver="pat"), secret=TREASURY_SECRET)
    assert desk.status_code == 200 and desk.json()["result"] == "partial", desk.text
    before = state_of(api, run_id)
    pat = issuer.bearer("pat", ["treasury"])
    withdrawn = by_token(api, run_id, {"turn_digest": digest, "decision": "withdraw"}, pat)
    problem(withdrawn, 409, "no approval of this turn to withdraw")
    assert state_of(api, run_id) == before
    (counted,) = api.run(run_id)["pending"]["calls"][0]["approvals"]
    assert counted["principal"] == "pat" and counted["auth"]["client"] == "treasury-desk"
    # the issuer's pat is another person: theirs is the second approval of the quorum
    second = by_token(api, run_id, approve(digest), pat)
    assert second.status_code == 202, second.text
    assert second.json()["approved_by"] == ["pat", "pat"]
    (decided,) = events(api, run_id, "decision")
    assert decided["identity"] == f"oidc:{issuer.url}:pat"


def test_an_operator_named_as_an_approver_is_another_person_toward_a_quorum(api: Api) -> None:
    view = api.waiting("four_eyes")
    run_id, digest = view["id"], view["pending"]["turn_digest"]
    desk = api.approve(run_id, approve(digest, approver="pat"), secret=TREASURY_SECRET)
    assert desk.json()["result"] == "partial", desk.text
    body = DecisionBody(turn_digest=digest, decision="approve")
    for twin in (Principal(id="pat", method="inbox", every_role=True), Principal.operator("pat")):
        result = api.service.record_decision(run_id, body, twin)
        if result.result == "recorded":
            break
        assert result.result == "partial" and result.approved_by == ("pat", "pat")
    assert result.result == "recorded"
    identities = {a["identity"] for a in events(api, run_id, "approval")}
    assert identities == {"webhook:treasury-desk:pat"}


def test_a_refused_principal_is_refused_also_once_the_turn_is_decided(
    api: Api, issuer: Issuer
) -> None:
    view = api.waiting("payments")
    run_id, digest = view["id"], view["pending"]["turn_digest"]
    eve = issuer.bearer("eve", ["support"])
    problem(by_token(api, run_id, approve(digest), eve), 403, "eve holds none of the roles")
    decided = api.approve(run_id, approve(digest, approver="pat"), secret=PAYMENTS_SECRET)
    assert decided.status_code == 202, decided.text
    before = state_of(api, run_id)
    refused = problem(by_token(api, run_id, approve(digest), eve), 403, "eve holds none")
    assert "pat" not in refused["detail"]  # the stored decision and its author are not told
    assert state_of(api, run_id) == before
    # one who may decide it is told it was decided (200, the stored decision)
    again = by_token(api, run_id, approve(digest), issuer.bearer("ann", ["payments"]))
    assert again.status_code == 200 and again.json()["result"] == "duplicate", again.text
    assert again.json()["approver"] == "pat"


def test_a_refused_principal_is_refused_once_the_run_has_finished(api: Api, issuer: Issuer) -> None:
    """The checkpoint is gone with the finished run: the turn is read from its audit."""
    view = api.waiting("payments")
    run_id, digest = view["id"], view["pending"]["turn_digest"]
    assert api.approve(run_id, approve(digest, approver="pat"), secret=PAYMENTS_SECRET).is_success
    api.segment(run_id)
    assert api.run(run_id)["status"] == "completed"
    eve = issuer.bearer("eve", ["support"])
    problem(by_token(api, run_id, approve(digest), eve), 403, "eve holds none of the roles")
    again = by_token(api, run_id, approve(digest), issuer.bearer("ann", ["payments"]))
    assert again.status_code == 200 and again.json()["result"] == "duplicate", again.text
