"""The approver inbox, server side, on both databases: sign-in, the queue, a run's
page, decisions through the service, and what a hostile page or input cannot do.
(The browser walk is in tests/browser.)"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from airlock.workers.http.inbox.pages import CSP
from airlock.workers.service.sessions import PER_ADDRESS, PER_ADDRESS_NAME, WINDOW
from airlock.workers.testing import TOKEN
from tests.api.conftest import Api, make_api
from tests.integration.agents import HOSTILE_BODY
from tests.issuer import Issuer, new_key


@pytest.fixture
def api(db_url: str, issuer: Issuer) -> Iterator[Api]:
    api = make_api(db_url, **issuer.settings())
    yield api
    api.service.store.engine.dispose()


def sign_in(api: Api, token: str = TOKEN, name: str = "ann") -> None:
    answer = api.client.post(
        "/inbox/login", data={"token": token, "name": name}, follow_redirects=False
    )
    assert answer.status_code == 303, answer.text
    assert answer.headers["location"] == "/inbox"
    cookie = answer.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and TOKEN not in cookie


def csrf(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found is not None
    return found.group(1)


def run_page(api: Api, run_id: str) -> str:
    page = api.client.get(f"/inbox/runs/{run_id}")
    assert page.status_code == 200, page.text
    return page.text


def decide(api: Api, run_id: str, **fields: Any) -> Any:
    html = run_page(api, run_id)
    digest = re.search(r'name="turn_digest" value="([0-9a-f]{64})"', html)
    assert digest is not None
    form = {"csrf": csrf(html), "turn_digest": digest.group(1), "decision": "approve", **fields}
    return api.client.post(f"/inbox/runs/{run_id}/decide", data=form, follow_redirects=False)


def test_the_inbox_needs_a_sign_in_and_keeps_no_token(api: Api) -> None:
    assert api.client.get("/inbox", follow_redirects=False).headers["location"] == "/inbox/login"
    login = api.client.get("/inbox/login")
    assert login.status_code == 200 and "Content-Security-Policy" in login.headers
    bad = api.client.post("/inbox/login", data={"token": "wrong", "name": "ann"})
    assert bad.status_code == 401 and "neither the API token" in bad.text
    nameless = api.client.post("/inbox/login", data={"token": TOKEN, "name": ""})
    assert nameless.status_code == 401 and "your name" in nameless.text
    sign_in(api)
    queue = api.client.get("/inbox")
    assert queue.status_code == 200 and "Signed in as <strong>ann</strong>" in queue.text
    assert "script-src 'self'" in queue.headers["content-security-policy"]
    assert queue.headers["x-frame-options"] == "DENY"


def test_the_queue_shows_what_waits_oldest_first_and_filters(api: Api) -> None:
    first = api.waiting("w1")["id"]
    second = api.waiting("notes")["id"]
    done = api.create("w1")["id"]
    sign_in(api)
    html = api.client.get("/inbox").text
    assert html.index(first[:8]) < html.index(second[:8]) and done[:8] not in html
    only_notes = api.client.get("/inbox", params={"agent": "notes"}).text
    assert second[:8] in only_notes and first[:8] not in only_notes
    by_tool = api.client.get("/inbox", params={"tool": "send_email"}).text
    assert first[:8] in by_tool and second[:8] not in by_tool
    ticket = api.create("w1", metadata={"ticket": "T-4711", "note": "50% off", "who": "José"})["id"]
    found = api.client.get("/inbox", params={"q": "t-4711", "status": "all"}).text
    assert ticket[:8] in found and first[:8] not in found
    percent = api.client.get("/inbox", params={"q": "50%", "status": "all"}).text
    assert ticket[:8] in percent and done[:8] not in percent  # % is not a wildcard
    accented = api.client.get("/inbox", params={"q": "josé", "status": "all"}).text
    assert ticket[:8] in accented and done[:8] not in accented
    recent = api.client.get("/inbox", params={"status": "recent"}).text
    assert done[:8] in recent and first[:8] not in recent
    by_id = api.client.get("/inbox", params={"q": second, "status": "all"}).text
    assert second[:8] in by_id and first[:8] not in by_id
    everything = api.client.get("/inbox", params={"status": "all"}).text
    assert done[:8] in everything
    rows = api.client.get("/inbox/queue", params={"status": "waiting"})
    assert rows.status_code == 200 and first[:8] in rows.text and "<html" not in rows.text
    signed_out = make_api_client_without_cookie(api)
    assert signed_out.get("/inbox/queue").status_code == 401


def make_api_client_without_cookie(api: Api) -> Any:
    from fastapi.testclient import TestClient

    return TestClient(api.client.app)


def test_a_run_page_shows_the_turn_and_escapes_what_the_model_wrote(api: Api) -> None:
    run_id = api.waiting("notes")["id"]
    sign_in(api)
    html = run_page(api, run_id)
    assert HOSTILE_BODY not in html and "<script>document" not in html
    assert "&lt;script&gt;document.title=" in html
    assert "send_note" in html and "Needs a person" in html and "any approver" in html
    assert "Transcript up to the turn" in html and "Timeline" in html


def test_approving_from_the_page_goes_through_the_service(api: Api) -> None:
    run_id = api.waiting("notes")["id"]
    sign_in(api, name="ann")
    answer = decide(api, run_id)
    assert answer.status_code == 303 and "notice=recorded" in answer.headers["location"]
    assert api.service.get_run(run_id).status.value == "queued"
    (decision,) = [e.payload for e in api.service.events(run_id) if e.kind == "decision"]
    assert decision["principal"] == "ann" and decision["source"] == "inbox"
    assert "Decision recorded" in api.client.get(answer.headers["location"]).text


def test_an_edit_is_validated_and_a_stale_page_cannot_release_a_newer_turn(api: Api) -> None:
    run_id = api.waiting("notes")["id"]
    sign_in(api)
    fields = {"edit.call_0_0.to": "ops@example.com", "edit.call_0_0.body": "hi"}
    bad = decide(api, run_id, **{"call.call_0_0": "edit", "edit.call_0_0.amount": "12.5"}, **fields)
    assert bad.status_code == 422 and "amount: must be a whole number" in bad.text
    assert (
        api.service.store.decisions.decision_for(
            run_id, api.service.get_run(run_id).turn_digest or ""
        )
        is None
    )
    html = run_page(api, run_id)  # the page as a second tab holds it
    edited = {
        "call.call_0_0": "edit",
        "edit.call_0_0.to": "ops@example.com",
        "edit.call_0_0.amount": "7",
        "edit.call_0_0.body": "fine",
    }
    assert decide(api, run_id, **edited).status_code == 303
    (decision,) = [e.payload for e in api.service.events(run_id) if e.kind == "decision"]
    calls = decision["calls"]
    assert isinstance(calls, dict) and calls["call_0_0"] == {
        "decision": "edit",
        "arguments": {"to": "ops@example.com", "amount": 7, "body": "fine"},
    }
    digest = re.search(r'name="turn_digest" value="([0-9a-f]{64})"', html)
    assert digest is not None
    stale = api.client.post(
        f"/inbox/runs/{run_id}/decide",
        data={
            "csrf": csrf(html),
            "turn_digest": digest.group(1),
            "decision": "deny",
            "reason": "x",
        },
    )
    assert stale.status_code == 409 and "already decided" in stale.text


def test_a_deny_needs_a_reason_and_forms_need_their_csrf_token_and_origin(api: Api) -> None:
    run_id = api.waiting("notes")["id"]
    sign_in(api)
    assert decide(api, run_id, decision="deny").status_code == 422
    html = run_page(api, run_id)
    digest = re.search(r'name="turn_digest" value="([0-9a-f]{64})"', html)
    assert digest is not None
    form = {"turn_digest": digest.group(1), "decision": "approve"}
    no_token = api.client.post(f"/inbox/runs/{run_id}/decide", data=form)
    assert no_token.status_code == 403
    elsewhere = api.client.post(
        f"/inbox/runs/{run_id}/decide",
        data={**form, "csrf": csrf(html)},
        headers={"origin": "https://evil.example"},
    )
    assert elsewhere.status_code == 403
    assert api.service.get_run(run_id).status.value == "waiting_for_approval"


def test_bulk_decisions_are_one_per_run_and_only_for_one_kind(api: Api) -> None:
    runs = [api.waiting("notes")["id"] for _ in range(2)]
    other = api.waiting("w1")["id"]
    sign_in(api)
    html = api.client.get("/inbox").text
    token = csrf(html)
    digests = dict(re.findall(r'name="digest\.([0-9a-f-]+)" value="([0-9a-f]{64})"', html))
    mixed = {"csrf": token, "action": "approve", f"run.{runs[0]}": "on", f"run.{other}": "on"}
    mixed |= {f"digest.{r}": digests[r] for r in (runs[0], other)}
    refused = api.client.post("/inbox/bulk", data=mixed)
    assert refused.status_code == 422 and "one agent" in refused.text
    form = {"csrf": token, "action": "approve"}
    form |= {f"run.{r}": "on" for r in runs} | {f"digest.{r}": digests[r] for r in runs}
    asked = api.client.post("/inbox/bulk", data=form)  # first, what it will do
    assert asked.status_code == 200 and "Yes, approve 2 runs" in asked.text
    assert asked.text.count("send_note(to=ops@example.com, amount=12") == 2
    assert all(api.service.get_run(r).status.value == "waiting_for_approval" for r in runs)
    form["confirmed"] = "yes"
    assert dict(re.findall(r'name="(digest\.[^"]+)" value="([0-9a-f]{64})"', asked.text)) == {
        f"digest.{r}": digests[r] for r in runs
    }
    done = api.client.post("/inbox/bulk", data=form)
    assert done.status_code == 200 and done.text.count("Decision recorded") == 2
    assert all(api.service.get_run(r).status.value == "queued" for r in runs)
    again = api.client.post("/inbox/bulk", data=form)
    assert again.text.count("already recorded; nothing changed") == 2
    ghost = {"csrf": token, "action": "approve", "run.00000000-0000-4000-8000-000000000000": "on"}
    unknown = api.client.post("/inbox/bulk", data=ghost)
    assert unknown.status_code == 422 and "no run has id" in unknown.text
    deny = {
        "csrf": token,
        "action": "deny",
        f"run.{other}": "on",
        f"digest.{other}": digests[other],
    }
    assert api.client.post("/inbox/bulk", data=deny).status_code == 422  # no reason
    asked = api.client.post("/inbox/bulk", data={**deny, "reason": "not today"})
    assert "Deny this run?" in asked.text and "the model is told: <q>not today</q>" in asked.text
    assert api.service.get_run(other).status.value == "waiting_for_approval"


def test_a_token_sign_in_decides_with_its_roles(api: Api, issuer: Issuer) -> None:
    run_id = api.waiting("payments")["id"]
    sign_in(api, token=issuer.token("sam", ["support"]))
    refused = decide(api, run_id)
    assert refused.status_code == 403 and "sam holds none of the roles" in refused.text
    sign_in(api, token=issuer.token("paula", ["payments"]))
    assert decide(api, run_id).status_code == 303
    (decision,) = [e.payload for e in api.service.events(run_id) if e.kind == "decision"]
    assert decision["principal"] == "paula" and decision["source"] == "oidc"


# -- sign-ins (issue 26, defects 2 and 4) -------------------------------------------------


def waiting_run(api: Api, agent: str) -> str:
    """A run that waits, made through the service (the API may take no token here)."""
    run, _ = api.service.start_run(agent, "pay INV-7", requested_by="someone")
    api.segment(run.id)
    assert api.service.get_run(run.id).status.value == "waiting_for_approval"
    return run.id


def test_no_cookie_key_is_derived_from_the_webhook_secret(db_url: str, issuer: Issuer) -> None:
    """Issue 26, defect 2: with OIDC and no API token or session secret, the cookie key
    was derived from the webhook secret, whose holder (the role-less approval client
    ``default``) could sign a cookie with every role and release what it may not."""
    import hashlib
    import hmac

    from itsdangerous import URLSafeTimedSerializer

    from airlock.workers.testing import SECRET
    from tests.api.conftest import OLD_SECRET

    api = make_api(db_url, api_token=None, **issuer.settings())
    try:
        run_id = waiting_run(api, "payments")
        webhook_secret = f"{SECRET} {OLD_SECRET}"
        key = hmac.new(webhook_secret.encode(), b"airlock-inbox:webhook", hashlib.sha256)
        forged = URLSafeTimedSerializer(key.digest(), salt="airlock-inbox-session").dumps(
            {
                "id": "mallory",
                "method": "inbox",
                "roles": [],
                "every_role": True,
                "issuer": None,
                "csrf": "forged",
                "expires": time.time() + 3600,
            }
        )
        api.client.cookies.set("airlock_inbox", forged, path="/inbox")
        queue = api.client.get("/inbox", follow_redirects=False)
        assert queue.status_code == 303 and queue.headers["location"] == "/inbox/login"
        digest = api.service.get_run(run_id).turn_digest
        form = {"csrf": "forged", "turn_digest": digest, "decision": "approve"}
        answer = api.client.post(f"/inbox/runs/{run_id}/decide", data=form, follow_redirects=False)
        assert answer.status_code == 303 and answer.headers["location"] == "/inbox/login"
        assert api.service.get_run(run_id).status.value == "waiting_for_approval"
    finally:
        api.service.store.engine.dispose()


def test_a_sign_in_keeps_only_a_random_token_in_its_cookie(api: Api, issuer: Issuer) -> None:
    """What the sign-in proved is on the server: the cookie names no principal, no role."""
    sign_in(api, token=issuer.token("sam", ["support"]))
    cookie = api.client.cookies["airlock_inbox"]
    assert "sam" not in cookie and "support" not in cookie and len(cookie) >= 40
    assert "." not in cookie  # no signed payload: a random token
    assert "Signed in as <strong>sam</strong>" in api.client.get("/inbox").text


def test_signing_out_ends_the_session_for_every_copy_of_its_cookie(api: Api) -> None:
    """Issue 26, defect 4: a cookie copied before sign-out approved afterwards."""
    run_id = api.waiting("notes")["id"]
    sign_in(api)
    html = run_page(api, run_id)
    copy = TestClient(
        api.client.app, cookies={"airlock_inbox": api.client.cookies["airlock_inbox"]}
    )
    assert copy.get("/inbox", follow_redirects=False).status_code == 200
    out = api.client.post("/inbox/logout", data={"csrf": csrf(html)}, follow_redirects=False)
    assert out.status_code == 303 and out.headers["location"] == "/inbox/login"
    assert copy.get("/inbox", follow_redirects=False).headers["location"] == "/inbox/login"
    digest = api.service.get_run(run_id).turn_digest
    form = {"csrf": csrf(html), "turn_digest": digest, "decision": "approve"}
    late = copy.post(f"/inbox/runs/{run_id}/decide", data=form, follow_redirects=False)
    assert late.status_code == 303 and late.headers["location"] == "/inbox/login"
    assert api.service.get_run(run_id).status.value == "waiting_for_approval"


def sign_in_from(api: Api, address: str, token: str, name: str) -> Any:
    client = TestClient(api.client.app, client=(address, 50000))
    return client.post("/inbox/login", data={"token": token, "name": name}, follow_redirects=False)


def test_failed_sign_ins_slow_the_address_that_makes_them(api: Api, issuer: Issuer) -> None:
    """Issue 26, defect 4: sign-in took about 400 guesses a second from one client."""
    for i in range(PER_ADDRESS):
        assert sign_in_from(api, "10.0.0.1", f"guess-{i}", f"n{i}").status_code == 401
    refused = sign_in_from(api, "10.0.0.1", TOKEN, "ann")  # the secret is not checked
    assert refused.status_code == 429 and "set-cookie" not in refused.headers
    assert 0 < int(refused.headers["retry-after"]) <= WINDOW.total_seconds()
    assert "too many failed sign-ins from this address" in refused.text
    assert refused.headers["content-security-policy"] == CSP
    assert sign_in_from(api, "10.0.0.2", TOKEN, "ann").status_code == 303  # another client
    assert sign_in_from(api, "10.0.0.1", TOKEN, "ann").status_code == 429  # still counted
    # a token of the issuer cannot be guessed: it signs in whatever the counts
    signed = sign_in_from(api, "10.0.0.1", issuer.token("sam", ["support"]), "")
    assert signed.status_code == 303, signed.text
    forged = issuer.token("sam", ["support"], key=new_key())
    assert sign_in_from(api, "10.0.0.1", forged, "").status_code == 429


def test_failures_naming_a_name_never_lock_it_for_others(db_url: str, issuer: Issuer) -> None:
    """Issue 42, item 5: ten wrong tokens naming alice from two addresses locked alice,
    with the right token, out for 5 minutes (429), from anywhere, renewable for ever.
    The counts are in the database (two API processes share them): the addresses that
    failed are slowed for that name, no one else is."""
    first, second = (make_api(db_url, **issuer.settings()) for _ in range(2))
    try:
        for i in range(2 * PER_ADDRESS_NAME):
            api = (first, second)[i % 2]
            address = f"10.0.1.{i % 2}"
            assert sign_in_from(api, address, f"guess-{i}", "alice").status_code == 401
        for api in (first, second):
            assert sign_in_from(api, "10.0.2.1", TOKEN, "alice").status_code == 303
            assert sign_in_from(api, "10.0.2.1", TOKEN, "Alice").status_code == 303
            refused = sign_in_from(api, "10.0.1.0", TOKEN, "alice")  # from a guesser's
            assert refused.status_code == 429, refused.text
            assert "for this name from this address" in refused.text
            assert sign_in_from(api, "10.0.1.0", TOKEN, "bob").status_code == 303
    finally:
        for api in (first, second):
            api.service.store.engine.dispose()


def test_an_issuer_token_signs_in_from_an_address_that_failed(api: Api, issuer: Issuer) -> None:
    """A valid token of the issuer is never refused for others' failures, even where
    they share an address (every client behind a proxy that does not pass theirs on)."""
    for i in range(PER_ADDRESS):
        assert sign_in_from(api, "10.0.4.1", f"guess-{i}", "alice").status_code in (401, 429)
    alice = sign_in_from(api, "10.0.4.1", issuer.token("alice", ["support"]), "alice")
    assert alice.status_code == 303, alice.text
    expired = issuer.token("alice", lifetime=-120)
    late = sign_in_from(api, "10.0.4.2", expired, "alice")  # one that does not verify: 401
    assert late.status_code == 401 and "the token has expired" in late.text


def test_a_refused_sign_in_is_logged_with_the_address_never_the_token(
    api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="airlock"):
        for i in range(PER_ADDRESS + 1):
            sign_in_from(api, "10.0.5.1", f"s3cret-guess-{i}", "ann")
        sign_in_from(api, "10.0.5.2", TOKEN, "ann")
    said = [(r.getMessage(), getattr(r, "action", None), getattr(r, "client", None))
            for r in caplog.records if r.name == "airlock"]  # fmt: skip
    failed = [s for s in said if s[1] == "inbox.sign_in_failed"]
    throttled = [s for s in said if s[1] == "inbox.sign_in_throttled"]
    assert len(failed) == PER_ADDRESS_NAME and {c for _, _, c in failed} == {"10.0.5.1"}
    assert len(throttled) == PER_ADDRESS + 1 - PER_ADDRESS_NAME
    assert all(c == "10.0.5.1" for _, _, c in throttled)
    assert ("signed in to the inbox: ann (inbox)", "inbox.signed_in", "10.0.5.2") in said
    assert not any("s3cret" in m or TOKEN in m for m, _, _ in said)


def test_successful_sign_ins_are_not_counted(api: Api) -> None:
    for _ in range(PER_ADDRESS + 1):
        assert sign_in_from(api, "10.0.3.1", TOKEN, "ann").status_code == 303


def test_a_sign_in_that_is_no_ones_failure_is_not_counted(db_url: str, issuer: Issuer) -> None:
    """A name that is not one (with the right token), an issuer whose keys cannot be
    fetched (503): said, and the address keeps its allowance."""
    api = make_api(
        db_url, **issuer.settings(), oidc_jwks_url="http://127.0.0.1:9/jwks"
    )  # nothing listens there
    try:
        for _ in range(PER_ADDRESS + 1):
            nameless = sign_in_from(api, "10.0.6.1", TOKEN, "")
            assert nameless.status_code == 401 and "your name" in nameless.text
            away = sign_in_from(api, "10.0.6.1", issuer.token("sam"), "")
            assert away.status_code == 503 and "cannot fetch the issuer" in away.text
        assert sign_in_from(api, "10.0.6.1", TOKEN, "ann").status_code == 303
    finally:
        api.service.store.engine.dispose()


def test_a_decision_is_not_stored_after_its_sign_in_ended(api: Api) -> None:
    """Found in review (issue 26): a sign-out that completed between the inbox's read of
    the sign-in and the decision's write still got the decision stored. The write now
    re-checks the sign-in in its transaction (and holds its row to the commit)."""
    run_id = api.waiting("notes")["id"]
    sign_in(api)
    html = run_page(api, run_id)
    cookie = api.client.cookies["airlock_inbox"]
    service = api.service
    record = service.record_decision
    signed_out: list[bool] = []

    def after_sign_out(*args: Any, **kwargs: Any) -> Any:
        # the sign-out lands after the inbox read the session, before the write
        other = TestClient(api.client.app, cookies={"airlock_inbox": cookie})
        out = other.post("/inbox/logout", data={"csrf": csrf(html)}, follow_redirects=False)
        signed_out.append(out.status_code == 303)
        assert other.get("/inbox", follow_redirects=False).headers["location"] == "/inbox/login"
        return record(*args, **kwargs)

    service.record_decision = after_sign_out  # type: ignore[method-assign]
    digest = service.get_run(run_id).turn_digest
    form = {"csrf": csrf(html), "turn_digest": digest, "decision": "approve"}
    refused = api.client.post(f"/inbox/runs/{run_id}/decide", data=form, follow_redirects=False)
    service.record_decision = record  # type: ignore[method-assign]
    assert signed_out == [True]
    assert refused.status_code == 409 and "sign-in has ended" in refused.text
    assert service.get_run(run_id).status.value == "waiting_for_approval", (
        "a decision was stored by a sign-in that had already ended"
    )


def test_an_approver_withdraws_their_approval_from_the_run_page(api: Api, issuer: Issuer) -> None:
    """Issue 26, defect 5: until the quorum is reached, the inbox offers the signed-in
    approver to take back their approval."""
    run_id = api.waiting("four_eyes")["id"]
    sign_in(api, token=issuer.token("tess", ["treasury"]))
    assert 'id="withdraw"' not in run_page(api, run_id)
    assert "Nothing runs yet: this approval counts toward the 2 distinct" in run_page(api, run_id)
    approved = decide(api, run_id)
    assert approved.status_code == 303 and "notice=partial" in approved.headers["location"]
    html = run_page(api, run_id)
    assert 'id="withdraw"' in html
    digest = api.service.get_run(run_id).turn_digest
    form = {"csrf": csrf(html), "turn_digest": digest, "decision": "withdraw"}
    taken = api.client.post(f"/inbox/runs/{run_id}/decide", data=form, follow_redirects=False)
    assert taken.status_code == 303 and "notice=withdrawn" in taken.headers["location"]
    assert "Your approval is withdrawn" in api.client.get(taken.headers["location"]).text
    assert digest is not None and api.service.store.decisions.approvals(run_id, digest) == []
    assert 'id="withdraw"' not in run_page(api, run_id)


def outcomes(html: str) -> dict[str, list[str]]:
    """The calls the page's "what will happen" lists as running and as denied."""
    found: dict[str, list[str]] = {"run": [], "deny": []}
    for kind, call in re.findall(r'data-outcome="(run|deny)" data-call="([^"]+)"', html):
        found[kind].append(call)
    return found


