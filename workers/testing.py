"""Test support, shared by the tests (``tests/``) and the benchmarks (``bench/``) so that
neither imports the other (as procrastinate's ``testing.py``): real processes — celery
workers and beat, ``airlock`` commands, private Redis and PostgreSQL servers that a test
may restart or kill without disturbing the shared ones — and the secret and token
their stacks use. No room of the product imports it (an import-linter contract)."""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

from celery import Celery
from sqlalchemy.exc import OperationalError

from airlock.persistence.domain import Run, RunStatus
from airlock.workers.service import Service
from airlock.workers.service.settings import Settings
from airlock.workers.tasks.broker import RUN_SEGMENT, make_app
from airlock.workers.tasks.wiring import build_service

ROOT = Path(__file__).resolve().parents[1]
"""The folder Airlock's packages are imported from (a checkout's root, for an editable
install): the processes started here run in it, with it on their ``PYTHONPATH``."""
SECRET = "whsec_" + base64.b64encode(b"airlock-test-secret-0123456789ab").decode()
"""The webhook secret the test and benchmark stacks sign approvals with."""
TOKEN = "test-token"
"""The API token the test and benchmark stacks authenticate with."""
T = TypeVar("T")


def wait_for(
    what: str, probe: Callable[[], T | None], timeout: float = 30.0, interval: float = 0.05
) -> T:
    """Poll observable state until ``probe`` returns something truthy."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Process:
    """A child process in its own process group, logging to a file."""

    def __init__(
        self, name: str, argv: list[str], env: Mapping[str, str], log: Path, cwd: Path = ROOT
    ) -> None:
        self.name = name
        self.argv = argv
        self.env = dict(env)
        self.log = log
        self.cwd = cwd
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Process:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                self.argv,
                env=self.env,
                cwd=self.cwd,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None, f"{self.name} was not started"
        return self.proc.pid

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def kill(self) -> None:
        """SIGKILL the whole group: the worker and its pool children die mid-task
        (``airlock worker``'s children, in groups of their own, die with it)."""
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


def airlock_env(config: Mapping[str, str], outbox: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRLOCK_")}
    env.update(config)
    env["AIRLOCK_TEST_OUTBOX"] = str(outbox)
    env["PYTHONPATH"] = str(ROOT)
    return env


def celery_worker(
    config: Mapping[str, str],
    outbox: Path,
    log: Path,
    name: str = "w1",
    concurrency: int = 2,
    *,
    include: Sequence[str] = (),
    airlock: bool = False,
    options: Sequence[str] = (),
) -> Process:
    """``celery -A airlock.workers worker -c concurrency`` (prefork), or with ``airlock``
    ``airlock worker OPTIONS`` as an operator runs it (no pool or concurrency given:
    airlock worker's defaults, ``-P gevent -c 200`` on Redis, Celery's on the embedded
    broker)."""
    argv = [sys.executable, "-m"]
    if airlock:
        argv += ["airlock.workers", "worker", "-l", "info", *options]
    else:
        argv += ["celery", "-A", "airlock.workers", "worker", "-l", "info", "-c", str(concurrency)]
    argv += ["-n", f"{name}@%h", "--without-gossip", "--without-mingle"]
    if include:  # modules the worker imports as it starts (``celery worker --include``)
        argv += ["--include", ",".join(include)]
    return Process(name, argv, airlock_env(config, outbox), log)


def celery_beat(config: Mapping[str, str], outbox: Path, log: Path, home: Path) -> Process:
    argv = [
        sys.executable, "-m", "celery", "-A", "airlock.workers", "beat", "-l", "info",
        "-s", str(home / "beat-schedule"),
    ]  # fmt: skip
    return Process("beat", argv, airlock_env(config, outbox), log)


def wait_ready(worker: Process, timeout: float = 30.0) -> None:
    wait_for(f"{worker.name} to be ready", lambda: "ready." in worker.output(), timeout)


class Stack:
    """The test's view of one deployment: its settings, a service to act through,
    and the worker/beat processes."""

    def __init__(self, config: dict[str, str], tmp: Path) -> None:
        self.config = config
        self.tmp = tmp
        self.outbox = tmp / "outbox.txt"
        self.outbox.touch()
        self.settings = Settings.model_validate(
            {k.removeprefix("AIRLOCK_").lower(): v for k, v in config.items()}
        )
        self.celery: Celery = make_app(self.settings)
        self.service: Service = build_service(self.settings, self.enqueue)
        self.processes: list[Process] = []
        self._workers = 0

    def enqueue(self, run_id: str, delay: float | None = None) -> None:
        self.celery.send_task(RUN_SEGMENT, (run_id,), countdown=delay)

    def worker(
        self,
        concurrency: int = 2,
        include: Sequence[str] = (),
        *,
        airlock: bool = False,
        options: Sequence[str] = (),
    ) -> Process:
        self._workers += 1
        name = f"w{self._workers}"
        log = self.tmp / f"{name}.log"
        worker = celery_worker(
            self.config,
            self.outbox,
            log,
            name,
            concurrency,
            include=include,
            airlock=airlock,
            options=options,
        ).start()
        self.processes.append(worker)
        wait_ready(worker)
        return worker

    def api(self, **env: str) -> str:
        """Start ``airlock api`` on a free port (with ``env`` over the stack's settings)
        and return its base URL once it answers."""
        port = free_port()
        api = Process(
            "api",
            [sys.executable, "-m", "airlock.workers", "api", "--port", str(port)],
            airlock_env(self.config, self.outbox) | env,
            self.tmp / "api.log",
        ).start()
        self.processes.append(api)
        base = f"http://127.0.0.1:{port}"
        wait_for("the API", lambda: _answers(f"{base}/healthz"), timeout=30)
        return base

    def beat(self) -> Process:
        beat = celery_beat(self.config, self.outbox, self.tmp / "beat.log", self.tmp).start()
        self.processes.append(beat)
        return beat

    def close(self) -> None:
        for p in self.processes:
            p.stop()
        self.service.store.engine.dispose()

    # -- observations ----------------------------------------------------------------

    def run(self, run_id: str) -> Run:
        return self.service.store.runs.require(run_id)

    def wait_status(
        self, run_id: str, *statuses: RunStatus, timeout: float = 30.0, interval: float = 0.05
    ) -> Run:
        def probe() -> Run | None:
            try:
                run = self.run(run_id)
            except OperationalError:  # our own view of a database being restarted
                return None
            return run if run.status in statuses else None

        return wait_for(
            f"run {run_id} to be {'/'.join(statuses)} (logs in {self.tmp})",
            probe,
            timeout,
            interval,
        )

    def executions(self) -> Counter[str]:
        """How many times each tool call really ran (finished), by 'tool key'."""
        lines = self.outbox.read_text().splitlines()
        return Counter(line for line in lines if ".start " not in line)

    def starts(self) -> Counter[str]:
        lines = self.outbox.read_text().splitlines()
        return Counter(line for line in lines if ".start " in line)

    def kinds(self, run_id: str) -> list[str]:
        return [e.kind for e in self.service.store.events.read(run_id)]


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as answer:
            return bool(answer.status == 200)
    except OSError:
        time.sleep(0.1)
        return False


class PrivateRedis:
    """A redis-server of the test's own, with AOF on so queued messages survive restarts."""

    def __init__(self, tmp: Path) -> None:
        self.port = free_port()
        self.dir = tmp / "redis"
        self.dir.mkdir()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        binary = shutil.which("redis-server")
        assert binary, "redis-server is not installed"
        with (self.dir / "log").open("ab") as log:
            self.proc = subprocess.Popen(
                [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir),
                 "--appendonly", "yes", "--appendfsync", "always", "--save", ""],
                stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        wait_for("private redis", self._ping, 10)

    def _ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


def postgres_bin(name: str) -> str | None:
    for base in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (base / name).exists():
            return str(base / name)
    return shutil.which(name)


class PrivatePostgres:
    """A PostgreSQL cluster of the test's own (initdb + pg_ctl), run as the postgres user."""

    def __init__(self) -> None:
        self.port = free_port()
        # not under pytest's tmp_path: its folders are private to root, and the
        # server runs as the postgres user
        self.root = Path(tempfile.mkdtemp(prefix="airlock-pg-"))
        self.dir = self.root / "data"
        self.log = self.root / "postgres.log"

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _as_postgres(self, argv: list[str]) -> None:
        prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        subprocess.run(prefix + argv, check=True, capture_output=True, timeout=120)

    def init(self) -> None:
        initdb = postgres_bin("initdb")
        assert initdb, "initdb is not installed"
        self.dir.mkdir(mode=0o700)
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres", "postgres")
            shutil.chown(self.dir, "postgres", "postgres")
        self._as_postgres([initdb, "-D", str(self.dir), "-A", "trust", "-U", "postgres"])
        self.start()

    def start(self) -> None:
        pg_ctl = postgres_bin("pg_ctl")
        assert pg_ctl
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.dir}"
        self._as_postgres(
            [pg_ctl, "-D", str(self.dir), "-l", str(self.log), "-o", options, "-w", "start"]
        )

    def stop(self) -> None:
        pg_ctl = postgres_bin("pg_ctl")
        assert pg_ctl
        self._as_postgres([pg_ctl, "-D", str(self.dir), "-m", "fast", "-w", "stop"])

    def crash(self) -> None:
        """Stop as a power cut would: no shutdown checkpoint, recovery replays the log at
        the next start, and a commit that did not wait for the disk may be lost."""
        pg_ctl = postgres_bin("pg_ctl")
        assert pg_ctl
        self._as_postgres([pg_ctl, "-D", str(self.dir), "-m", "immediate", "-w", "stop"])

    def restart(self) -> None:
        self.stop()
        self.start()

    def remove(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            self.stop()
        shutil.rmtree(self.root, ignore_errors=True)
