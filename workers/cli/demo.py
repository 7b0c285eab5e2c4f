"""``airlock demo`` and ``airlock dev``: real processes on embedded defaults, no server."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from dotenv import dotenv_values
from rich.console import Console
from rich.table import Table
from standardwebhooks import Webhook

from airlock.persistence import migrate as migrations
from airlock.persistence import schema
from airlock.workers.cli.app import built
from airlock.workers.cli.output import without_password
from airlock.workers.service.settings import settings
from airlock.workers.service.views import event_summary


def new_webhook_secret() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def configure(env: dict[str, str]) -> None:
    """Make this process, and the processes it starts, use ``env``."""
    os.environ.update(env)
    settings.cache_clear()
    from airlock.workers.tasks.wiring import service

    service.cache_clear()
    built.cache_clear()


def migrate() -> None:
    migrations.upgrade(settings().database_url)


def celery_process(kind: str, log: Path, *args: str) -> AbstractContextManager[object]:
    return process(
        [sys.executable, "-m", "celery", "-A", "airlock.workers", kind, "-l", "info", *args], log
    )


@contextmanager
def process(argv: list[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    proc = spawn(argv, log)
    try:
        yield proc
    finally:
        stop([proc], grace=20)


def spawn(argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    """``argv`` in a session of its own (Ctrl-C in the terminal reaches only us), its
    output appended to ``log``."""
    with log.open("ab") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def stop(procs: list[subprocess.Popen[bytes]], grace: float) -> None:
    """TERM to each process alone, all at once, as an operator's `kill` or a container
    stop: a Celery worker then stops its pool's processes itself (TERM to the whole group
    killed them under it, and it logged each as an ERROR). KILL to the group of each that
    is still there after ``grace`` seconds, its children too."""
    running = [p for p in procs if p.poll() is None]
    for proc in running:
        proc.terminate()
    deadline = time.monotonic() + grace
    for proc in running:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@contextmanager
def api_server(port: int) -> Iterator[str]:
    # the HTTP door by its name, as `airlock api` serves it: the CLI imports no door
    server = uvicorn.Server(
        uvicorn.Config(
            "airlock.workers.api:default_app",
            factory=True,
            host="127.0.0.1",
            port=port,
            log_level="warning",
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    try:
        poll("the API", lambda: _up(base), 20)
        yield base
    finally:
        server.should_exit = True
        thread.join(10)


def _up(base: str) -> bool:
    try:
        return httpx.get(f"{base}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def poll(what: str, probe: Callable[[], Any], timeout: float, interval: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := probe()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)
    return value


def signed_request(
    path: str, body: dict[str, Any], secret: str
) -> tuple[str, bytes, dict[str, str]]:
    """(path, content, headers) of a webhook signed per Standard Webhooks."""
    data = json.dumps(body)
    webhook_id = f"msg_{uuid.uuid4().hex}"
    now = datetime.now(UTC)
    headers = {
        "content-type": "application/json",
        "webhook-id": webhook_id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": Webhook(secret).sign(webhook_id, now, data),
    }
    return path, data.encode(), headers


def signed_post(base: str, path: str, body: dict[str, Any], secret: str) -> httpx.Response:
    path, content, headers = signed_request(path, body, secret)
    return httpx.post(f"{base}{path}", content=content, headers=headers, timeout=10)


# -- demo -------------------------------------------------------------------------------------


def run_demo(console: Console) -> int:
    with tempfile.TemporaryDirectory(prefix="airlock-demo-") as tmp:
        folder = Path(tmp)
        secret = new_webhook_secret()
        token = secrets.token_urlsafe(16)
        configure(
            {
                "AIRLOCK_DATABASE_URL": f"sqlite:///{folder / 'airlock.db'}",
                "AIRLOCK_BROKER_URL": "filesystem://",
                "AIRLOCK_HOME": str(folder / ".airlock"),
                "AIRLOCK_AGENTS": "airlock.workers.demo_agents:AGENTS",
                "AIRLOCK_WEBHOOK_SECRET": secret,
                "AIRLOCK_API_TOKEN": token,
                "AIRLOCK_SOFT_SHUTDOWN_TIMEOUT": "0",
            }
        )
        console.rule("[bold]Airlock demo[/bold] — embedded: SQLite + a filesystem broker")
        console.print(f"working in {folder}")
        migrate()
        log = folder / "worker.log"
        try:
            with celery_process("worker", log, "-c", "2"), api_server(free_port()) as base:
                _story(console, base, secret, {"Authorization": f"Bearer {token}"})
        except (TimeoutError, AssertionError, httpx.HTTPError) as exc:
            console.print(f"[red]demo failed:[/red] {exc}")
            console.print(log.read_text()[-3000:] if log.exists() else "(no worker log)")
            return 1
    return 0


def _story(console: Console, base: str, secret: str, auth: dict[str, str]) -> None:
    console.print("\n[bold]1.[/bold] A backend enqueues a run of the [cyan]mailer[/cyan] agent")
    created = httpx.post(
        f"{base}/v1/runs",
        json={"agent": "mailer", "input": "Tell customer 42 their refund is on its way"},
        headers=auth,
    )
    assert created.status_code == 201, created.text
    run_id = created.json()["id"]
    console.print(f"   POST /v1/runs → 201, run {run_id}")

    def status(wanted: str) -> dict[str, Any] | None:
        view: dict[str, Any] = httpx.get(f"{base}/v1/runs/{run_id}", headers=auth).json()
        return view if view["status"] == wanted else None

    waiting = poll("the run to wait for approval", lambda: status("waiting_for_approval"), 60)
    console.print(
        "\n[bold]2.[/bold] The worker looked the customer up, then stopped before sending mail."
        f"\n   The run is [yellow]waiting_for_approval[/yellow] after {waiting['iterations']} "
        f"model calls; no worker is busy with it. It waits on:"
    )
    table = Table("call", "tool", "effect", "arguments")
    for call in waiting["pending"]["calls"]:
        table.add_row(call["id"], call["name"], call["effect"], json.dumps(call["arguments"]))
    console.print(table)

    digest = waiting["pending"]["turn_digest"]
    body = {"turn_digest": digest, "decision": "approve", "approver": "demo@airlock"}
    answer = signed_post(base, f"/v1/runs/{run_id}/approval", body, secret)
    assert answer.status_code == 202, answer.text
    console.print(
        f"\n[bold]3.[/bold] A person approves turn {digest[:12]}… by a signed webhook "
        f"(Standard Webhooks) → {answer.status_code}"
    )
    replay = signed_post(base, f"/v1/runs/{run_id}/approval", body, secret)
    console.print(f"   the same approval again → {replay.status_code} (recorded once)")

    done = poll("the run to complete", lambda: status("completed"), 60)
    usage = done["usage"]
    console.print(
        f"\n[bold]4.[/bold] A resume task ran the approved call and finished: "
        f"[green]{done['status']}[/green] (termination: {done['termination']})"
        f"\n   output: {done['output']}"
        f"\n   {done['iterations']} model calls, "
        f"{usage['prompt_tokens']} prompt + {usage['completion_tokens']} completion tokens"
    )
    _audit_stream(console, base, run_id, auth)


def _audit_stream(console: Console, base: str, run_id: str, auth: dict[str, str]) -> None:
    events = httpx.get(f"{base}/v1/runs/{run_id}/events", headers=auth).json()["events"]
    table = Table("seq", "event", "detail", title="the audit stream")
    for e in events:
        table.add_row(str(e["seq"]), e["kind"], event_summary(e["kind"], e["payload"]))
    console.print(table)


# -- dev --------------------------------------------------------------------------------------


DEV_ENV = "dev.env"
"""Where ``airlock dev`` keeps its token and secret, in ``AIRLOCK_HOME``."""
DEV_SECRETS: dict[str, Callable[[], str]] = {
    "AIRLOCK_API_TOKEN": lambda: secrets.token_urlsafe(16),
    "AIRLOCK_WEBHOOK_SECRET": new_webhook_secret,
}


@dataclass(frozen=True)
class DevSecrets:
    values: dict[str, str]
    """What the processes use: each variable's value."""
    origins: dict[str, str]
    """Where each value came from: ``environment``, ``kept`` (the file) or ``new``."""
    file: Path