def test_the_page_says_what_will_run_before_it_is_sent_and_that_is_what_runs(api: Api) -> None:
    run_id = api.waiting("two_notes")["id"]
    sign_in(api)
    html = run_page(api, run_id)
    assert outcomes(html) == {"run": ["call_0_0", "call_0_1"], "deny": []}
    assert "overrides the whole turn" in html
    digest = re.search(r'name="turn_digest" value="([0-9a-f]{64})"', html)
    assert digest is not None
    form = {
        "csrf": csrf(html),
        "turn_digest": digest.group(1),
        "decision": "deny",
        "reason": "not now",
        "call.call_0_1": "edit",
        "edit.call_0_1.to": "b@example.com",
        "edit.call_0_1.amount": "3",
        "edit.call_0_1.body": "second",
    }
    preview = api.client.post(f"/inbox/runs/{run_id}/preview", data=form)
    assert preview.status_code == 200
    assert outcomes(preview.text) == {"run": ["call_0_1"], "deny": ["call_0_0"]}
    assert "with your edits" in preview.text and "this call&#39;s own choice" in preview.text
    told = "Error: tool &#34;send_note&#34; was denied by the operator. Reason: not now"
    assert told in preview.text
    refused = api.client.post(
        f"/inbox/runs/{run_id}/preview", data={**form, "edit.call_0_1.amount": "x"}
    )
    assert "would be refused: amount: must be a whole number" in refused.text
    checked = api.client.post(f"/inbox/runs/{run_id}/decide", data={**form, "check": "1"})
    assert checked.status_code == 200  # without script: the page again, with its summary
    assert outcomes(checked.text) == {"run": ["call_0_1"], "deny": ["call_0_0"]}
    forged = api.client.post(f"/inbox/runs/{run_id}/preview", data={**form, "csrf": "x"})
    assert forged.status_code == 403
    stale = api.client.post(f"/inbox/runs/{run_id}/preview", data={**form, "turn_digest": "0" * 64})
    assert "already decided" in stale.text
    assert api.service.get_run(run_id).status.value == "waiting_for_approval"  # nothing sent

    answer = api.client.post(f"/inbox/runs/{run_id}/decide", data=form, follow_redirects=False)
    assert answer.status_code == 303, answer.text
    api.segment(run_id)
    tools = [e.payload for e in api.service.events(run_id) if e.kind == "tool"]
    assert [(t["call_id"], t["arguments"]) for t in tools] == [
        ("call_0_1", {"to": "b@example.com", "amount": 3, "body": "second"})
    ]
    page = api.client.get(f"/inbox/runs/{run_id}", params={"notice": "recorded"}).text
    assert api.service.get_run(run_id).status.value == "completed"
    assert "resumes" not in page and "The run has since finished: completed" in page
    assert (
        '<h2 id="transcript-title">Transcript</h2>' in page and "noted 3 for b@example.com" in page
    )
    assert "was denied by the operator. Reason: not now" in page  # what the model was told
    timeline = page[page.index('<table class="timeline') :]
    assert "the whole turn denied; send_note (call 2): approved with edits" in timeline
    assert "<code>amount</code>: <del>2</del> → <ins>3</ins>" in timeline
    assert '<td data-label="Who">ann <small>signed in via inbox' in timeline
    assert "{&#34;" not in timeline and "call_0_1" not in timeline  # no raw JSON, no ids


