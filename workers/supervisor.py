"""``airlock worker`` on a broker server (Redis in production; any but the embedded
broker): ``-c N`` single-process Celery workers (``-P solo``) under one supervisor,
instead of one worker whose prefork pool has N processes.

A prefork worker's main process takes each message from the broker and hands it to a
pool process through a pipe, then reads its result back: two more process hops and
about 0.4 ms of the main process's CPU per task, on the path from an approval to the
run's resume. A solo worker runs the task where it took the message (measured, W1
over HTTP, paired: approve → completed 0.4-1.1 ms lower at p50, 1.17-1.29x the runs
per second, 0.73-0.82x the worker's CPU per run; BENCHMARKS.md, issue 17). Each
child is a whole Celery worker: it claims with prefetch 1, acknowledges late and shuts
down warm or cold as ``celery worker`` does; the database's guarded claim, leases and
ledger are the same for every pool.

The supervisor:

- starts the children as ``airlock worker -P solo`` with the other arguments as given.
  The first keeps the node name (``-n``, default ``celery@%h``); the others get ``-2``,
  ``-3``… after its name. Only the first runs an embedded beat (``-B``);
- with ``AIRLOCK_NOTIFY_URL`` set, starts one child more, the consumer of the
  notifications' own queue (``-Q airlock.notifications -P threads -c
  AIRLOCK_NOTIFY_CONCURRENCY``, ``-notify`` after the name): deliveries wait on their
  receivers there, never in a worker that runs segments. So it does beside one
  Celery worker (``-P``, the embedded broker), which then runs as a child too. A
  ``-Q`` says what this ``airlock worker`` consumes: no child more;
- forwards TERM, INT, QUIT, HUP, USR1 and USR2 once to each child, a child being
  started when the signal comes included, and starts none after a TERM, INT or QUIT.
  The children are in process groups of their own, so a terminal's Ctrl-C reaches them
  once, through it;
- starts a child again when one dies (a crash, SIGKILL, the kernel's OOM killer),
  unless it died in its first seconds: a child that cannot start stops them all, and
  the supervisor exits with its code;
- exits once every child has exited (a signal, a remote shutdown): with the first
  non-zero code among them, or 0;
- when it dies, its children are killed (``PR_SET_PDEATHSIG``): none is left
  consuming without it;
- serves the children's metrics on ``AIRLOCK_WORKER_METRICS_PORT``.

What a solo worker cannot do while a segment runs: answer remote control (``celery
inspect ping``) or cancel the segment when the broker connection is lost. ``-P prefork``
(or any other ``-P``) runs one Celery worker as ``celery -A workers worker`` does, as do
``--autoscale``, ``--detach``, ``--max-tasks-per-child``, ``--max-memory-per-child``
and the embedded broker (whose transports are made for one consumer)."""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import TYPE_CHECKING

from workers import metrics

if TYPE_CHECKING:
    from workers.settings import Settings

log = logging.getLogger("airlock")

CHILD = "AIRLOCK_SUPERVISOR_PID"
"""Set in a child's environment: the supervisor's pid, which it dies with."""
FORWARDED = (
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGQUIT,
    signal.SIGHUP,
    signal.SIGUSR1,
    signal.SIGUSR2,
)
STOPPING = (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT)
STARTUP_SECONDS = 5.0
"""A child that dies sooner than this after its start could not start: no restart."""
ONE_WORKER = (
    "-P",
    "--pool",
    "--autoscale",
    "--detach",
    "--max-tasks-per-child",
    "--max-memory-per-child",
)
"""Options of a pool or of prefork: with any of them, one Celery worker."""
PR_SET_PDEATHSIG = 1


VALUED = (
    "-c",
    "--concurrency",
    "-n",
    "--hostname",
    "-P",
    "--pool",
    "--autoscale",
    "--max-tasks-per-child",
    "--max-memory-per-child",
)
"""Options with a value that a child's arguments set, or a consumer of notifications
leaves out."""


