"""Standing grants over HTTP, on both databases: given with a signed approval, listed,
shown, used by a repeat of the same call, revoked. Every refusal is a problem+json and
changes nothing."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.api.conftest import Api, make_api
from tests.api.test_principals import PAYMENTS_SECRET, events, problem, state_of
from tests.issuer import Issuer

GRANT = {"scope": "call", "expires_in": "1h"}


@pytest.fixture
def api(db_url: str, issuer: Issuer) -> Iterator[Api]:
    api = make_api(
        db_url,
        approval_clients={"payments-desk": {"secret": PAYMENTS_SECRET, "roles": ["payments"]}},
        **issuer.settings(),
    )
    yield api
    api.service.store.engine.dispose()


def approve(digest: str, **extra: Any) -> dict[str, Any]:
    return {"turn_digest": digest, "decision": "approve", "approver": "pat", **extra}


def grants(api: Api, query: str = "") -> list[dict[str, Any]]:
    response = api.client.get(f"/v1/grants{query}", headers=api.headers())
    assert response.status_code == 200, response.text
    found: list[dict[str, Any]] = response.json()["grants"]
    return found


def test_a_grant_given_with_an_approval_releases_the_same_call_until_revoked(
    api: Api, issuer: Issuer
) -> None:
    view = api.waiting("payments")
    body = approve(view["pending"]["turn_digest"], grant=GRANT)
    sent = api.approve(view["id"], body, secret=PAYMENTS_SECRET)
    assert sent.status_code == 202
    (grant,) = grants(api)
    assert sent.json()["grants"] == [grant["id"]]
    # the same decision again by someone else: 200 duplicate, and it says no grant stands
    again = api.approve(view["id"], approve(body["turn_digest"], approver="pia", grant=GRANT),
                        secret=PAYMENTS_SECRET)  # fmt: skip
    assert again.status_code == 200 and again.json()["result"] == "duplicate"
    assert again.json()["grants"] == []
    assert len(grants(api)) == 1
    assert grant["state"] == "active" and grant["granted_by"] == "pat"
    assert (grant["agent"], grant["tool"], grant["scope"]) == ("payments", "pay", "call")
    assert grant["arguments"] == {"invoice": "INV-7"}
    assert grant["auth"]["client"] == "payments-desk" and grant["auth"]["roles"] == ["payments"]
    assert grant["source"]["run_id"] == view["id"]
    (decision,) = events(api, view["id"], "decision")
    assert [g["id"] for g in decision["grants"]] == [grant["id"]]

    repeat = api.create("payments")
    api.segment(repeat["id"])
    assert api.run(repeat["id"])["status"] == "queued"  # released, nobody asked
    (released,) = events(api, repeat["id"], "decision")
    assert released["source"] == "grant" and released["approver"] == "pat"
    assert released["auth"] == {"method": "grant", "grants": [grant["id"]]}
    shown = api.client.get(f"/v1/grants/{grant['id']}", headers=api.headers()).json()
    assert shown["uses"] == 1

    # a token holding no operator role, and not the grantor, may not revoke it
    sam = issuer.bearer("sam", ["payments"])
    problem(api.client.post(f"/v1/grants/{grant['id']}/revoke", headers=sam), 403, "sam")
    revoked = api.client.post(f"/v1/grants/{grant['id']}/revoke", headers=api.headers())
    assert revoked.status_code == 200, revoked.text
    assert revoked.json()["state"] == "revoked"
    again = api.client.post(f"/v1/grants/{grant['id']}/revoke", headers=api.headers())
    problem(again, 409, "was revoked")
    assert grants(api) == [] and len(grants(api, "?state=all")) == 1
    (audit,) = events(api, view["id"], "grant_revoked")
    assert audit["id"] == grant["id"]

    after = api.create("payments")
    api.segment(after["id"])
    assert api.run(after["id"])["status"] == "waiting_for_approval"


@pytest.mark.parametrize(
    ("grant", "words"),
    [
        ({"scope": "forever", "expires_in": "1h"}, ("scope",)),
        ({"scope": "call", "expires_in": "31d"}, ("30 days",)),
        ({"scope": "call", "expires_in": "soon"}, ("expires_in",)),
        ({"scope": "call", "expires_in": 0}, ("expires_in",)),
        # a number no float holds: refused, not a 500 (float() of it overflows)
        ({"scope": "call", "expires_in": 10**400}, ("30 days",)),
        ({"scope": "call", "expires_in": "9" * 400 + "s"}, ("30 days",)),
        # not a whole number of seconds (JSON true is no duration, nor is 90.5)
        ({"scope": "call", "expires_in": True}, ("expires_in",)),
        ({"scope": "call", "expires_in": 90.5}, ("expires_in",)),
        ({"scope": "call", "expires_in": "1h", "tool": "*"}, ("tool",)),
        ("call", ()),
    ],
)
def test_malformed_grants_are_refused_and_change_nothing(
    api: Api, grant: Any, words: tuple[str, ...]
) -> None:
    view = api.waiting("payments")
    before = state_of(api, view["id"])
    body = approve(view["pending"]["turn_digest"], grant=grant)
    response = api.approve(view["id"], body, secret=PAYMENTS_SECRET)
    problem(response, 422, *words)
    assert state_of(api, view["id"]) == before and grants(api, "?state=all") == []


def test_grants_that_cannot_stand_are_refused_and_change_nothing(api: Api, issuer: Issuer) -> None:
    four_eyes, view = api.waiting("four_eyes"), api.waiting("payments")
    before = state_of(api, four_eyes["id"]), state_of(api, view["id"])
    body = {"turn_digest": four_eyes["pending"]["turn_digest"], "decision": "approve",
            "grant": GRANT}  # fmt: skip
    treasurer = issuer.bearer("tess", ["treasury"])
    sent = api.client.post(f"/v1/runs/{four_eyes['id']}/approval", json=body, headers=treasurer)
    problem(sent, 422, "need 2 approvals")
    deny = {"turn_digest": view["pending"]["turn_digest"], "decision": "deny", "reason": "no",
            "grant": GRANT}  # fmt: skip
    problem(api.approve(view["id"], deny, secret=PAYMENTS_SECRET), 422, "with an approval")
    assert (state_of(api, four_eyes["id"]), state_of(api, view["id"])) == before
    assert grants(api, "?state=all") == []


def test_unknown_grants_are_404_and_the_routes_need_a_token(api: Api) -> None:
    for grant_id in ("nope", "7d3c0c1e-8f5b-4a57-9a54-0d9f3d6e7a11"):
        problem(api.client.get(f"/v1/grants/{grant_id}", headers=api.headers()), 404, grant_id)
        revoke = api.client.post(f"/v1/grants/{grant_id}/revoke", headers=api.headers())
        problem(revoke, 404, grant_id)
    assert api.client.get("/v1/grants").status_code == 401
    problem(api.client.get("/v1/grants?state=some", headers=api.headers()), 422)


def test_grants_listed_by_an_agent_named_with_a_nul_are_none(api: Api) -> None:
    """PostgreSQL's text holds no NUL: an agent name with one matches no grant (as
    ``GET /v1/runs?agent=``), never a 500."""
    view = api.waiting("payments")
    body = approve(view["pending"]["turn_digest"], grant=GRANT)
    assert api.approve(view["id"], body, secret=PAYMENTS_SECRET).status_code == 202
    assert grants(api, "?agent=payments%00") == [] and grants(api, "?agent=%00&state=all") == []
    assert len(grants(api, "?agent=payments")) == 1