def test_a_queue_row_says_what_is_asked_and_the_recent_view_who_decided(api: Api) -> None:
    waiting = api.create("notes", metadata={"ticket": "T-4711"})["id"]
    api.segment(waiting)
    decided = api.waiting("two_notes")["id"]
    sign_in(api)
    html = api.client.get("/inbox").text
    row = html[html.index(f'data-run="{waiting}"') :]
    row = row[: row.index("</tr>")]
    assert "send_note(to=ops@example.com, amount=12, body=&lt;script&gt;" in row
    assert "mail 42" in row and "ticket=T-4711" in row
    assert "waiting for a decision" in row and "waiting_for_approval" not in row.split('"')[-1]
    assert "<h1>What waits for a decision</h1>" in html and "Approve selected" in html
    assert decide(api, decided).status_code == 303
    recent = api.client.get("/inbox", params={"status": "recent"}).text
    assert "<h1>Recently decided or finished</h1>" in recent
    assert "Approve selected" not in recent and 'type="checkbox"' not in recent
    row = recent[recent.index(f'data-run="{decided}"') :]
    row = row[: row.index("</tr>")]
    assert '<td data-label="Calls">2</td>' in row
    assert "approved by <strong>ann</strong>" in row and ">queued<" in row


def test_the_sign_in_says_where_the_token_comes_from_and_a_favicon_is_served(api: Api) -> None:
    login = api.client.get("/inbox/login").text
    intro = login.index("Approvers sign in here")
    assert intro < login.index("in with the API token") < login.index("AIRLOCK_API_TOKEN")
    icon = api.client.get("/favicon.ico")
    assert icon.status_code == 200 and icon.headers["content-type"] == "image/svg+xml"
    assert icon.content.startswith(b"<svg")


