"""``POST /v1/runs`` with an idempotency key (issue 26, defect 7), on both databases:
keys are the caller's own, and a key reused for another request is 409
``/problems/idempotency-mismatch``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.api.conftest import Api, make_api
from tests.api.test_principals import problem
from tests.issuer import Issuer


@pytest.fixture
def api(db_url: str, issuer: Issuer) -> Iterator[Api]:
    api = make_api(db_url, **issuer.settings())
    yield api
    api.service.store.engine.dispose()


def create(api: Api, headers: dict[str, str], **body: Any) -> Any:
    return api.client.post("/v1/runs", json=body, headers=headers)


def test_another_callers_key_makes_another_run(api: Api, issuer: Issuer) -> None:
    alice = issuer.bearer("alice")
    first = create(api, alice, agent="w1", input="refund 17", idempotency_key="ticket-991")
    assert first.status_code == 201, first.text
    backend = create(
        api,
        api.headers(),
        agent="payments",
        input="pay INV-7",
        requested_by="carol",
        idempotency_key="ticket-991",
    )
    assert backend.status_code == 201, backend.text
    assert backend.json()["id"] != first.json()["id"] and backend.json()["agent"] == "payments"
    assert api.service.get_run(backend.json()["id"]).requested_by == "carol"
    bob = create(api, issuer.bearer("bob"), agent="w1", input="x", idempotency_key="ticket-991")
    assert bob.status_code == 201 and bob.json()["id"] != first.json()["id"]
    again = create(api, alice, agent="w1", input="refund 17", idempotency_key="ticket-991")
    assert again.status_code == 200 and again.json()["id"] == first.json()["id"]
    assert len(api.enqueued) == 3


def test_a_key_reused_for_another_request_is_409(api: Api, issuer: Issuer) -> None:
    body = {"agent": "w1", "input": "refund 17", "idempotency_key": "k", "requested_by": "carol"}
    first = create(api, api.headers(), **body)
    assert first.status_code == 201
    for change in ({"input": "refund 18"}, {"requested_by": "dave"}, {"metadata": {"a": 1}}):
        refused = problem(create(api, api.headers(), **(body | change)), 409, first.json()["id"])
        assert refused["type"] == "/problems/idempotency-mismatch"
    assert len(api.enqueued) == 1
    assert create(api, api.headers(), **body).json()["id"] == first.json()["id"]
