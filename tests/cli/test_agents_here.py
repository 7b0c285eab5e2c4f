"""Agents' modules load by one rule in every command (issue 27, defect 6): the current
folder first, then the Python path, as ``python -m``, ``celery`` and ``uvicorn`` do; and
a module that cannot be loaded is named, with where it was looked for and how to make it
found. Run with the installed console script (the venv's ``bin/airlock``) from a folder
that holds ``myagents.py``, with no ``PYTHONPATH``."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import httpx
import pytest

from airlock.persistence.db import make_engine
from airlock.persistence.domain import RunStatus
from airlock.persistence.store import RunStore
from airlock.workers.testing import Process, free_port, wait_for
from tests.docs.readme import working_in

ROOT = Path(__file__).resolve().parents[2]
AIRLOCK = str(Path(sys.executable).with_name("airlock"))
TOKEN = "agents-here-token-0123"
SECRET = "whsec_" + base64.b64encode(b"agents-here-secret-0123456789abc").decode()

MYAGENTS = '''
from airlock.loop import Agent, Effect, ScriptedModel, tool


@tool(effect=Effect.WRITE)
def save_note(text: str) -> str:
    """Save a note."""
    return f"saved {text}"


NOTES = Agent(
    name="notes",
    instructions="You save notes.",
    tools=[save_note],
    model=ScriptedModel(
        [{"tool_calls": [{"name": "save_note", "arguments": {"text": "hi"}}]}, {"content": "done"}]
    ),
)
AGENTS = [NOTES]
'''


@pytest.fixture
def here(tmp_path: Path) -> Path:
    """A folder holding ``myagents.py``, nothing else."""
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "myagents.py").write_text(MYAGENTS)
    return folder


def environment(folder: Path, agents: str = "myagents:AGENTS") -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("AIRLOCK_") and k != "PYTHONPATH"
    }
    return env | {
        "AIRLOCK_DATABASE_URL": f"sqlite:///{folder / 'airlock.db'}",
        "AIRLOCK_HOME": str(folder / ".airlock"),
        "AIRLOCK_AGENTS": agents,
        "AIRLOCK_API_TOKEN": TOKEN,
        "AIRLOCK_WEBHOOK_SECRET": SECRET,
        "AIRLOCK_SOFT_SHUTDOWN_TIMEOUT": "0",
        "COLUMNS": "200",
    }


def airlock(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [AIRLOCK, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False
    )


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, (result.args, result.stdout, result.stderr)
    return result.stdout


def status_of(folder: Path, run_id: str, wanted: RunStatus) -> bool:
    engine = make_engine(f"sqlite:///{folder / 'airlock.db'}")
    try:
        return RunStore(engine).runs.require(run_id).status is wanted
    finally:
        engine.dispose()


@pytest.fixture
def processes() -> Iterator[list[Process]]:
    started: list[Process] = []
    yield started
    for process in started:
        process.stop()


def test_the_cli_and_a_worker_load_agents_from_the_current_folder(
    here: Path, processes: list[Process]
) -> None:
    env = environment(here)
    ok(airlock("db", "upgrade", cwd=here, env=env))
    run_id = json.loads(ok(airlock("run", "notes", "save hi", "--json", cwd=here, env=env)))["id"]
    worker = Process("worker", [AIRLOCK, "worker", "-c", "1"], env, here / "worker.log", cwd=here)
    processes.append(worker.start())
    wait_for("the run to wait", lambda: status_of(here, run_id, RunStatus.WAITING_FOR_APPROVAL))
    assert "save_note" in ok(airlock("runs", "show", run_id, cwd=here, env=env))
    ok(airlock("approve", run_id, cwd=here, env=env))
    wait_for("the run to complete", lambda: status_of(here, run_id, RunStatus.COMPLETED))


def test_the_api_loads_agents_from_the_current_folder(here: Path, processes: list[Process]) -> None:
    env = environment(here)
    ok(airlock("db", "upgrade", cwd=here, env=env))
    port = free_port()
    api = Process("api", [AIRLOCK, "api", "--port", str(port)], env, here / "api.log", cwd=here)
    processes.append(api.start())
    base = f"http://127.0.0.1:{port}"
    wait_for("the API", lambda: _answers(base), timeout=30)
    created = httpx.post(
        f"{base}/v1/runs",
        json={"agent": "notes", "input": "save hi"},
        headers={"authorization": f"Bearer {TOKEN}"},
    )
    assert created.status_code == 201, created.text


@contextmanager
def airlock_dev(folder: Path, port: int) -> Iterator[subprocess.Popen[bytes]]:
    """``airlock dev`` in ``folder``; whatever is left of it afterwards (its worker and
    beat run in sessions of their own) is killed."""
    with (folder / "dev.log").open("wb") as out:
        dev = subprocess.Popen(
            [AIRLOCK, "dev", "--port", str(port)],
            cwd=folder, env=environment(folder), stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        wait_for("airlock dev", lambda: _answers(f"http://127.0.0.1:{port}"), timeout=60)
        yield dev
    finally:
        for pid in [dev.pid, *working_in(folder)]:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        dev.wait(10)


def test_dev_loads_agents_from_the_current_folder(here: Path) -> None:
    port = free_port()
    base, auth = f"http://127.0.0.1:{port}", {"authorization": f"Bearer {TOKEN}"}
    with airlock_dev(here, port):
        body = {"agent": "notes", "input": "hi"}
        created = httpx.post(f"{base}/v1/runs", json=body, headers=auth)
        assert created.status_code == 201, created.text

        def waiting() -> bool:
            view = httpx.get(f"{base}/v1/runs/{created.json()['id']}", headers=auth).json()
            return bool(view["status"] == "waiting_for_approval")

        wait_for("the run to wait, in dev's worker", waiting, timeout=60)


def test_dev_stopped_by_sigterm_stops_its_worker_and_beat(here: Path) -> None:
    """``kill %1`` (what the README's tutorial says stops it) leaves nothing running."""
    with airlock_dev(here, free_port()) as dev:
        wait_for("dev's worker and beat", lambda: len(working_in(here)) >= 3, timeout=30)
        worker_log = here / ".airlock" / "worker.log"
        wait_for("dev's worker to be ready", lambda: " ready." in worker_log.read_text())
        dev.send_signal(signal.SIGTERM)
        dev.wait(60)
        wait_for("nothing of dev to run", lambda: working_in(here) == [], timeout=30)
    # the worker stopped its pool itself: none of its processes was killed under it
    logs = "".join(log.read_text() for log in (here / ".airlock").glob("*.log"))
    assert "worker: Warm shutdown" in logs
    assert "ERROR" not in logs, logs[-3000:]


def _answers(base: str) -> bool:
    try:
        return httpx.get(f"{base}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def test_the_readme_example_loads_from_the_repository_root(tmp_path: Path) -> None:
    env = environment(tmp_path, agents="examples.support:AGENTS")
    ok(airlock("db", "upgrade", cwd=ROOT, env=env))
    out = ok(airlock("run", "support", "Refund order 17", "--json", cwd=ROOT, env=env))
    assert json.loads(out)["agent"] == "support"


@pytest.mark.parametrize("command", [["run", "notes", "hi"], ["runs", "list"], ["api"]])
def test_a_module_not_found_is_named_with_where_it_was_looked_for(
    here: Path, command: list[str]
) -> None:
    env = environment(here, agents="mynotes:AGENTS")
    ok(airlock("db", "upgrade", cwd=here, env=environment(here)))
    port = ["--port", str(free_port())] if command == ["api"] else []
    result = airlock(*command, *port, cwd=here, env=env)
    assert result.returncode == 2, (result.stdout, result.stderr)
    error = result.stderr.strip()
    assert len(error.splitlines()) == 1, error
    assert "no module 'mynotes' (mynotes.py)" in error
    assert str(here) in error  # where it looked: this folder first
    assert "PYTHONPATH" in error
    assert "module:NAME" in error


def test_a_module_that_fails_to_import_is_named_with_its_line(here: Path) -> None:
    (here / "broken.py").write_text("from airlock import Agent\n\nAGENTS = [payments]\n")
    ok(airlock("db", "upgrade", cwd=here, env=environment(here)))
    result = airlock("run", "x", "y", cwd=here, env=environment(here, agents="broken:AGENTS"))
    assert result.returncode == 2
    assert f"{here / 'broken.py'}:3: NameError: name 'payments' is not defined" in result.stderr


def test_a_missing_name_lists_the_agents_the_module_has(here: Path) -> None:
    ok(airlock("db", "upgrade", cwd=here, env=environment(here)))
    result = airlock("run", "x", "y", cwd=here, env=environment(here, agents="myagents:AGENT"))
    assert result.returncode == 2
    assert "has no 'AGENT' (the agents it has: AGENTS, NOTES)" in result.stderr