def test_what_will_happen_says_a_decision_the_approver_may_not_make_is_refused(
    api: Api, issuer: Issuer
) -> None:
    """Attack review: the summary said "runs" for a decision the server refuses (403),
    to an approver without the tool's role and to the run's own requester."""
    run_id = api.waiting("payments")["id"]
    sign_in(api, token=issuer.token("sam", ["support"]))
    html = run_page(api, run_id)
    assert outcomes(html)["run"] == [] and "sam holds none of the roles" in html
    digest = api.service.get_run(run_id).turn_digest
    form = {"csrf": csrf(html), "turn_digest": digest, "decision": "approve"}
    preview = api.client.post(f"/inbox/runs/{run_id}/preview", data=form)
    assert "would be refused: sam holds none of the roles" in preview.text
    assert outcomes(preview.text)["run"] == []
    denied = {**form, "decision": "deny", "reason": "no"}
    preview = api.client.post(f"/inbox/runs/{run_id}/preview", data=denied)
    assert "would be refused: sam holds none of the roles" in preview.text
    assert decide(api, run_id).status_code == 403  # as the summary said

    own, _ = api.service.start_run("w1", "mine", requested_by="ann")
    api.segment(own.id)
    sign_in(api, name="ann")
    html = run_page(api, own.id)
    assert "ann requested this run and may not approve its calls" in html
    assert decide(api, own.id).status_code == 403
    assert api.service.get_run(own.id).status.value == "waiting_for_approval"


