"""``airlock worker``'s supervisor: which children it plans from the arguments (pure),
and how it runs them — real child processes standing in for Celery workers, each
recording what it received, so that what reaches each child is seen, not assumed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.integration.harness import ROOT, wait_for
from workers.supervisor import Notifications, Plan, UsageError, plan


def children(*args: str, cpus: int = 4) -> tuple[tuple[str, ...], ...]:
    planned = plan(args, embedded_broker=False, cpus=cpus)
    assert planned is not None
    return planned.children


def test_c_solo_workers_the_first_keeps_the_name_and_the_others_are_numbered() -> None:
    assert children("-c", "3", "-n", "w1@%h", "-l", "info") == (
        ("-P", "solo", "-n", "w1@%h", "-l", "info"),
        ("-P", "solo", "-n", "w1-2@%h", "-l", "info"),
        ("-P", "solo", "-n", "w1-3@%h", "-l", "info"),
    )


@pytest.mark.parametrize(
    "args",
    [
        ("-c", "2", "--hostname", "w@h"),
        ("-c2", "-nw@h"),
        ("--concurrency=2", "--hostname=w@h"),
        ("--concurrency", "2", "-n", "w@h"),
    ],
)
def test_every_spelling_of_the_count_and_the_name(args: tuple[str, ...]) -> None:
    assert [c[:4] for c in children(*args)] == [
        ("-P", "solo", "-n", "w@h"),
        ("-P", "solo", "-n", "w-2@h"),
    ]


def test_defaults_are_celerys_the_cpu_count_and_celery_at_the_host() -> None:
    assert [c[3] for c in children(cpus=3)] == ["celery@%h", "celery-2@%h", "celery-3@%h"]
    # a name without "@" is a host, as Celery reads it
    assert [c[3] for c in children("-c", "2", "-n", "box")] == ["box", "celery-2@box"]


def test_only_the_first_child_runs_an_embedded_beat() -> None:
    first, second = children("-c", "2", "-B", "-s", "/tmp/schedule")
    assert "-B" in first and "-s" in first
    assert "-B" not in second and "--beat" not in second and "-s" in second


@pytest.mark.parametrize(
    "args",
    [
        ("-P", "prefork"),
        ("-Pthreads",),
        ("--pool=solo",),
        ("--pool", "prefork", "-c", "2"),
        ("--autoscale=4,2",),
        ("--detach",),
        ("--max-tasks-per-child", "100"),
        ("--max-memory-per-child=200000",),
    ],
)
def test_a_pool_or_a_prefork_option_runs_one_celery_worker(args: tuple[str, ...]) -> None:
    assert plan(args, embedded_broker=False, cpus=2) is None


def test_the_embedded_broker_runs_one_celery_worker() -> None:
    assert plan(("-c", "2"), embedded_broker=True, cpus=2) is None
    assert isinstance(plan(("-c", "2"), embedded_broker=False, cpus=2), Plan)


NOTIFY = Notifications("airlock.notifications", 3)


def test_with_notifications_one_child_more_consumes_their_queue_alone() -> None:
    """Issue 26, defect 11: deliveries waited on their receivers in the workers that run
    segments. With AIRLOCK_NOTIFY_URL set, a child of its own consumes them."""
    planned = plan(("-c", "2", "-n", "w@h", "-B", "-l", "info"), embedded_broker=False, cpus=4,
                   notifications=NOTIFY)  # fmt: skip
    assert planned is not None
    assert planned.children == (
        ("-P", "solo", "-n", "w@h", "-B", "-l", "info"),
        ("-P", "solo", "-n", "w-2@h", "-l", "info"),
        ("-P", "threads", "-c", "3", "-Q", "airlock.notifications", "-n", "w-notify@h",
         "-l", "info"),
    )  # fmt: skip


@pytest.mark.parametrize("embedded_broker", [True, False])
def test_one_celery_worker_runs_beside_the_consumer_of_notifications(
    embedded_broker: bool,
) -> None:
    args = ("-c", "2", "-l", "info") if embedded_broker else ("-P", "prefork", "-c", "2")
    planned = plan(args, embedded_broker=embedded_broker, cpus=4, notifications=NOTIFY)
    assert planned is not None
    worker, notifier = planned.children
    assert worker == args  # as given
    assert notifier[:8] == (
        "-P", "threads", "-c", "3", "-Q", "airlock.notifications", "-n", "celery-notify@%h",
    )  # fmt: skip
    assert "prefork" not in notifier and "2" not in notifier[8:]


def test_queues_named_are_all_this_worker_consumes() -> None:
    assert plan(("-Q", "airlock.notifications", "-P", "threads"), embedded_broker=False, cpus=2,
                notifications=NOTIFY) is None  # fmt: skip
    assert plan(("--queues=airlock",), embedded_broker=True, cpus=2, notifications=NOTIFY) is None
    planned = plan(("-c", "1", "-Q", "airlock"), embedded_broker=False, cpus=2,
                   notifications=NOTIFY)  # fmt: skip
    assert planned is not None and planned.children == (
        ("-P", "solo", "-n", "celery@%h", "-Q", "airlock"),
    )


def test_detach_without_queues_would_leave_notifications_undelivered() -> None:
    with pytest.raises(UsageError, match=r"-Q airlock\.notifications"):
        plan(("--detach",), embedded_broker=True, cpus=2, notifications=NOTIFY)
    assert plan(("--detach",), embedded_broker=True, cpus=2) is None


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (("-c", "0"), "at least 1, not 0"),
        (("-c", "two"), "a whole number, not 'two'"),
        (("--concurrency=-1",), "at least 1, not -1"),
        (("-c",), "-c needs a value"),
        (("-l", "info", "-n"), "-n needs a value"),
    ],
)
def test_bad_counts_and_missing_values_are_named(args: tuple[str, ...], error: str) -> None:
    with pytest.raises(UsageError, match=error):
        plan(args, embedded_broker=False, cpus=2)


# -- the supervisor, with stand-in children --------------------------------------------

CHILD = textwrap.dedent(
    """
    import os, signal, sys, time
    from pathlib import Path
    from workers.supervisor import CHILD, die_with

    die_with(int(os.environ[CHILD]))
    index = sys.argv[1]
    folder = Path(os.environ["RECORD"])
    record = folder / f"child-{index}.txt"
    mode = os.environ.get(f"MODE_{index}", "trap")
    started = len(list(folder.glob(f"start-{index}-*")))
    (folder / f"start-{index}-{os.getpid()}").touch()
    if mode == "fail":  # once the other is up, so that it is stopped, not cut short
        while not (folder / "child-0.txt").exists():
            time.sleep(0.01)
        sys.exit(2)

    def on(signum, _frame):
        with record.open("a") as fh:
            fh.write(signal.Signals(signum).name + "\\n")
        sys.exit(1 if signum == signal.SIGINT else 0)

    def noted(signum, _frame):
        with record.open("a") as fh:
            fh.write(signal.Signals(signum).name + "\\n")

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT):
        signal.signal(sig, on)
    for sig in (signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, noted)
    with record.open("a") as fh:
        fh.write(f"ready {os.getpid()}\\n")
    if mode == "crash-once" and started == 0:
        time.sleep(0.5)
        sys.exit(3)
    while True:
        time.sleep(0.05)
    """
)

SUPERVISOR = textwrap.dedent(
    """
    import os, signal, sys, time
    from pathlib import Path
    from workers.supervisor import Child, Supervisor, spawn

    # SIGNAL_AT="N:before|after:NAME": as it starts its Nth child (a restart counts), the
    # supervisor sends itself SIGNAME before the child is spawned, or once the child is
    # up but before spawn returns, so before the supervisor has recorded it. Either way
    # that spawn returns once the child is up, so that what reaches it is recorded.
    at, when, name = os.environ.get("SIGNAL_AT", "0:never:TERM").split(":")
    spawned = 0

    def hooked(argv, env):
        global spawned
        spawned += 1
        if spawned != int(at):
            return spawn(argv, env)
        if when == "before":
            os.kill(os.getpid(), signal.Signals["SIG" + name])
        process = spawn(argv, env)
        record, up = Path(os.environ["RECORD"]) / f"child-{argv[-1]}.txt", f"ready {process.pid}"
        while process.poll() is None and up not in (record.read_text() if record.exists() else ""):
            time.sleep(0.01)
        if when == "after":
            os.kill(os.getpid(), signal.Signals["SIG" + name])
        return process

    children = [Child((str(i),)) for i in range(2)]
    command = (sys.executable, sys.argv[1])
    supervisor = Supervisor(children, dict(os.environ), command, startup_seconds=0.3)
    supervisor.spawn = hooked
    sys.exit(supervisor.run())
    """
)


class Supervised:
    """A supervisor of two stand-in children (0 and 1), in a session of its own (as a
    terminal's foreground job: a signal to its group is a terminal's Ctrl-C)."""

    def __init__(self, tmp: Path, signal_at: str = "", **modes: str) -> None:
        self.folder = tmp
        (tmp / "child.py").write_text(CHILD)
        (tmp / "supervisor.py").write_text(SUPERVISOR)
        env = {**os.environ, "RECORD": str(tmp), "PYTHONPATH": str(ROOT)}
        env |= {"SIGNAL_AT": signal_at} if signal_at else {}
        env |= {f"MODE_{i}": mode for i, mode in modes.items()}
        self.proc = subprocess.Popen(
            [sys.executable, str(tmp / "supervisor.py"), str(tmp / "child.py")],
            env=env,
            start_new_session=True,
        )

    def lines(self, index: int) -> list[str]:
        path = self.folder / f"child-{index}.txt"
        return path.read_text().splitlines() if path.exists() else []

    def received(self, index: int) -> list[str]:
        """The signals child ``index`` received, over all its starts."""
        return [line for line in self.lines(index) if not line.startswith("ready")]

    def starts(self, index: int) -> int:
        return len(list(self.folder.glob(f"start-{index}-*")))

    def pids(self, index: int) -> list[int]:
        return [int(line.split()[1]) for line in self.lines(index) if line.startswith("ready")]

    def wait_ready(self, index: int, starts: int = 1) -> None:
        wait_for(f"child {index} ready", lambda: len(self.pids(index)) >= starts, timeout=20)

    def exit_code(self) -> int:
        return self.proc.wait(20)

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


@pytest.fixture
def supervised(tmp_path: Path):  # type: ignore[no-untyped-def]
    made: list[Supervised] = []

    def make(signal_at: str = "", **modes: str) -> Supervised:
        made.append(Supervised(tmp_path, signal_at, **modes))
        return made[-1]

    yield make
    for s in made:
        s.close()


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    with open(f"/proc/{pid}/stat") as fh:  # a zombie no one reaped yet is gone too
        return fh.read().rsplit(")", 1)[1].split()[0] == "Z"


def test_a_ctrl_c_reaches_each_child_once_and_its_code_is_the_supervisors(supervised) -> None:  # type: ignore[no-untyped-def]
    s = supervised()
    s.wait_ready(0), s.wait_ready(1)
    os.killpg(s.proc.pid, signal.SIGINT)  # what a terminal does: the foreground group
    assert s.exit_code() == 1  # a Celery worker stopped by SIGINT exits 1
    for i in (0, 1):
        assert s.lines(i)[1:] == ["SIGINT"], s.lines(i)  # once: a second is a cold shutdown


def test_sigterm_to_the_supervisor_alone_stops_every_child_warm(supervised) -> None:  # type: ignore[no-untyped-def]
    s = supervised()
    s.wait_ready(0), s.wait_ready(1)
    s.proc.send_signal(signal.SIGTERM)  # docker stop, systemd: the main process only
    assert s.exit_code() == 0
    assert s.lines(0)[1:] == s.lines(1)[1:] == ["SIGTERM"]


def test_a_child_that_dies_is_started_again(supervised) -> None:  # type: ignore[no-untyped-def]
    s = supervised()
    s.wait_ready(0), s.wait_ready(1)
    first = s.pids(1)[0]
    time.sleep(0.4)  # past its start-up
    os.kill(first, signal.SIGKILL)  # the OOM killer, say
    s.wait_ready(1, starts=2)
    assert s.pids(1)[1] != first and s.pids(0) == s.pids(0)[:1]
    s.proc.send_signal(signal.SIGTERM)
    assert s.exit_code() == 0


def test_a_child_that_crashes_after_its_start_is_started_again(supervised) -> None:  # type: ignore[no-untyped-def]
    s = supervised(**{"0": "crash-once"})
    s.wait_ready(0, starts=2)  # exited 3 after 0.5 s, then started again
    s.proc.send_signal(signal.SIGTERM)
    assert s.exit_code() == 0


def test_a_child_that_cannot_start_stops_the_others_with_its_code(supervised) -> None:  # type: ignore[no-untyped-def]
    s = supervised(**{"1": "fail"})
    assert s.exit_code() == 2
    assert s.lines(0)[1:] == ["SIGTERM"]
    assert len(list(s.folder.glob("start-1-*"))) == 1  # not started again


def test_children_die_with_a_killed_supervisor(supervised) -> None:  # type: ignore[no-untyped-def]
    s = supervised()
    s.wait_ready(0), s.wait_ready(1)
    pids = s.pids(0) + s.pids(1)
    s.proc.kill()  # the supervisor alone: the children are in groups of their own
    s.proc.wait(10)
    wait_for("the children to die with it", lambda: all(gone(p) for p in pids), timeout=10)


def test_hup_and_usr_signals_are_passed_on_and_do_not_stop_it(supervised) -> None:  # type: ignore[no-untyped-def]
    """Celery's own meanings (HUP restarts a worker, USR1 dumps its threads' stacks) are
    each child's; the supervisor only passes them on, and a cold shutdown (QUIT) too."""
    s = supervised()
    s.wait_ready(0), s.wait_ready(1)
    for sig in (signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        s.proc.send_signal(sig)
        name = sig.name
        wait_for(f"{name} in both", lambda n=name: all(n in s.lines(i) for i in (0, 1)))  # type: ignore[misc]
    assert s.proc.poll() is None
    s.proc.send_signal(signal.SIGQUIT)
    assert s.exit_code() == 0
    for i in (0, 1):
        assert s.lines(i)[1:] == ["SIGHUP", "SIGUSR1", "SIGUSR2", "SIGQUIT"]


@pytest.mark.parametrize(
    ("signal_at", "code"),
    [
        ("1:before:TERM", 0),  # no child exists yet; the first is being started
        ("1:after:INT", 1),  # the first is up, not yet recorded; the second not started
        ("2:before:QUIT", 0),  # the first is running, the second is being started
        ("2:after:TERM", 0),  # both up, the second not yet recorded
    ],
)
def test_a_stop_as_a_child_starts_reaches_it_and_starts_no_other(  # type: ignore[no-untyped-def]
    supervised, signal_at, code
) -> None:
    """Issue 26, defect 14: the stop went only to the children recorded by then, so the
    one being started kept running and the supervisor never exited."""
    at, _, name = signal_at.split(":")
    s = supervised(signal_at)
    assert s.exit_code() == code
    for i in range(int(at)):
        assert s.starts(i) == 1 and s.received(i) == [f"SIG{name}"], s.lines(i)
    for i in range(int(at), 2):
        assert s.starts(i) == 0  # none is started once a stop was asked for


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_stop_as_a_child_is_started_again_reaches_it(supervised, when) -> None:  # type: ignore[no-untyped-def]
    s = supervised(f"3:{when}:TERM", **{"0": "crash-once"})  # the third start: 0's restart
    assert s.exit_code() == 0
    assert s.starts(0) == 2 and s.received(0) == ["SIGTERM"], s.lines(0)
    assert s.starts(1) == 1 and s.received(1) == ["SIGTERM"], s.lines(1)


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_hup_as_a_child_starts_reaches_each_child_once(supervised, when) -> None:  # type: ignore[no-untyped-def]
    s = supervised(f"2:{when}:HUP")
    wait_for("SIGHUP in both", lambda: all(s.received(i) == ["SIGHUP"] for i in (0, 1)))
    assert s.proc.poll() is None
    s.proc.send_signal(signal.SIGTERM)
    assert s.exit_code() == 0
    assert s.received(0) == s.received(1) == ["SIGHUP", "SIGTERM"]