def dev_secrets(home: Path, environ: Mapping[str, str], *, renew: bool = False) -> DevSecrets:
    """The token and secret of ``airlock dev``: those kept in ``home``/dev.env (mode
    0600), made and kept there when missing (or ``renew``ed), so that scripts and inbox
    sign-ins outlive a restart. A variable set in ``environ`` wins (and is not kept)."""
    file = home / DEV_ENV
    kept: dict[str, str] = {}
    if file.exists() and not renew:
        file.chmod(0o600)
        kept = {k: v for k, v in dotenv_values(file).items() if k in DEV_SECRETS and v}
    minted = {
        name: make()
        for name, make in DEV_SECRETS.items()
        if name not in kept and not environ.get(name)  # one given is neither made nor kept
    }
    if minted:
        _keep(file, kept | minted)
    values: dict[str, str] = {}
    origins: dict[str, str] = {}
    for name in DEV_SECRETS:
        if environ.get(name):
            values[name], origins[name] = environ[name], "environment"
        else:
            values[name] = kept.get(name) or minted[name]
            origins[name] = "kept" if name in kept else "new"
    return DevSecrets(values, origins, file)


def _keep(file: Path, values: Mapping[str, str]) -> None:
    """Write ``values`` to ``file`` as a dotenv (a shell can source it too), readable by
    its owner alone, replacing it whole."""
    file.parent.mkdir(parents=True, exist_ok=True)
    partial = file.with_name(f".{file.name}.{uuid.uuid4().hex}")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write("# airlock dev's token and secret; `airlock dev --new-secrets` replaces them\n")
        out.writelines(f"{name}='{value}'\n" for name, value in values.items())
    os.replace(partial, file)