def test_a_bulk_confirmation_says_which_runs_would_be_refused(api: Api, issuer: Issuer) -> None:
    """Attack review: the bulk confirmation said "these calls will run" for runs whose
    decision the server then refused: a run the approver holds no role for, and a run
    whose turn moved on since the queue was shown."""
    runs = [api.waiting("payments")["id"] for _ in range(2)]
    sign_in(api, token=issuer.token("sam", ["support"]))
    html = api.client.get("/inbox").text
    digests = dict(re.findall(r'name="digest\.([0-9a-f-]+)" value="([0-9a-f]{64})"', html))
    form = {"csrf": csrf(html), "action": "approve"}
    form |= {f"run.{r}": "on" for r in runs} | {f"digest.{r}": digests[r] for r in runs}
    asked = api.client.post("/inbox/bulk", data=form)
    assert asked.status_code == 200
    assert asked.text.count("will be refused: sam holds none of the roles") == 2

    sign_in(api, token=issuer.token("paula", ["payments"]))
    html = api.client.get("/inbox").text
    form["csrf"] = csrf(html)
    assert "will be refused" not in api.client.post("/inbox/bulk", data=form).text
    stale = {**form, f"digest.{runs[0]}": "0" * 64}
    asked = api.client.post("/inbox/bulk", data=stale)
    assert asked.text.count("will be refused: this turn was already decided") == 1
    assert all(api.service.get_run(r).status.value == "waiting_for_approval" for r in runs)


