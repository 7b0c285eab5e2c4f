"""``airlock.client`` against a real ``airlock api`` and a real worker (issue 45): an
idempotent create, a stream that survives a dropped connection, decisions signed by an
approval client and sent with an OIDC subject's token, a real notification verified."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from airlock.client import (
    ApprovalClient,
    AsyncClient,
    Client,
    ConflictError,
    Event,
    InvalidSignatureError,
    RunStatus,
    UnauthorizedError,
    verify_notification,
)
from airlock.workers.testing import SECRET, TOKEN, wait_for
from tests.api.conftest import OLD_SECRET
from tests.integration.conftest import StackFactory
from tests.integration.proxy import CuttingProxy
from tests.issuer import AUDIENCE, Issuer

pytestmark = pytest.mark.integration

NOTIFY_SECRET = OLD_SECRET


class Receiver(ThreadingHTTPServer):
    """Keeps each notification as it came: its headers and its body, unverified."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Keep)
        self.received: list[tuple[dict[str, str], bytes]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/hook"


class _Keep(BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["content-length"]))
        self.server.received.append((dict(self.headers), body))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        del args


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def issuer() -> Iterator[Issuer]:
    with Issuer() as issuer:
        yield issuer


@pytest.fixture
def base(
    make_stack: StackFactory,
    postgres_url: str,
    shared_redis: str,
    receiver: Receiver,
    issuer: Issuer,
) -> str:
    stack = make_stack(
        AIRLOCK_DATABASE_URL=postgres_url,
        AIRLOCK_BROKER_URL=shared_redis,
        AIRLOCK_WEBHOOK_SECRET=SECRET,
        AIRLOCK_API_TOKEN=TOKEN,
        AIRLOCK_NOTIFY_URL=receiver.url,
        AIRLOCK_NOTIFY_SECRET=NOTIFY_SECRET,
    )
    url = stack.api(AIRLOCK_OIDC_ISSUER=issuer.url, AIRLOCK_OIDC_AUDIENCE=AUDIENCE)
    stack.worker(airlock=True)  # it delivers the notifications too
    return url


def test_the_client_drives_runs_through_a_real_api_and_worker(
    base: str, receiver: Receiver, issuer: Issuer
) -> None:
    signer = ApprovalClient("default", SECRET, approver="ann")
    with Client(base, TOKEN, approval_client=signer) as airlock:
        first = airlock.create_run("w1", "mail 42", idempotency_key="order-42", metadata={"n": 1})
        again = airlock.create_run("w1", "mail 42", idempotency_key="order-42", metadata={"n": 1})
        assert again.id == first.id and again.metadata == {"n": 1}
        with pytest.raises(ConflictError) as mismatch:
            airlock.create_run("w1", "mail 43", idempotency_key="order-42")
        assert mismatch.value.status == 409
        assert mismatch.value.problem["type"] == "/problems/idempotency-mismatch"

        waiting = airlock.wait(first.id, timeout=60)  # on the stream, not polled
        assert waiting.status is RunStatus.WAITING_FOR_APPROVAL and waiting.pending is not None
        assert [c.name for c in waiting.pending.calls] == ["send_email"]
        decided = airlock.approve(first.id, waiting.pending.turn_digest or "")
        assert decided.result == "recorded" and decided.approver == "ann"
        done = airlock.wait(first.id, timeout=60)
        assert done.status is RunStatus.COMPLETED and done.output == "done"

        events = airlock.events(first.id)
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        decision = next(e for e in events if e.kind == "decision")
        assert decision.payload["approver"] == "ann"
        assert decision.payload["auth"] == {"method": "webhook", "client": "default", "roles": []}
        # a decision again is answered from what is stored
        assert airlock.approve(first.id, waiting.pending.turn_digest or "").result == "duplicate"