@dataclass(frozen=True)
class Plan:
    children: tuple[tuple[str, ...], ...]
    """Each child's ``celery worker`` arguments."""


@dataclass(frozen=True)
class Notifications:
    """The consumer of notifications that ``airlock worker`` runs beside the workers of
    segments (with ``AIRLOCK_NOTIFY_URL`` set): ``concurrency`` threads on ``queue``."""

    queue: str
    concurrency: int


def plan(
    args: Sequence[str],
    *,
    embedded_broker: bool,
    cpus: int,
    notifications: Notifications | None = None,
) -> Plan | None:
    """The children ``airlock worker args`` runs, or None for one Celery worker. With
    ``notifications``, one child more delivers them, unless ``-Q`` names the queues
    this worker consumes."""
    if any(_option(a) in ("-Q", "--queues") for a in args):
        notifications = None
    one = embedded_broker or any(_option(a) in ONE_WORKER for a in args)
    if one and notifications is None:
        return None
    if notifications is not None and "--detach" in args:
        raise UsageError(
            "--detach would leave notifications undelivered: give -Q, and detach another "
            f"airlock worker -Q {notifications.queue}"
        )
    rest: list[str] = []
    count, name, beat = cpus, "celery@%h", False
    values = iter(args)
    for arg in values:
        option = _option(arg)
        if option in VALUED:
            value = _value(arg, option, values)
            if option in ("-c", "--concurrency"):
                count = _count(value)
            elif option in ("-n", "--hostname"):
                name = value
        elif option in ("-B", "--beat"):
            beat = True
        else:
            rest.append(arg)
    base, _, host = name.rpartition("@")
    base, host = (base, host) if base else ("celery", name)
    segments = (
        (tuple(args),)
        if one
        else tuple(
            (
                "-P",
                "solo",
                "-n",
                name if i == 1 else f"{base}-{i}@{host}",
                *(("-B",) if beat and i == 1 else ()),
                *rest,
            )
            for i in range(1, count + 1)
        )
    )
    if notifications is None:
        return Plan(segments)
    notifier = (
        "-P",
        "threads",
        "-c",
        str(notifications.concurrency),
        "-Q",
        notifications.queue,
        "-n",
        f"{base}-notify@{host}",
        *rest,
    )
    return Plan((*segments, notifier))


def _option(arg: str) -> str:
    """``--name`` of ``--name=value``, ``-x`` of ``-xvalue``, or the argument itself."""
    if arg.startswith("--"):
        return arg.split("=", 1)[0]
    return arg[:2] if arg.startswith("-") and len(arg) > 2 else arg


def _value(arg: str, option: str, rest: Iterator[str]) -> str:
    if arg != option:  # --name=value, -xvalue
        return arg[len(option) + 1 :] if arg.startswith("--") else arg[len(option) :]
    try:
        return str(next(rest))
    except StopIteration:
        raise UsageError(f"{option} needs a value") from None


def _count(value: str) -> int:
    try:
        count = int(value)
    except ValueError:
        raise UsageError(f"-c/--concurrency must be a whole number, not {value!r}") from None
    if count < 1:
        raise UsageError(f"-c/--concurrency must be at least 1, not {count}")
    return count


class UsageError(ValueError):
    """Arguments the supervisor cannot run."""


@dataclass
class Child:
    argv: tuple[str, ...]
    process: subprocess.Popen[bytes] | None = None
    started: float = 0.0


def spawn(argv: Sequence[str], env: Mapping[str, str]) -> subprocess.Popen[bytes]:
    """A child in a process group of its own: a signal to the supervisor's group (a
    terminal's Ctrl-C) reaches it once, through the supervisor."""
    return subprocess.Popen(argv, env=env, process_group=0)


