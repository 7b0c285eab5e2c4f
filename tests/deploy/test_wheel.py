"""The wheel, installed in a fresh virtualenv, runs Airlock from an empty folder with
nothing but environment variables (issue 27): migrations, API, worker and beat on
PostgreSQL and Redis; a run completes, an approval expires by beat, a notification
is delivered."""

from __future__ import annotations

import json
import threading
import zipfile
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from airlock.workers.testing import free_port
from tests.conftest import ROOT
from tests.deploy.conftest import Processes, bare_env, run, wait_for

pytestmark = pytest.mark.deploy

TOKEN = "deploy-test-token-0123456789"
WEBHOOK_SECRET = "whsec_ZGVwbG95LXRlc3Qtd2ViaG9vay1zZWNyZXQtMzI="
NOTIFY_SECRET = "whsec_ZGVwbG95LXRlc3Qtbm90aWZ5LXNlY3JldC0zMg=="

AGENTS = '''
"""Agents of the deploy test: a module in the folder the commands run from."""
from datetime import timedelta

from airlock.loop import Agent, Effect, ExpiryAction, ScriptedModel, tool


@tool
def lookup(q: str) -> str:
    """Look something up."""
    return f"found {q}"


@tool(effect=Effect.WRITE)
def send(to: str) -> str:
    """Send a message: needs a person's approval."""
    return f"sent to {to}"


AGENTS = [
    Agent(
        name="quick",
        instructions="Look it up.",
        tools=[lookup],
        model=ScriptedModel(
            [{"tool_calls": [{"name": "lookup", "arguments": {"q": "42"}}]}, {"content": "42"}]
        ),
    ),
    Agent(
        name="gated",
        instructions="Send it.",
        tools=[send],
        approval_ttl=timedelta(seconds=1),
        on_expiry=ExpiryAction.CANCEL,
        model=ScriptedModel(
            [{"tool_calls": [{"name": "send", "arguments": {"to": "a"}}]}, {"content": "sent"}]
        ),
    ),
]
'''


def test_the_wheel_carries_the_migrations(wheel: Path) -> None:
    """Issue 27, defect 3: installed from the wheel, `airlock db upgrade` found no
    migrations. They live in the repository's alembic/ and ship as airlock/migrations."""
    shipped = ROOT / "alembic"
    expected = {
        f"airlock/migrations/{p.relative_to(shipped).as_posix()}"
        for p in shipped.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    assert expected - names == set()
    assert any(n.startswith("airlock/migrations/versions/") for n in expected)
    assert "airlock/migrations/script.py.mako" in names


def test_the_wheel_installs_one_package_airlock_and_nothing_else(wheel: Path) -> None:
    """Issue 47: no loop/, workers/, providers/ or persistence/ at the top of a user's
    site-packages, where a backend's own package of that name would shadow it or be
    shadowed. What an agent author needs is ``import airlock``'s."""
    with zipfile.ZipFile(wheel) as archive:
        tops = {name.split("/")[0] for name in archive.namelist()}
    (dist_info,) = {t for t in tops if t.endswith(".dist-info")}
    assert tops == {"airlock", dist_info}
    with zipfile.ZipFile(wheel) as archive:
        top_level = archive.read(f"{dist_info}/top_level.txt").decode().split()
    assert top_level == ["airlock"]


class Receiver:
    """A local HTTP endpoint that records the notifications POSTed to it."""

    def __init__(self) -> None:
        self.received: list[tuple[dict[str, str], dict[str, Any]]] = []
        received = self.received

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                received.append((dict(self.headers.items()), json.loads(body)))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def types(self, run_id: str) -> list[str]:
        return [body["type"] for _, body in self.received if body["data"]["id"] == run_id]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    receiver = Receiver()
    receiver.thread.start()
    yield receiver
    receiver.server.shutdown()
    receiver.server.server_close()


def test_the_installed_wheel_runs_from_an_empty_folder(  # noqa: PLR0917 - fixtures
    installed: Path,
    database: str,
    broker: str,
    receiver: Receiver,
    processes: Processes,
    tmp_path: Path,
) -> None:
    folder = tmp_path / "empty"
    folder.mkdir()
    (folder / "deployagents.py").write_text(AGENTS)
    port = free_port()
    env = bare_env(
        installed,
        tmp_path / "user",
        AIRLOCK_DATABASE_URL=database,
        AIRLOCK_BROKER_URL=broker,
        AIRLOCK_AGENTS="deployagents:AGENTS",
        AIRLOCK_API_TOKEN=TOKEN,
        AIRLOCK_WEBHOOK_SECRET=WEBHOOK_SECRET,
        AIRLOCK_NOTIFY_URL=receiver.url,
        AIRLOCK_NOTIFY_SECRET=NOTIFY_SECRET,
        AIRLOCK_API_PORT=str(port),
        AIRLOCK_SWEEP_INTERVAL="1",
        AIRLOCK_SOFT_SHUTDOWN_TIMEOUT="0",
        # remove once the CWD rule (issue 27 defect 6) lands
        PYTHONPATH=str(folder),
    )
    assert "upgraded" in run(["airlock", "db", "upgrade"], env, folder)
    processes.start("api", ["airlock", "api"], env, folder)
    processes.start("worker", ["airlock", "worker", "-l", "info"], env, folder)
    processes.start("beat", ["airlock", "beat", "-l", "info"], env, folder)
    api = httpx.Client(
        base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {TOKEN}"}
    )

    def ready() -> bool:
        try:
            return api.get("/readyz").status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_for("the API to be ready", ready, timeout=60)
        quick = api.post("/v1/runs", json={"agent": "quick", "input": "what is 42?"}).json()
        gated = api.post("/v1/runs", json={"agent": "gated", "input": "send it"}).json()

        def status(run_id: str, expected: str) -> bool:
            return bool(api.get(f"/v1/runs/{run_id}").json()["status"] == expected)

        wait_for("a run to complete", lambda: status(quick["id"], "completed"), timeout=60)
        # beat's expiry job cancels the run whose approval waited past its second
        wait_for("the approval to expire", lambda: status(gated["id"], "cancelled"), timeout=60)
        kinds = [e["kind"] for e in api.get(f"/v1/runs/{gated['id']}/events").json()["events"]]
        assert "expired" in kinds
        wait_for(
            "the notifications",
            lambda: receiver.types(gated["id"]) == ["run.waiting_for_approval", "run.cancelled"],
            timeout=60,
        )
        headers = next(h for h, body in receiver.received if body["data"]["id"] == gated["id"])
        assert {"webhook-id", "webhook-signature"} <= {k.lower() for k in headers}
        assert api.get("/readyz").json()["sweeper"]["state"] == "ok"
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{processes.logs_of()}") from exc
    finally:
        api.close()
    # nothing but beat's home (AIRLOCK_HOME's default) was left in the folder
    assert {p.name for p in folder.iterdir()} <= {".airlock", "deployagents.py", "__pycache__"}