def test_a_stream_survives_a_dropped_connection(base: str) -> None:
    port = int(base.rsplit(":", 1)[1])
    proxy = CuttingProxy(port)
    signer = ApprovalClient("default", SECRET)
    try:
        with Client(proxy.url, TOKEN, approval_client=signer) as airlock:
            run = airlock.create_run("w1", "mail 7")
            seen: list[Event] = []
            for event in airlock.stream(run.id):
                seen.append(event)
                if len(seen) == 1:
                    proxy.drop()  # every connection through the proxy is cut
                if event.kind == "suspended":
                    airlock.approve(run.id, str(event.payload["turn_digest"]))
        # every event once, in order, to the last: the stream ended with the run
        assert [e.seq for e in seen] == list(range(1, len(seen) + 1))
        assert seen[-1].kind == "completed"
        with Client(base, TOKEN) as direct:
            assert [e.seq for e in seen] == [e.seq for e in direct.events(run.id)]
        resumed = [r for r in proxy.requests if b"/events/stream" in r]
        assert len(resumed) >= 2, "the stream was not reconnected"
        assert b"last-event-id" not in resumed[0].lower()
        assert b"last-event-id: " in resumed[1].lower()
    finally:
        proxy.close()


def test_decisions_with_an_oidc_subject_s_token(base: str, issuer: Issuer) -> None:
    with Client(base, TOKEN) as airlock:
        run = airlock.create_run("w1", "mail 9")
        digest = airlock.wait(run.id, timeout=60).pending
        assert digest is not None and digest.turn_digest is not None
        # the API token is no principal that decides: refused, with its problem
        with pytest.raises(UnauthorizedError) as refused:
            airlock.approve(run.id, digest.turn_digest)
        assert refused.value.problem["status"] == 401
    with Client(base, issuer.token("paula", ["support"])) as paula:
        decided = paula.deny(run.id, digest.turn_digest, reason="not today")
        assert decided.result == "recorded" and decided.approver == "paula"
        assert paula.wait(run.id, timeout=60).status is RunStatus.COMPLETED


def test_a_real_notification_verifies_and_a_forged_one_does_not(
    base: str, receiver: Receiver
) -> None:
    with Client(base, TOKEN) as airlock:
        run = airlock.create_run("w1", "mail 11")
        airlock.wait(run.id, timeout=60)
    wait_for("the notification", lambda: receiver.received, timeout=30)
    headers, body = receiver.received[0]
    note = verify_notification(NOTIFY_SECRET, headers, body)
    assert note.type == "run.waiting_for_approval"
    assert note.data.id == run.id and note.data.status is RunStatus.WAITING_FOR_APPROVAL
    forged = body.replace(b"waiting_for_approval", b"completed")
    with pytest.raises(InvalidSignatureError):
        verify_notification(NOTIFY_SECRET, headers, forged)
    with pytest.raises(InvalidSignatureError):
        verify_notification(SECRET, headers, body)  # another secret


def test_the_async_client_lists_waits_and_decides(base: str) -> None:
    async def story() -> None:
        signer = ApprovalClient("default", SECRET, approver="bo")
        async with AsyncClient(base, TOKEN, approval_client=signer) as airlock:
            runs = [await airlock.create_run("w1", f"mail {n}") for n in range(3)]
            listed = [r.id async for r in airlock.list_runs(agent="w1", page_size=1)]
            assert set(listed) >= {r.id for r in runs}  # followed the cursor page by page
            waiting = await airlock.wait(runs[0].id, timeout=60)
            assert waiting.pending is not None and waiting.pending.turn_digest is not None
            call = waiting.pending.calls[0].id
            decided = await airlock.decide(
                runs[0].id, waiting.pending.turn_digest, {call: {"decision": "approve"}}
            )
            assert decided.result == "recorded"
            assert (await airlock.wait(runs[0].id, timeout=60)).output == "done"
            cancelled = await airlock.cancel(runs[1].id)
            assert cancelled.status is RunStatus.CANCELLED
            with pytest.raises(ConflictError):
                await airlock.cancel(runs[1].id)
            with pytest.raises(ConflictError):
                await airlock.retry(runs[2].id)  # only a failed run is retried
            events = [e async for e in airlock.stream(runs[0].id)]
            assert events[-1].kind == "completed"

    asyncio.run(story())
