"""Who may cancel and retry a run over HTTP, on both databases (issue 26, defect 6): its
requester, the operator (the API token's holder) or a holder of an operator role; anyone
else gets 403 and changes nothing. The event names the principal and how it was
authenticated."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from airlock.persistence.domain import RunStatus
from tests.api.conftest import Api, make_api
from tests.api.test_principals import events, problem, state_of
from tests.issuer import Issuer


@pytest.fixture
def api(db_url: str, issuer: Issuer) -> Iterator[Api]:
    api = make_api(db_url, **issuer.settings())
    yield api
    api.service.store.engine.dispose()


def create(api: Api, headers: dict[str, str]) -> str:
    made = api.client.post("/v1/runs", json={"agent": "w1", "input": "mail 42"}, headers=headers)
    assert made.status_code == 201, made.text
    run_id: str = made.json()["id"]
    return run_id


def failed(api: Api, headers: dict[str, str]) -> str:
    run_id = create(api, headers)
    store = api.service.store
    assert store.transitions.claim(run_id, "w", api.service.limits.lease) is not None
    assert store.transitions.finish(run_id, RunStatus.FAILED, owner="w", error="boom")
    return run_id


def act(api: Api, run_id: str, action: str, headers: dict[str, str]) -> Any:
    return api.client.post(f"/v1/runs/{run_id}/{action}", headers=headers)


def test_another_subject_may_neither_cancel_nor_retry_and_changes_nothing(
    api: Api, issuer: Issuer
) -> None:
    alice, bob = issuer.bearer("alice"), issuer.bearer("bob", ["payments"])
    queued, broken = create(api, alice), failed(api, alice)
    for run_id, action in ((queued, "cancel"), (broken, "retry")):
        before = state_of(api, run_id)
        problem(act(api, run_id, action, bob), 403, "bob may not", "requester")
        assert state_of(api, run_id) == before
    assert api.run(queued)["status"] == "queued" and api.run(broken)["status"] == "failed"


@pytest.mark.parametrize("action", ["cancel", "retry"])
def test_the_requester_may_and_the_event_names_them(api: Api, issuer: Issuer, action: str) -> None:
    alice = issuer.bearer("alice")
    run_id = create(api, alice) if action == "cancel" else failed(api, alice)
    answer = act(api, run_id, action, alice)
    assert answer.status_code == (200 if action == "cancel" else 202), answer.text
    [payload] = events(api, run_id, "cancelled" if action == "cancel" else "retry")
    assert payload["principal"] == payload["by"] == "alice"
    assert payload["auth"] == {"method": "oidc", "issuer": issuer.url, "roles": []}
    assert payload["authority"] == "requester"


def test_a_holder_of_an_operator_role_may(api: Api, issuer: Issuer) -> None:
    run_id = create(api, issuer.bearer("alice"))
    answer = act(api, run_id, "cancel", issuer.bearer("olga", ["operator", "payments"]))
    assert answer.status_code == 200 and answer.json()["status"] == "cancelled"
    [payload] = events(api, run_id, "cancelled")
    assert payload["principal"] == "olga" and payload["authority"] == "role"
    assert payload["auth"] == {"method": "oidc", "issuer": issuer.url, "roles": ["operator"]}
    assert payload["was"] == "queued"


def test_the_operator_roles_are_configured(db_url: str, issuer: Issuer) -> None:
    api = make_api(db_url, operator_roles="sre, on-call", **issuer.settings())
    try:
        run_id = failed(api, issuer.bearer("alice"))
        problem(act(api, run_id, "retry", issuer.bearer("olga", ["operator"])), 403, "on-call")
        assert act(api, run_id, "retry", issuer.bearer("sam", ["sre"])).status_code == 202
        [payload] = events(api, run_id, "retry")
        assert payload["auth"]["roles"] == ["sre"] and payload["previous_error"] == "boom"
    finally:
        api.service.store.engine.dispose()


def test_the_api_tokens_holder_is_the_operator(api: Api, issuer: Issuer) -> None:
    alice = issuer.bearer("alice")
    queued, broken = create(api, alice), failed(api, alice)
    assert act(api, queued, "cancel", api.headers()).status_code == 200
    assert act(api, broken, "retry", api.headers()).status_code == 202
    for run_id, kind in ((queued, "cancelled"), (broken, "retry")):
        [payload] = events(api, run_id, kind)
        assert payload["principal"] == "api-token" and payload["authority"] == "operator"
        assert payload["auth"] == {"method": "api", "roles": []}