@dataclass
class Supervisor:
    children: list[Child]
    env: Mapping[str, str]
    command: Sequence[str] = (sys.executable, "-m", "workers.cli", "worker")
    startup_seconds: float = STARTUP_SECONDS
    poll_seconds: float = 0.1
    spawn: Callable[[Sequence[str], Mapping[str, str]], subprocess.Popen[bytes]] = spawn
    stopping: bool = False
    codes: list[int] = field(default_factory=list)
    pending: deque[int] = field(default_factory=deque)
    """Signals received and not yet passed on."""

    def run(self) -> int:
        """Start the children, keep them running until they exit; the exit code."""
        previous = {sig: signal.signal(sig, self._receive) for sig in FORWARDED}
        try:
            for child in self.children:
                self._start(child)
            while any(c.process is not None for c in self.children):
                self._deliver()
                time.sleep(self.poll_seconds)
                for child in self.children:
                    self._reap(child)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        return next((code for code in self.codes if code != 0), 0)

    def _start(self, child: Child) -> bool:
        """Start ``child`` unless a stop was asked for; whether it was started."""
        self._deliver()  # a signal that came before it is the others' alone
        if self.stopping:
            return False
        child.process = self.spawn(
            [*self.command, *child.argv], {**self.env, CHILD: str(os.getpid())}
        )
        child.started = time.monotonic()
        return True

    def _reap(self, child: Child) -> None:
        process = child.process
        if process is None or (code := process.poll()) is None:
            return
        child.process = None
        code = code if code >= 0 else 128 - code  # killed by a signal: the shell's code
        ran = time.monotonic() - child.started
        if code != 0 and not self.stopping and ran < self.startup_seconds:
            log.error(
                "a worker process exited %.1f s after its start (code %d); stopping",
                ran,
                code,
                extra={"action": "worker.start_failed", "code": code, "argv": child.argv},
            )
            self.stopping = True
            self._signal(signal.SIGTERM)
        elif code != 0 and self._start(child):
            log.warning(
                "a worker process exited (code %d); starting another",
                code,
                extra={"action": "worker.restarted", "code": code, "argv": child.argv},
            )
            return
        self.codes.append(code)

    def _receive(self, signum: int, _frame: FrameType | None) -> None:
        # Only noted here. A child being started is recorded only once spawn returns, so
        # a signal passed on from a handler that runs meanwhile would miss it; the main
        # loop passes it on (_deliver) to every child recorded by then. A stop is seen at
        # once, so that no child is started after it.
        if signum in STOPPING:
            self.stopping = True
        self.pending.append(signum)

    def _deliver(self) -> None:
        while self.pending:
            self._signal(self.pending.popleft())

    def _signal(self, signum: int) -> None:
        for child in self.children:
            if child.process is not None and child.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    child.process.send_signal(signum)


def die_with(supervisor: int) -> None:
    """In a child: be killed when the supervisor ``supervisor`` dies (Linux's
    ``PR_SET_PDEATHSIG``; elsewhere a thread that watches the parent)."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    else:  # pragma: no cover - the supported platform is Linux
        import threading  # noqa: PLC0415

        def watch() -> None:
            while os.getppid() == supervisor:
                time.sleep(1.0)
            os.kill(os.getpid(), signal.SIGKILL)

        threading.Thread(target=watch, name="airlock-supervisor-watch", daemon=True).start()
    if os.getppid() != supervisor:  # it died before the above
        os.kill(os.getpid(), signal.SIGKILL)


def supervise(plan: Plan, config: Settings) -> int:
    """Run ``plan``'s children until they exit (``Supervisor.run``); serve their metrics
    if ``AIRLOCK_WORKER_METRICS_PORT`` is set."""
    env = dict(os.environ)
    if config.worker_metrics_port:
        folder = config.home / "metrics"
        metrics.serve_files(config.worker_metrics_port, folder)
        env.pop("AIRLOCK_WORKER_METRICS_PORT", None)
        env["PROMETHEUS_MULTIPROC_DIR"] = str(folder)
    return Supervisor([Child(argv) for argv in plan.children], env).run()
