"""The approver inbox, server side, on both databases: sign-in, the queue, a run's
page, decisions through the service, and what a hostile page or input cannot do.
(The browser walk is in tests/browser.)"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.api.conftest import TOKEN, Api, make_api
from tests.integration.agents import HOSTILE_BODY
from tests.issuer import Issuer


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
    assert "send_note" in html and "asks" in html and "any approver" in html
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
    done = api.client.post("/inbox/bulk", data=form)
    assert done.status_code == 200 and done.text.count("Decision recorded") == 2
    assert all(api.service.get_run(r).status.value == "queued" for r in runs)
    again = api.client.post("/inbox/bulk", data=form)
    assert again.text.count("already recorded; nothing changed") == 2


def test_a_token_sign_in_decides_with_its_roles(api: Api, issuer: Issuer) -> None:
    run_id = api.waiting("payments")["id"]
    sign_in(api, token=issuer.token("sam", ["support"]))
    refused = decide(api, run_id)
    assert refused.status_code == 403 and "sam holds none of the roles" in refused.text
    sign_in(api, token=issuer.token("paula", ["payments"]))
    assert decide(api, run_id).status_code == 303
    (decision,) = [e.payload for e in api.service.events(run_id) if e.kind == "decision"]
    assert decision["principal"] == "paula" and decision["source"] == "oidc"
