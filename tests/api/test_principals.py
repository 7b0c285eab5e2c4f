"""Principals over HTTP, on both databases: named approval clients, OIDC tokens from a
local issuer, roles per tool, the requester's own run, and quorum. Every refusal is
a problem+json and changes nothing."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import jwt
import pytest
from sqlalchemy import text

from airlock.workers.http import issuer_keys
from airlock.workers.testing import SECRET, TOKEN
from tests.api.conftest import Api, make_api
from tests.issuer import Issuer, new_key

PAYMENTS_SECRET = "whsec_" + base64.b64encode(b"payments-desk-secret-0123456789").decode()
TREASURY = ["treasury"]
GUARD = 30.0
"""Seconds before a test that deadlocked gives up (never reached when it passes)."""


@pytest.fixture
def api(db_url: str, issuer: Issuer) -> Iterator[Api]:
    api = make_api(
        db_url,
        approval_clients={"payments-desk": {"secret": PAYMENTS_SECRET, "roles": ["payments"]}},
        **issuer.settings(),
    )
    yield api
    api.service.store.engine.dispose()


def problem(response: Any, status: int, *words: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = response.json()
    for word in words:
        assert word in body["detail"], body
    return body


def state_of(api: Api, run_id: str) -> tuple[Any, ...]:
    """Everything a refused decision must leave as it was."""
    with api.service.store.engine.connect() as conn:
        run = conn.execute(
            text("select status, version, event_seq from agent_runs where id = :id"),
            {"id": run_id}
            if api.service.store.connections.postgres
            else {"id": run_id.replace("-", "")},
        ).one()
        counts = tuple(
            conn.execute(text(f"select count(*) from {table}")).scalar_one()
            for table in ("decisions", "approvals", "run_events")
        )
    return (*run, *counts, tuple(api.enqueued))


def by_token(api: Api, run_id: str, body: dict[str, Any], headers: dict[str, str]) -> Any:
    return api.client.post(f"/v1/runs/{run_id}/approval", json=body, headers=headers)


def events(api: Api, run_id: str, kind: str) -> list[dict[str, Any]]:
    found = api.client.get(f"/v1/runs/{run_id}/events", headers=api.headers()).json()["events"]
    return [e["payload"] for e in found if e["kind"] == kind]


def approve(digest: str, **extra: Any) -> dict[str, Any]:
    return {"turn_digest": digest, "decision": "approve", **extra}


# -- roles ----------------------------------------------------------------------------


def test_a_role_gated_call_is_refused_without_the_role_and_accepted_with_it(
    api: Api, issuer: Issuer
) -> None:
    view = api.waiting("payments")
    run_id, digest = view["id"], view["pending"]["turn_digest"]
    call = view["pending"]["calls"][0]
    assert call["approvers"] == ["payments"] and call["quorum"] == 1
    before = state_of(api, run_id)

    # the default client (AIRLOCK_WEBHOOK_SECRET) speaks for no role
    problem(api.approve(run_id, approve(digest, approver="eve")), 403, "eve", "payments")
    # a token whose roles do not include it
    support = issuer.bearer("sam", ["support"])
    problem(by_token(api, run_id, approve(digest), support), 403, "sam", "call_0_0 (pay")
    # a deny needs the role too
    deny = {"turn_digest": digest, "decision": "deny", "reason": "no"}
    problem(by_token(api, run_id, deny, support), 403)
    assert state_of(api, run_id) == before

    accepted = api.approve(run_id, approve(digest, approver="pat"), secret=PAYMENTS_SECRET)
    assert accepted.status_code == 202, accepted.text
    assert accepted.json()["approver"] == "pat"
    (decision,) = events(api, run_id, "decision")
    assert decision["principal"] == decision["approver"] == "pat"
    assert decision["auth"] == {
        "method": "webhook",
        "client": "payments-desk",
        "roles": ["payments"],
    }
    assert decision["roles"] == ["payments"] and decision["covered_calls"] == ["call_0_0"]
    assert api.enqueued.count(run_id) == 2  # created, then the resume


def test_a_token_with_the_role_decides_and_the_audit_names_its_issuer(
    api: Api, issuer: Issuer
) -> None:
    view = api.waiting("payments")
    run_id, digest = view["id"], view["pending"]["turn_digest"]
    headers = issuer.bearer("paula", ["payments", "support"])
    assert by_token(api, run_id, approve(digest), headers).status_code == 202
    (decision,) = events(api, run_id, "decision")
    assert decision["approver"] == "paula"
    assert decision["auth"] == {"method": "oidc", "issuer": issuer.url, "roles": ["payments"]}
    api.segment(run_id)
    assert api.run(run_id)["status"] == "completed"


def test_the_body_cannot_name_someone_else_than_the_token(api: Api, issuer: Issuer) -> None:
    view = api.waiting("payments")
    run_id, digest = view["id"], view["pending"]["turn_digest"]
    before = state_of(api, run_id)
    headers = issuer.bearer("paula", ["payments"])
    problem(by_token(api, run_id, approve(digest, approver="ceo"), headers), 403, "ceo", "paula")
    assert state_of(api, run_id) == before
    assert by_token(api, run_id, approve(digest, approver="paula"), headers).status_code == 202


# -- the requester ----------------------------------------------------------------------


def test_the_requester_may_not_approve_their_own_run(api: Api, issuer: Issuer) -> None:
    alice = issuer.bearer("alice", ["payments"])
    created = api.client.post("/v1/runs", json={"agent": "payments", "input": "x"}, headers=alice)
    assert created.status_code == 201, created.text
    run_id = created.json()["id"]
    assert api.service.get_run(run_id).requested_by == "alice"
    api.segment(run_id)
    digest = api.run(run_id)["pending"]["turn_digest"]
    before = state_of(api, run_id)
    problem(by_token(api, run_id, approve(digest), alice), 403, "alice requested this run")
    assert state_of(api, run_id) == before
    assert (
        by_token(api, run_id, approve(digest), issuer.bearer("bob", ["payments"])).status_code
        == 202
    )


def test_a_name_given_by_a_client_is_not_the_tokens_subject_of_that_name(
    api: Api, issuer: Issuer
) -> None:
    """The issuer's ``alice`` requested the run; an approval client's ``alice`` is another
    principal (its method, authority and subject together), who may approve it."""
    alice = issuer.bearer("alice", ["payments"])
    created = api.client.post("/v1/runs", json={"agent": "payments", "input": "x"}, headers=alice)
    run_id = created.json()["id"]
    api.segment(run_id)
    digest = api.run(run_id)["pending"]["turn_digest"]
    vouched = api.approve(run_id, approve(digest, approver="alice"), secret=PAYMENTS_SECRET)
    assert vouched.status_code == 202, vouched.text


def test_a_requester_named_by_a_trusted_client_is_known_by_that_name_alone(api: Api) -> None:
    """The API token's holder names the requester: no principal proved to be them, so
    separation of duties refuses anyone of that name, however they sign in."""
    created = api.client.post(
        "/v1/runs",
        json={"agent": "payments", "input": "x", "requested_by": "alice"},
        headers=api.headers(),
    )
    run_id = created.json()["id"]
    api.segment(run_id)
    digest = api.run(run_id)["pending"]["turn_digest"]
    refused = api.approve(run_id, approve(digest, approver="alice"), secret=PAYMENTS_SECRET)
    problem(refused, 403, "alice requested this run")


def test_the_requester_may_deny_and_an_agent_may_allow_self_approval(
    api: Api, issuer: Issuer
) -> None:
    alice = issuer.bearer("alice", ["payments"])
    for agent, body in (
        ("payments", {"decision": "deny", "reason": "changed my mind"}),
        ("self_service", {"decision": "approve"}),
    ):
        created = api.client.post("/v1/runs", json={"agent": agent, "input": "x"}, headers=alice)
        run_id = created.json()["id"]
        api.segment(run_id)
        digest = api.run(run_id)["pending"]["turn_digest"]
        answer = by_token(api, run_id, {"turn_digest": digest, **body}, alice)
        assert answer.status_code == 202, (agent, answer.text)


def test_only_a_trusted_client_names_the_requester(api: Api, issuer: Issuer) -> None:
    named = api.create("payments", requested_by="carol")  # the API token's holder
    assert api.service.get_run(named["id"]).requested_by == "carol"
    request = events(api, named["id"], "request")[0]
    assert request["requested_by"] == "carol"
    alice = issuer.bearer("alice")
    body = {"agent": "payments", "input": "x", "requested_by": "carol"}
    problem(api.client.post("/v1/runs", json=body, headers=alice), 403, "alice")
    same = {"agent": "payments", "input": "x", "requested_by": "alice"}
    assert api.client.post("/v1/runs", json=same, headers=alice).status_code == 201


# -- quorum -------------------------------------------------------------------------------


def test_a_quorum_counts_distinct_principals_and_the_second_decides(
    api: Api, issuer: Issuer
) -> None:
    view = api.waiting("four_eyes")
    run_id, digest = view["id"], view["pending"]["turn_digest"]
    call = view["pending"]["calls"][0]
    assert (call["approvers"], call["quorum"], call["approvals"]) == (TREASURY, 2, [])
    alice, bob = issuer.bearer("alice", TREASURY), issuer.bearer("bob", TREASURY)

    first = by_token(api, run_id, approve(digest), alice)
    assert first.status_code == 200, first.text
    assert first.json()["result"] == "partial"
    assert first.json()["approved_by"] == ["alice"] and first.json()["quorum"] == 2
    waiting = api.run(run_id)
    assert waiting["status"] == "waiting_for_approval"
    (seen,) = waiting["pending"]["calls"][0]["approvals"]
    assert seen["principal"] == "alice" and seen["decision"] == "approve"
    assert seen["auth"]["method"] == "oidc" and seen["auth"]["roles"] == TREASURY
    (partial,) = events(api, run_id, "approval")
    assert partial["approved_by"] == ["alice"] and partial["quorum"] == 2
    assert events(api, run_id, "decision") == []

    # the same principal again: counted once, nothing new
    before = state_of(api, run_id)
    again = by_token(api, run_id, approve(digest), alice)
    assert again.status_code == 200 and again.json()["result"] == "duplicate"
    assert again.json()["approved_by"] == ["alice"]
    # the same principal, the same effect in other words: counted once, nothing new
    other = by_token(api, run_id, approve(digest, reason="fine"), alice)
    assert other.status_code == 200 and other.json()["result"] == "duplicate"
    assert state_of(api, run_id) == before

    second = by_token(api, run_id, approve(digest), bob)
    assert second.status_code == 202, second.text
    assert second.json()["approved_by"] == ["alice", "bob"]
    (decision,) = events(api, run_id, "decision")
    assert decision["approved_by"] == ["alice", "bob"] and decision["approver"] == "bob"
    assert api.enqueued.count(run_id) == 2

    # after the decision: the same approval is a duplicate; a deny is too late
    late = by_token(api, run_id, approve(digest), issuer.bearer("carol", TREASURY))
    assert late.status_code == 200 and late.json()["result"] == "duplicate"
    deny = {"turn_digest": digest, "decision": "deny", "reason": "no"}
    problem(by_token(api, run_id, deny, issuer.bearer("carol", TREASURY)), 409)
    api.segment(run_id)
    assert api.run(run_id)["status"] == "completed"


def test_a_deny_during_a_partial_quorum_ends_it_at_once(api: Api, issuer: Issuer) -> None:
    view = api.waiting("four_eyes")
    run_id, digest = view["id"], view["pending"]["turn_digest"]
    first = by_token(api, run_id, approve(digest), issuer.bearer("alice", TREASURY))
    assert first.json()["result"] == "partial"
    deny = {"turn_digest": digest, "decision": "deny", "reason": "not this month"}
    denied = by_token(api, run_id, deny, issuer.bearer("bob", TREASURY))
    assert denied.status_code == 202, denied.text
    late = by_token(api, run_id, approve(digest), issuer.bearer("carol", TREASURY))
    problem(late, 409, "another decision")
    api.segment(run_id)
    done = api.run(run_id)
    assert done["status"] == "completed"
    (decision,) = events(api, run_id, "decision")
    assert decision["approver"] == "bob" and decision["reason"] == "not this month"
    assert api.service.store.ledger.entries(run_id) == []  # the transfer never ran


def test_a_quorum_approval_needs_the_role(api: Api, issuer: Issuer) -> None:
    view = api.waiting("four_eyes")
    run_id, digest = view["id"], view["pending"]["turn_digest"]
    before = state_of(api, run_id)
    problem(by_token(api, run_id, approve(digest), issuer.bearer("mallory", ["support"])), 403)
    assert state_of(api, run_id) == before


# -- bad tokens -------------------------------------------------------------------------------


def bad_tokens(issuer: Issuer) -> dict[str, tuple[str, str]]:
    now = int(time.time())
    unsigned = jwt.encode(
        {"iss": issuer.url, "aud": "airlock", "sub": "x", "exp": now + 60}, "", algorithm="none"
    )
    shared = jwt.encode(
        {"iss": issuer.url, "aud": "airlock", "sub": "x", "exp": now + 60},
        "a-shared-secret-of-32-bytes-length!",
        algorithm="HS256",
        headers={"kid": issuer.kid},
    )
    return {
        "expired": (issuer.token("x", TREASURY, lifetime=-120), "expired"),
        "another key": (issuer.token("x", TREASURY, key=new_key()), "signature"),
        "unknown key id": (issuer.token("x", TREASURY, key=new_key(), kid="k9"), "no key"),
        "unknown issuer": (issuer.token("x", TREASURY, iss="https://evil.example"), "issuer"),
        "wrong audience": (issuer.token("x", TREASURY, aud="someone-else"), "audience"),
        "not yet valid": (issuer.token("x", TREASURY, nbf=now + 600), "not valid yet"),
        "no subject": (issuer.token("", TREASURY), "sub"),
        "alg none": (unsigned, "signed with"),
        "hs256": (shared, "signed with"),
        "garbage": ("abc.def.ghi", "not a JWT"),
        "es256 with the rsa key's id": (
            issuer.token("x", TREASURY, key=issuer.ec_key, kid=issuer.kid, algorithm="ES256"),
            "is an RS256 key",
        ),
        "rs256 with the ec key's id": (
            issuer.token("x", TREASURY, kid=issuer.ec_kid),
            "is an ES256 key",
        ),
    }


def test_bad_tokens_are_refused_with_401_and_change_nothing(api: Api, issuer: Issuer) -> None:
    view = api.waiting("four_eyes")
    run_id, digest = view["id"], view["pending"]["turn_digest"]
    before = state_of(api, run_id)
    for name, (token, why) in bad_tokens(issuer).items():
        headers = {"Authorization": f"Bearer {token}"}
        refused = by_token(api, run_id, approve(digest), headers)
        assert refused.status_code == 401, (name, refused.text)
        assert why in refused.json()["detail"], (name, refused.json())
        problem(api.client.get(f"/v1/runs/{run_id}", headers=headers), 401)
        created = api.client.post("/v1/runs", json={"agent": "w1", "input": "x"}, headers=headers)
        problem(created, 401)
        signed_in = api.client.post("/inbox/login", data={"token": token, "name": "x"})
        assert signed_in.status_code == 401, (name, signed_in.text)
        assert "set-cookie" not in signed_in.headers
        with api.service.store.engine.begin() as conn:  # each token a first try, not throttled
            conn.execute(text("delete from sign_in_failures"))
    assert state_of(api, run_id) == before


def test_a_token_of_the_issuers_ec_key_opens_the_run_endpoints(api: Api, issuer: Issuer) -> None:
    token = issuer.token("reader", key=issuer.ec_key, kid=issuer.ec_kid, algorithm="ES256")
    listed = api.client.get("/v1/runs", headers={"Authorization": f"Bearer {token}"})
    assert listed.status_code == 200, listed.text


def test_tokens_open_the_run_endpoints(api: Api, issuer: Issuer) -> None:
    view = api.waiting("w1")
    headers = issuer.bearer("reader")
    assert api.client.get(f"/v1/runs/{view['id']}", headers=headers).status_code == 200
    assert api.client.get("/v1/runs", headers=headers).status_code == 200
    problem(api.client.get("/v1/runs", headers={"Authorization": "Bearer nope"}), 401)
    # the keys were fetched once, and kept
    assert issuer.fetches == 1


def test_an_unreachable_issuer_is_503_and_changes_nothing(db_url: str, issuer: Issuer) -> None:
    api = make_api(
        db_url,
        oidc_issuer=issuer.url,
        oidc_audience="airlock",
        oidc_jwks_url="http://127.0.0.1:9/jwks",
    )
    try:
        view = api.waiting("four_eyes")
        before = state_of(api, view["id"])
        body = approve(view["pending"]["turn_digest"])
        answer = by_token(api, view["id"], body, issuer.bearer("alice", TREASURY))
        problem(answer, 503, "cannot fetch the issuer's keys")
        assert state_of(api, view["id"]) == before
    finally:
        api.service.store.engine.dispose()


def test_an_approval_with_neither_signature_nor_token_is_401(api: Api) -> None:
    view = api.waiting("w1")
    body = approve(view["pending"]["turn_digest"])
    problem(by_token(api, view["id"], body, {}), 401, "OIDC token")
    # the API token is not an approver
    problem(by_token(api, view["id"], body, {"Authorization": f"Bearer {TOKEN}"}), 401)
    unknown = "whsec_" + base64.b64encode(b"nobody-knows-this-secret-012345").decode()
    problem(api.approve(view["id"], body, secret=unknown), 401, "client")
    assert api.approve(view["id"], body, secret=SECRET).status_code == 202


@pytest.mark.parametrize("name", ["a\x00b", "line\nbreak", "\x1b[31mred", "x" * 201, "", "\ud800"])
def test_hostile_principal_names_are_refused_at_the_door(
    api: Api, issuer: Issuer, name: str
) -> None:
    view = api.waiting("four_eyes")
    run_id, digest = view["id"], view["pending"]["turn_digest"]
    before = state_of(api, run_id)
    raw = json.dumps(approve(digest, approver=name)).encode()
    problem(api.approve(run_id, {}, raw=raw, secret=SECRET), 422)
    token = issuer.token(name, TREASURY)
    refused = by_token(api, run_id, approve(digest), {"Authorization": f"Bearer {token}"})
    problem(refused, 401, "sub")
    body = json.dumps({"agent": "w1", "input": "x", "requested_by": name}).encode()
    created = api.client.post("/v1/runs", content=body, headers=api.headers())
    problem(created, 422)
    assert state_of(api, run_id) == before


# -- issue 26, defect 5: approvals count by what they approve, not how they say it -----------


def test_approvals_worded_differently_count_toward_one_quorum(api: Api, issuer: Issuer) -> None:
    """Before, approvals counted together only when their stored decisions were equal
    byte for byte: one with a reason and one without both got ``partial``, every retry
    409, and the run waited forever while its view showed 2 of 2."""
    view = api.waiting("four_eyes")
    run_id, digest = view["id"], view["pending"]["turn_digest"]
    call_id = view["pending"]["calls"][0]["id"]
    alice, bob = issuer.bearer("alice", TREASURY), issuer.bearer("bob", TREASURY)
    first = by_token(api, run_id, approve(digest, reason="checked the invoice"), alice)
    assert first.status_code == 200 and first.json()["result"] == "partial", first.text
    (seen,) = api.run(run_id)["pending"]["calls"][0]["approvals"]
    assert (seen["principal"], seen["arguments"], seen["reason"]) == (
        "alice",
        {"amount": 100},
        "checked the invoice",
    )
    # bob names the call and says nothing: the same effect
    per_call = approve(digest, calls={call_id: {"decision": "approve"}})
    second = by_token(api, run_id, per_call, bob)
    assert second.status_code == 202, second.text
    assert second.json()["approved_by"] == ["alice", "bob"]
    (decision,) = events(api, run_id, "decision")
    assert decision["approved_by"] == ["alice", "bob"]
    assert decision["effect"] == {call_id: {"approve": {"amount": 100}}}
    api.segment(run_id)
    assert api.run(run_id)["status"] == "completed"


def test_an_edit_counts_only_with_approvals_of_the_same_arguments(api: Api, issuer: Issuer) -> None:
    view = api.waiting("four_eyes")
    run_id, digest = view["id"], view["pending"]["turn_digest"]
    call_id = view["pending"]["calls"][0]["id"]
    alice, bob = issuer.bearer("alice", TREASURY), issuer.bearer("bob", TREASURY)

    def edit(amount: int) -> dict[str, Any]:
        return approve(
            digest, calls={call_id: {"decision": "edit", "arguments": {"amount": amount}}}
        )

    assert by_token(api, run_id, edit(50), alice).json()["result"] == "partial"
    other = by_token(api, run_id, approve(digest), bob)  # 100, not 50: not the same effect
    assert other.status_code == 200 and other.json()["approved_by"] == ["bob"]
    # alice changes her mind: her new approval replaces her edit, and makes the quorum
    changed = by_token(api, run_id, approve(digest, reason="100 is right"), alice)
    assert changed.status_code == 202, changed.text
    assert changed.json()["approved_by"] == ["bob", "alice"]
    approvals = events(api, run_id, "decision")
    assert approvals[0]["replaced"] is True
    api.segment(run_id)
    assert api.run(run_id)["status"] == "completed"
    (entry,) = api.service.store.ledger.entries(run_id)
    assert entry.result == "moved 100"


def test_a_withdrawn_approval_no_longer_counts(api: Api, issuer: Issuer) -> None:
    from airlock.workers.service.principals import Principal

    view = api.waiting("four_eyes")
    run_id, digest = view["id"], view["pending"]["turn_digest"]
    alice = Principal(id="alice", method="oidc", roles=frozenset(TREASURY), issuer=issuer.url)
    assert (
        by_token(api, run_id, approve(digest), issuer.bearer("alice", TREASURY)).status_code == 200
    )
    assert api.service.withdraw_approval(run_id, digest, alice).result == "withdrawn"
    assert api.run(run_id)["pending"]["calls"][0]["approvals"] == []
    (_, withdrawn) = events(api, run_id, "approval")
    assert withdrawn["withdrawn"] is True and withdrawn["principal"] == "alice"
    again = by_token(api, run_id, approve(digest), issuer.bearer("bob", TREASURY))
    assert again.status_code == 200 and again.json()["approved_by"] == ["bob"]
    from airlock.workers.service import ConflictError

    with pytest.raises(ConflictError, match="no approval of this turn"):
        api.service.withdraw_approval(run_id, digest, alice)


# -- made-up key ids while the issuer hangs (issue 26, defect 8) -------------------------------


def test_made_up_key_ids_while_the_issuers_keys_hang_stall_nothing(
    db_url: str, issuer: Issuer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One token with a made-up kid refetches the keys (the cooldown is 0 here) and the
    issuer holds that fetch; meanwhile 45 more such clients, an API-token GET and a
    valid token are all answered, on the one event loop, and nothing fetches again."""
    monkeypatch.setattr(issuer_keys, "COOLDOWN", 0.0)
    monkeypatch.setattr(issuer_keys, "FETCH_TIMEOUT", 120.0)  # held until released
    api = make_api(db_url, **issuer.settings())
    made_up = {"Authorization": f"Bearer {issuer.token('x', key=new_key(), kid='made-up')}"}
    with api.client as client, ThreadPoolExecutor(48) as pool:
        try:
            assert client.get("/v1/runs", headers=issuer.bearer("reader")).status_code == 200
            issuer.hold()
            held = pool.submit(client.get, "/v1/runs", headers=made_up)
            assert issuer.fetching.wait(GUARD)
            others = [pool.submit(client.get, "/v1/runs", headers=made_up) for _ in range(45)]
            for other in others:
                problem(other.result(GUARD), 401, "no key")
            answered = pool.submit(client.get, "/v1/runs", headers=api.headers()).result(GUARD)
            assert answered.status_code == 200, answered.text
            valid = pool.submit(client.get, "/v1/runs", headers=issuer.bearer("reader"))
            assert valid.result(GUARD).status_code == 200
            assert issuer.fetches == 2 and not held.done()
            issuer.release()
            problem(held.result(GUARD), 401, "no key")
        finally:
            issuer.release()  # a deadlocked attempt ends, and says so
    api.service.store.engine.dispose()