def port_taken(port: int) -> bool:
    """Whether something listens on 127.0.0.1:``port`` (bound as uvicorn binds it)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
        return False


def run_dev(console: Console, port: int, *, new_secrets: bool = False) -> int:
    if port_taken(port):  # before a worker and beat start beside the one already there
        console.print(
            f"[red]airlock dev:[/red] 127.0.0.1:{port} is taken (another `airlock dev`?): "
            "stop it, or give another port with --port",
            highlight=False,
            soft_wrap=True,
        )
        return 2
    home = settings().home
    kept = dev_secrets(home, os.environ, renew=new_secrets)
    configure(kept.values)
    config = settings()
    config.home.mkdir(parents=True, exist_ok=True)
    if (problem := schema.upgrade_or_explain(config.database_url)) is not None:
        console.print(f"[red]airlock dev:[/red] {problem}", highlight=False, soft_wrap=True)
        return 3
    console.rule("[bold]airlock dev[/bold]")
    inbox = f"http://127.0.0.1:{port}/inbox"
    console.print(f"inbox      {inbox}  (sign in with the API token below and your name)")
    console.print(f"database   {without_password(config.database_url)}")
    console.print(f"broker     {without_password(config.broker_url)} ({config.broker_folder})")
    console.print(f"API        http://127.0.0.1:{port}  (docs at /docs)")
    for name, value in kept.values.items():
        console.print(f"{name}={value}", highlight=False, soft_wrap=True)
    origins = {
        "environment": "from the environment",
        "kept": f"kept in {kept.file}",
        "new": f"new, kept in {kept.file}",
    }
    for name, origin in kept.origins.items():
        console.print(f"           {name}: {origins[origin]}", highlight=False, soft_wrap=True)
    console.print(
        "           `airlock dev --new-secrets` replaces the kept ones (and ends what used them)",
        highlight=False,
    )
    console.print(f"logs       {config.home / 'worker.log'}, {config.home / 'beat.log'}")
    _serve(config.home, port)
    return 0


DEV_STOP_GRACE = 0.5
"""Seconds ``airlock dev``'s worker and beat get to stop after its API has (both at
once), before they are killed: beat saves its schedule in that time, while a Celery
worker on the embedded broker takes 4-7 s to stop warm (its consumer polls every 2 s),
and Ctrl-C in development is to stop now. A run the worker was working on is continued
after its lease, as after a crash."""

DEV_STREAMS_GRACE = 1
"""Seconds ``airlock dev``'s API waits for open event streams (an inbox left open) as
it stops."""


def _serve(home: Path, port: int) -> None:
    worker = [sys.executable, "-m", "airlock.workers", "worker", "-l", "info", "-c", "2"]
    beat = [sys.executable, "-m", "celery", "-A", "airlock.workers", "beat", "-l", "info"]
    started = [spawn(worker, home / "worker.log")]
    try:
        started.append(spawn([*beat, "-s", str(home / "beat-schedule")], home / "beat.log"))
        uvicorn.run(
            "airlock.workers.api:app",
            host="127.0.0.1",
            port=port,
            timeout_graceful_shutdown=DEV_STREAMS_GRACE,
        )
    finally:
        stop(started, grace=DEV_STOP_GRACE)