def test_a_search_for_any_text_answers_the_queue(api: Api) -> None:
    """Attack review: ``/inbox?q=%00`` was a 500 on PostgreSQL (its text holds no NUL)."""
    api.create("w1", metadata={"ticket": "T-1"})
    sign_in(api)
    for q in ("\x00", "a\x00b", "\\", "\\u0000", "%_", "T-1\x00"):
        for path in ("/inbox", "/inbox/queue"):
            answer = api.client.get(path, params={"q": q, "status": "all"})
            assert answer.status_code == 200, (q, path)
            answer = api.client.get(path, params={"agent": q, "tool": q, "status": "all"})
            assert answer.status_code == 200, (q, path)
    listed = api.client.get("/v1/runs", params={"agent": "w1\x00"}, headers=api.headers())
    assert listed.status_code in (200, 422), listed.text


def test_an_approver_grants_from_the_run_page_and_a_bad_grant_changes_nothing(
    api: Api, issuer: Issuer
) -> None:
    run_id = api.waiting("payments")["id"]
    sign_in(api, token=issuer.token("paula", ["payments"]))
    page = run_page(api, run_id)
    assert 'name="grant_scope"' in page and "for a repeat of exactly these calls" in page
    refused = decide(api, run_id, grant_scope="forever", grant_for="8h")
    assert refused.status_code == 422 and "scope" in refused.text
    refused = decide(api, run_id, grant_scope="call", grant_for="90d")
    assert refused.status_code == 422 and "30 days" in refused.text
    assert api.service.grants.list(state="all") == []
    assert api.service.get_run(run_id).status.value == "waiting_for_approval"
    assert decide(api, run_id, grant_scope="call", grant_for="8h").status_code == 303
    (grant,) = api.service.grants.list()
    assert (grant.granted_by, grant.tool, grant.scope) == ("paula", "pay", "call")
    assert (grant.expires_at - grant.created_at).total_seconds() == 8 * 3600