def test_made_up_key_ids_before_the_first_keys_hold_no_thread_of_the_routes(
    db_url: str, issuer: Issuer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found in the second review: before the first keys are fetched, tokens with made-up
    kids waited for the first fetch in the threads FastAPI's routes run on, so an
    API-token GET stalled behind them. They now wait in the verifier's own threads."""
    monkeypatch.setattr(issuer_keys, "FETCH_TIMEOUT", 120.0)  # held until released
    api = make_api(db_url, **issuer.settings())
    made_up = {"Authorization": f"Bearer {issuer.token('x', key=new_key(), kid='made-up')}"}
    with api.client as client, ThreadPoolExecutor(64) as pool:
        try:
            issuer.hold()  # the very first fetch
            first = pool.submit(client.get, "/v1/runs", headers=made_up)
            assert issuer.fetching.wait(GUARD)
            waiting = [pool.submit(client.get, "/v1/runs", headers=made_up) for _ in range(60)]
            answered = pool.submit(client.get, "/v1/runs", headers=api.headers()).result(GUARD)
            assert answered.status_code == 200, answered.text
            assert issuer.fetches == 1 and not first.done()  # still held
            issuer.release()
            for attempt in (first, *waiting):
                problem(attempt.result(GUARD), 401, "no key")
        finally:
            issuer.release()
    api.service.store.engine.dispose()
