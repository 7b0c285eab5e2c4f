"""Hostile input at the door (issue 13): bodies limited while they stream, authentication
before any body is read, and 4xx instead of 500 for odd headers and cursors."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import text

from airlock.workers.http import issuer_keys
from airlock.workers.testing import TOKEN
from tests.api.conftest import Api, make_api
from tests.api.test_api import problem
from tests.issuer import Issuer


def chunks(total: int, size: int = 64 * 1024) -> Iterator[bytes]:
    """A body sent chunked: no Content-Length to refuse it by."""
    sent = 0
    while sent < total:
        yield b" " * size
        sent += size


def test_a_chunked_body_over_the_limit_is_413_not_read_whole(api: Api) -> None:
    response = api.client.post(
        "/v1/runs",
        content=chunks(3 * 1024 * 1024),
        headers={**api.headers(), "content-type": "application/json"},
    )
    problem(response, 413)


def test_an_unsigned_chunked_approval_is_refused_before_its_body(api: Api) -> None:
    run = api.create()
    response = api.client.post(
        f"/v1/runs/{run['id']}/approval",
        content=chunks(2 * 1024 * 1024),
        headers={"content-type": "application/json"},
    )
    problem(response, 401)  # not 413: its body was never read


def test_an_unauthenticated_create_is_refused_before_its_body(api: Api) -> None:
    response = api.client.post(
        "/v1/runs", content=chunks(3 * 1024 * 1024), headers={"content-type": "application/json"}
    )
    problem(response, 401)


def test_a_non_ascii_bearer_token_is_401(api: Api) -> None:
    token = f"Bearer {TOKEN}é".encode()
    response = api.client.get("/v1/runs", headers=[(b"authorization", token)])
    problem(response, 401)
    response = api.client.post(
        "/v1/runs", json={"agent": "w1", "input": "x"}, headers=[(b"authorization", token)]
    )
    problem(response, 401)


def test_a_huge_webhook_timestamp_is_401(api: Api) -> None:
    view = api.waiting()
    body = {"turn_digest": view["pending"]["turn_digest"], "decision": "approve"}
    headers = {"webhook-id": "msg_1", "webhook-timestamp": "9" * 5000, "webhook-signature": "v1,x"}
    problem(api.approve(view["id"], body, headers=headers), 401)
    assert api.run(view["id"])["status"] == "waiting_for_approval"


def test_a_cursor_with_a_naive_time_is_422(api: Api) -> None:
    api.create()
    raw = b"2026-01-01T12:00:00|00000000-0000-0000-0000-000000000000"
    cursor = base64.urlsafe_b64encode(raw).decode().rstrip("=")
    problem(api.client.get(f"/v1/runs?cursor={cursor}", headers=api.headers()), 422)


def test_nul_in_an_input_is_stored_losslessly(api: Api) -> None:
    run = api.create(input="mail \x00 42")
    api.segment(run["id"])
    assert api.service.store.runs.require(run["id"]).input == "mail \x00 42"
    assert api.run(run["id"])["status"] == "waiting_for_approval"


def test_a_lone_surrogate_in_metadata_is_422_and_nothing_is_written(api: Api) -> None:
    body = b'{"agent": "w1", "input": "x", "metadata": {"k": "\\ud800"}}'
    response = api.client.post(
        "/v1/runs", content=body, headers={**api.headers(), "content-type": "application/json"}
    )
    problem(response, 422)
    listed = api.client.get("/v1/runs", headers=api.headers())
    assert listed.status_code == 200 and listed.json()["runs"] == []


def test_one_unreadable_checkpoint_breaks_only_its_own_run(api: Api) -> None:
    import uuid

    from sqlalchemy import update

    from airlock.persistence.store.sql import RUNS

    bad, good = api.waiting(), api.waiting()
    with api.service.store.engine.begin() as conn:
        conn.execute(
            update(RUNS)
            .where(RUNS.c.id == uuid.UUID(bad["id"]))
            .values(suspended_state="fernet:gone")
        )
    listed = api.client.get("/v1/runs", headers=api.headers())
    assert listed.status_code == 200, listed.text
    views = {r["id"]: r for r in listed.json()["runs"]}
    assert "cannot be read" in views[bad["id"]]["pending"]["error"]
    assert views[good["id"]]["pending"]["calls"]
    assert "cannot be read" in api.run(bad["id"])["pending"]["error"]


# -- non-finite numbers (issue 26, defect 10) ----------------------------------------------

NON_FINITE = ["NaN", "Infinity", "-Infinity", "1e999"]
"""What Python's json and pydantic's JSON parser read as a float that JSON cannot
write back (1e999 overflows to infinity)."""


@pytest.fixture
def door(db_url: str) -> Iterator[Api]:
    """The app as served."""
    api = make_api(db_url)
    yield api
    api.service.store.engine.dispose()


def stored(api: Api) -> tuple[Any, ...]:
    """Everything a refused body must leave as it was."""
    with api.service.store.engine.connect() as conn:
        counts = tuple(
            conn.execute(text(f"select count(*) from {table}")).scalar_one()
            for table in ("agent_runs", "run_events", "decisions", "approvals", "outbox")
        )
    return (*counts, tuple(api.enqueued))


def post_json(api: Api, path: str, raw: str) -> Any:
    headers = {**api.headers(), "content-type": "application/json"}
    return api.client.post(path, content=raw.encode(), headers=headers)


@pytest.mark.parametrize(
    "body",
    [
        "{n}",
        '{{"agent": "w1", "input": "x", "metadata": {{"n": {n}}}}}',
        '{{"agent": "w1", "input": "x", "metadata": {{"a": {{"b": [1, {{"c": {n}}}]}}}}}}',
    ],
    ids=["top", "metadata", "nested"],
)
def test_a_create_with_a_non_finite_number_is_422_and_stores_nothing(door: Api, body: str) -> None:
    before = stored(door)
    for number in NON_FINITE:
        problem(post_json(door, "/v1/runs", body.format(n=number)), 422)
        assert stored(door) == before, number
    assert door.client.get("/v1/runs", headers=door.headers()).json()["runs"] == []


@pytest.mark.parametrize(
    "calls",
    [
        '{{"call_1_0": {{"decision": "edit", "arguments": '
        '{{"to": "b@x.com", "body": "yo", "seconds": {n}}}}}}}',
        '{{"call_1_0": {{"decision": "deny", "reason": "no", "arguments": {{"x": [{n}]}}}}}}',
        '{{"call_1_0": {{"decision": "approve", "reason": {n}}}}}',
    ],
    ids=["edit", "deny", "reason"],
)
def test_an_approval_with_a_non_finite_number_is_422_and_stores_nothing(
    door: Api, calls: str
) -> None:
    view = door.waiting()
    run_id, digest = view["id"], view["pending"]["turn_digest"]
    before = stored(door)
    for number in NON_FINITE:
        head = f'{{"turn_digest": "{digest}", "decision": "deny", "reason": "r", "calls": '
        raw = head + calls.format(n=number) + "}"
        problem(door.approve(run_id, {}, raw=raw.encode()), 422)
        assert stored(door) == before, number
        events = door.client.get(f"/v1/runs/{run_id}/events", headers=door.headers())
        assert events.status_code == 200, events.text
        assert door.run(run_id)["status"] == "waiting_for_approval"
    # and the turn is still there to decide
    approved = {"turn_digest": digest, "decision": "approve"}
    assert door.approve(run_id, approved).status_code == 202


def test_a_token_of_a_key_the_issuer_dropped_is_refused_from_the_next_refresh(
    db_url: str, issuer: Issuer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 42: a leaked key that the issuer dropped (here, with every other key it had)
    kept verifying tokens, since a key set with no key left was taken for a failed
    fetch. Every lookup refreshes here (no lifespan, no cooldown)."""
    monkeypatch.setattr(issuer_keys, "LIFESPAN", 0.0)
    monkeypatch.setattr(issuer_keys, "COOLDOWN", 0.0)
    api = make_api(db_url, **issuer.settings())
    try:
        leaked = issuer.token("mallory", key=issuer.ec_key, kid=issuer.ec_kid, algorithm="ES256")
        headers = {"Authorization": f"Bearer {leaked}"}
        assert api.client.get("/v1/runs", headers=headers).status_code == 200
        issuer.dropped |= {issuer.kid, issuer.ec_kid}
        refused = problem(api.client.get("/v1/runs", headers=headers), 401)
        assert "no key of the issuer signs this token" in refused["detail"]
    finally:
        api.service.store.engine.dispose()