def test_the_grants_page_lists_grants_and_revokes_one_with_authority(
    api: Api, issuer: Issuer
) -> None:
    run_id = api.waiting("payments")["id"]
    sign_in(api, token=issuer.token("paula", ["payments"]))
    assert decide(api, run_id, grant_scope="call", grant_for="1h").status_code == 303
    (grant,) = api.service.grants.list()
    page = api.client.get("/inbox/grants")
    assert page.status_code == 200 and "paula" in page.text and "INV-7" in page.text
    assert f"/inbox/grants/{grant.id}/revoke" in page.text

    sign_in(api, token=issuer.token("sam", ["payments"]))  # neither grantor nor operator
    token = csrf(api.client.get("/inbox/grants").text)
    refused = api.client.post(f"/inbox/grants/{grant.id}/revoke", data={"csrf": token})
    assert refused.status_code == 403 and "sam may not revoke" in refused.text
    forged = api.client.post(f"/inbox/grants/{grant.id}/revoke", data={"csrf": "x"})
    assert forged.status_code in (400, 403)
    assert api.service.grants.get(grant.id).revoked_at is None

    sign_in(api, token=issuer.token("paula", ["payments"]))
    token = csrf(api.client.get("/inbox/grants").text)
    revoked = api.client.post(
        f"/inbox/grants/{grant.id}/revoke", data={"csrf": token}, follow_redirects=False
    )
    assert revoked.status_code == 303
    assert api.service.grants.get(grant.id).revoked_by == "paula"
    again = api.client.post(f"/inbox/grants/{grant.id}/revoke", data={"csrf": token})
    assert again.status_code == 409 and "was revoked by paula" in again.text
    assert "No grant stands now" in api.client.get("/inbox/grants").text
    assert "paula" in api.client.get("/inbox/grants?state=all").text
    missing = api.client.post("/inbox/grants/nope/revoke", data={"csrf": token})
    assert missing.status_code == 404 and "no grant has id" in missing.text
