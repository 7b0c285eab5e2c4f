"""The live streams (``GET /v1/runs/{id}/events/stream``, ``GET /v1/approvals/stream``
and the inbox's), on both databases: what they replay and follow, how they resume
from ``Last-Event-ID`` or ``?after=`` without losing or repeating an event, and
every refusal (401, 404, 410, 422) as ``application/problem+json``, changing
nothing. (A real worker and a real API process: tests/integration/test_streams.py.)"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from airlock.workers.testing import TOKEN, wait_for
from tests.api.conftest import Api, make_api
from tests.issuer import Issuer, new_key
from tests.sse import Frame, frames, parse

BEARER = {"Authorization": f"Bearer {TOKEN}"}
PROBLEM = "application/problem+json"


def stream_path(run_id: str) -> str:
    return f"/v1/runs/{run_id}/events/stream"


def events_of(api: Api, run_id: str) -> list[dict[str, Any]]:
    got = api.client.get(f"/v1/runs/{run_id}/events", headers=BEARER)
    assert got.status_code == 200, got.text
    events: list[dict[str, Any]] = got.json()["events"]
    return events


def completed(api: Api) -> str:
    """A run that waited, was approved and completed."""
    view = api.waiting()
    decision = {"turn_digest": view["pending"]["turn_digest"], "decision": "approve"}
    assert api.approve(view["id"], decision).status_code == 202
    api.segment(view["id"])
    assert api.run(view["id"])["status"] == "completed"
    return str(view["id"])


def messages(found: list[Frame]) -> list[Frame]:
    return [f for f in found if f.event == "message"]


def test_a_finished_run_is_replayed_as_its_events_then_ends(api: Api) -> None:
    run_id = completed(api)
    got = api.client.get(stream_path(run_id), headers=BEARER)
    assert got.status_code == 200, got.text
    assert got.headers["content-type"].startswith("text/event-stream")
    assert got.headers["cache-control"] == "no-store"
    found = parse(got.text)
    events = events_of(api, run_id)
    assert [f.data for f in messages(found)] == events
    assert [f.id for f in messages(found)] == [str(e["seq"]) for e in events]
    assert events[-1]["kind"] == "completed"
    assert found[-1] == Frame("end", None, {"status": "completed", "last_seq": events[-1]["seq"]})
    assert got.text.startswith("retry: ")


@pytest.mark.parametrize("how", ["header", "query", "both"])
def test_a_stream_resumes_after_its_cursor(api: Api, how: str) -> None:
    run_id = completed(api)
    events = events_of(api, run_id)
    cut = events[2]["seq"]
    headers, path = dict(BEARER), stream_path(run_id)
    if how in ("header", "both"):
        headers["Last-Event-ID"] = str(cut)
    if how == "query":
        path += f"?after={cut}"
    if how == "both":  # an EventSource reconnects to its URL, with the header: it wins
        path += "?after=1"
    found = parse(api.client.get(path, headers=headers).text)
    assert [f.data for f in messages(found)] == events[3:]
    assert found[-1].event == "end"
    blank = api.client.get(
        stream_path(run_id) + "?after=", headers={**BEARER, "Last-Event-ID": " "}
    )
    assert [f.data for f in messages(parse(blank.text))] == events  # blank: from the start
    at_end = api.client.get(
        stream_path(run_id), headers={**BEARER, "Last-Event-ID": str(events[-1]["seq"])}
    )
    assert [f.event for f in parse(at_end.text)] == ["end"]


def until(reader: Iterator[Frame], kind: str) -> list[Frame]:
    """Frames read up to the event of ``kind``, that one included."""
    seen = []
    for frame in reader:
        seen.append(frame)
        if frame.data.get("kind") == kind:
            return seen
    raise AssertionError(f"the stream ended before a {kind} event: {seen}")


def test_a_live_stream_disconnected_and_resumed_gets_every_event_once(api: Api) -> None:
    view = api.waiting()
    run_id = view["id"]
    hubs = api.client.app.state.hubs  # type: ignore[attr-defined]
    with api.client.stream("GET", stream_path(run_id), headers=BEARER) as live:
        assert live.status_code == 200
        reader = frames(live.iter_lines())  # one reader: a closed one closes the response
        seen = until(reader, "suspended")
        wait_for("the stream to follow the run", lambda: hubs.watching == 1)
        decision = {"turn_digest": view["pending"]["turn_digest"], "decision": "approve"}
        assert api.approve(run_id, decision).status_code == 202
        seen += until(reader, "decision")  # then the client goes away mid-run
    wait_for("the watch to leave the hub", lambda: hubs.watching == 0)
    api.segment(run_id)  # the run completes while nobody listens
    last = seen[-1].id
    assert last is not None
    again = api.client.get(stream_path(run_id), headers={**BEARER, "Last-Event-ID": last})
    resumed = parse(again.text)
    events = events_of(api, run_id)
    assert [f.data for f in messages(seen + resumed)] == events
    assert events[-1]["kind"] == "completed" and resumed[-1].event == "end"


def test_a_stream_follows_the_run_live_to_its_end(api: Api) -> None:
    view = api.waiting()
    run_id = view["id"]
    hubs = api.client.app.state.hubs  # type: ignore[attr-defined]
    with api.client.stream("GET", stream_path(run_id), headers=BEARER) as live:
        reader = frames(live.iter_lines())
        seen = until(reader, "suspended")
        wait_for("the stream to follow the run", lambda: hubs.watching == 1)
        assert "airlock_streams_open 1.0" in api.client.get("/metrics").text
        decision = {"turn_digest": view["pending"]["turn_digest"], "decision": "approve"}
        assert api.approve(run_id, decision).status_code == 202
        api.segment(run_id)
        seen += list(reader)  # to its end: the stream closes itself
    assert [f.data for f in messages(seen)] == events_of(api, run_id)
    assert seen[-1].event == "end" and seen[-1].data["status"] == "completed"
    wait_for("the watch to leave the hub", lambda: hubs.watching == 0)
    assert "airlock_streams_open 0.0" in api.client.get("/metrics").text


def refusal(got: Any, status: int, *words: str) -> None:
    assert got.status_code == status, got.text
    assert got.headers["content-type"] == PROBLEM
    assert got.json()["status"] == status
    for word in words:
        assert word in got.json()["detail"]


@pytest.mark.parametrize(
    "headers", [{}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic eA=="}]
)
def test_a_stream_needs_the_credentials_a_run_read_needs(api: Api, headers: dict[str, str]) -> None:
    run_id = completed(api)
    for path in (stream_path(run_id), "/v1/approvals/stream"):
        got = api.client.get(path, headers=headers)
        refusal(got, 401)
        assert got.json() == api.client.get(f"/v1/runs/{run_id}", headers=headers).json()


def test_an_unknown_run_is_404_and_a_purged_one_410(api: Api) -> None:
    for unknown in ("0b4f0d5e-5d1c-4ad4-8d6a-2f5f1d1c9a11", "not-a-run"):
        refusal(api.client.get(stream_path(unknown), headers=BEARER), 404)
    run_id = completed(api)
    assert api.service.purge(timedelta(0)) >= 1
    refusal(
        api.client.get(stream_path(run_id), headers={**BEARER, "Last-Event-ID": "3"}),
        410,
        "no longer kept",
    )
    refusal(api.client.get(stream_path(run_id) + "?after=1", headers=BEARER), 410)
    refusal(api.client.get(stream_path(run_id), headers=BEARER), 404)


@pytest.mark.parametrize(
    ("header", "query", "words"),
    [
        ("abc", None, ("Last-Event-ID", "'abc'")),
        ("-1", None, ("Last-Event-ID",)),
        ("1.5", None, ("Last-Event-ID",)),
        ("99999999999", None, ("Last-Event-ID",)),
        ("2147483648", None, ("Last-Event-ID",)),
        (None, "%D9%A3", ("after",)),  # an Arabic-Indic digit: isdigit, not ASCII
        (None, "x", ("after",)),
        (None, "-2", ("after",)),
        ("999", None, ("has no event 999",)),
    ],
)
def test_a_bad_cursor_is_422(
    api: Api, header: str | None, query: str | None, words: tuple[str, ...]
) -> None:
    run_id = completed(api)
    before = events_of(api, run_id)
    headers = dict(BEARER) | ({"Last-Event-ID": header} if header is not None else {})
    path = stream_path(run_id) + (f"?after={query}" if query is not None else "")
    refusal(api.client.get(path, headers=headers), 422, *words)
    assert events_of(api, run_id) == before


def test_the_queue_stream_says_when_the_waiting_queue_changes(api: Api) -> None:
    first = api.waiting()
    with api.client.stream("GET", "/v1/approvals/stream", headers=BEARER) as live:
        assert live.status_code == 200
        reader = frames(live.iter_lines())
        mark = next(reader)
        assert mark.event == "queue" and mark.data["waiting"] == 1 and mark.id is None
        api.waiting()
        assert next(reader).data["waiting"] == 2
        decision = {"turn_digest": first["pending"]["turn_digest"], "decision": "approve"}
        assert api.approve(first["id"], decision).status_code == 202
        assert next(reader).data["waiting"] == 1


def test_the_inbox_streams_need_a_sign_in(api: Api) -> None:
    run_id = completed(api)
    for path in ("/inbox/stream", f"/inbox/runs/{run_id}/stream"):
        refusal(api.client.get(path), 401, "sign in")
        refusal(api.client.get(path, headers=BEARER), 401)  # a bearer token is not a sign-in
    answer = api.client.post(
        "/inbox/login", data={"token": TOKEN, "name": "ann"}, follow_redirects=False
    )
    assert answer.status_code == 303
    found = parse(api.client.get(f"/inbox/runs/{run_id}/stream?after=2").text)
    assert [f.data for f in messages(found)] == events_of(api, run_id)[2:]
    with api.client.stream("GET", "/inbox/stream") as live:
        assert next(frames(live.iter_lines())).data["waiting"] == 0


def test_the_inbox_streams_end_when_their_sign_in_does(api: Api) -> None:
    """A stream opened under a sign-in ends at the first heartbeat after a sign-out (its
    page's reconnect is then refused), as the inbox's pages do."""
    hubs: Any = api.client.app.state.hubs  # type: ignore[attr-defined]
    hubs.heartbeat = 0.05
    run_id = api.waiting()["id"]
    for path in ("/inbox/stream", f"/inbox/runs/{run_id}/stream"):
        answer = api.client.post(
            "/inbox/login", data={"token": TOKEN, "name": "ann"}, follow_redirects=False
        )
        assert answer.status_code == 303
        token = re.search(r'name="csrf" value="([^"]+)"', api.client.get("/inbox").text)
        assert token is not None
        with api.client.stream("GET", path) as live:
            reader = frames(live.iter_lines())
            assert next(reader) is not None  # the queue's mark, or the run's first event
            out = api.client.post("/inbox/logout", data={"csrf": token.group(1)})
            assert out.status_code in (200, 303)
            rest = list(reader)  # ends: the sign-in is gone
            assert all(f.event != "end" for f in rest)
        refusal(api.client.get(path), 401, "sign in")


def test_a_caller_holds_a_bounded_number_of_streams(api: Api) -> None:
    """Each open stream holds a watch and a connection: a caller past the limit is
    refused (429) until one of theirs ends; another caller is not."""
    slots: Any = api.client.app.state.stream_slots  # type: ignore[attr-defined]
    slots.limit = 2
    with (
        api.client.stream("GET", "/v1/approvals/stream", headers=BEARER) as one,
        api.client.stream("GET", "/v1/approvals/stream", headers=BEARER) as two,
    ):
        assert (one.status_code, two.status_code) == (200, 200)
        refusal(api.client.get("/v1/approvals/stream", headers=BEARER), 429, "open streams")
        answer = api.client.post(
            "/inbox/login", data={"token": TOKEN, "name": "ann"}, follow_redirects=False
        )
        assert answer.status_code == 303  # another caller: its own streams
        with api.client.stream("GET", "/inbox/stream") as inbox:
            assert inbox.status_code == 200
    wait_for("the slots given back", lambda: not slots._held or None, timeout=10)
    with api.client.stream("GET", "/v1/approvals/stream", headers=BEARER) as again:
        assert again.status_code == 200


def test_a_stream_is_authorised_as_a_run_read_with_oidc_tokens(db_url: str, issuer: Issuer) -> None:
    """The same gate as every run endpoint: a token that reads the run reads its stream,
    one refused there is refused here (the same status and problem)."""
    api = make_api(db_url, **issuer.settings())
    try:
        run_id = completed(api)
        callers = {
            "valid": issuer.bearer("olga", ["operator"]),
            "expired": {"Authorization": f"Bearer {issuer.token('olga', lifetime=-600)}"},
            "another audience": issuer.bearer("olga", aud="someone-else"),
            "forged": {"Authorization": f"Bearer {issuer.token('olga', key=new_key())}"},
        }
        for name, headers in callers.items():
            read = api.client.get(f"/v1/runs/{run_id}", headers=headers)
            streamed = api.client.get(stream_path(run_id), headers=headers)
            assert streamed.status_code == read.status_code, name
            if name == "valid":
                assert read.status_code == 200 and parse(streamed.text)[-1].event == "end"
            else:
                refusal(streamed, 401)
                assert streamed.json() == read.json(), name
    finally:
        api.service.store.engine.dispose()


def test_a_stream_opened_with_a_token_ends_when_the_token_does(db_url: str, issuer: Issuer) -> None:
    """A stream is read as a run is, with the token's authority, and no longer: a caller
    whose token expires (past the leeway a request is allowed) is refused a run read,
    and its open streams end at their next heartbeat (a reconnect is refused, 401), as
    the inbox's end with its sign-in."""
    api = make_api(db_url, oidc_leeway=0, **issuer.settings())
    try:
        hubs: Any = api.client.app.state.hubs  # type: ignore[attr-defined]
        hubs.heartbeat = 0.05
        run_id = api.waiting()["id"]
        for path in ("/v1/approvals/stream", stream_path(run_id)):
            headers = {"Authorization": f"Bearer {issuer.token('olga', lifetime=2)}"}
            with api.client.stream("GET", path, headers=headers) as live:
                assert live.status_code == 200
                reader = frames(_within(live.iter_lines(), seconds=20))
                assert next(reader) is not None  # the queue's mark, or the run's first event
                rest = list(reader)  # ends: the token expired
                assert all(f.event != "end" for f in rest)
            refusal(api.client.get(path, headers=headers), 401, "expired")
    finally:
        api.service.store.engine.dispose()


def _within(lines: Iterator[str], *, seconds: float) -> Iterator[str]:
    """``lines`` (a heartbeat comes every few hundredths of a second), failing the test
    once ``seconds`` passed without their end."""
    deadline = time.monotonic() + seconds
    for line in lines:
        assert time.monotonic() < deadline, "the stream outlived its token"
        yield line


def test_openapi_documents_the_streams(api: Api) -> None:
    paths = api.client.get("/openapi.json").json()["paths"]
    for path in ("/v1/runs/{run_id}/events/stream", "/v1/approvals/stream"):
        operation = paths[path]["get"]
        assert "text/event-stream" in operation["responses"]["200"]["content"], path
        assert operation["security"] == [{"bearer": []}], path
