"""The ``airlock`` command, run as a subprocess against a real database."""

from __future__ import annotations

import getpass
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from airlock.persistence.db import make_engine
from airlock.persistence.domain import RunStatus
from airlock.persistence.store import RunStore
from airlock.workers.service import Service
from airlock.workers.service.decisions import DecisionBody
from airlock.workers.service.principals import Principal
from airlock.workers.service.registry import Registry
from airlock.workers.service.views import event_summary, event_view

ROOT = Path(__file__).resolve().parents[2]


def airlock(*args: str, env: dict[str, str], cwd: Path, timeout: float = 60) -> Any:
    return subprocess.run(
        [sys.executable, "-m", "airlock.workers", *args],
        env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRLOCK_")}
    env["PYTHONPATH"] = str(ROOT)
    env["COLUMNS"] = "200"
    env.update(extra)
    return env


@pytest.fixture
def cli_env(db_url: str, tmp_path: Path) -> dict[str, str]:
    return clean_env(
        AIRLOCK_DATABASE_URL=db_url,
        AIRLOCK_BROKER_URL="filesystem://",
        AIRLOCK_HOME=str(tmp_path / "home"),
        AIRLOCK_AGENTS="tests.integration.agents:AGENTS",
    )


@pytest.fixture
def service(db_url: str) -> Any:
    svc = Service(
        store=RunStore(make_engine(db_url)),
        registry=Registry.from_paths("tests.integration.agents:AGENTS"),
        enqueue=lambda run_id, delay=None: None,
    )
    yield svc
    svc.store.engine.dispose()


def waiting(service: Service) -> str:
    run, _ = service.start_run("w1", "mail")
    service.run_segment(run.id, "cli-test")
    assert service.store.runs.require(run.id).status is RunStatus.WAITING_FOR_APPROVAL
    return run.id


def test_demo_runs_on_a_bare_machine(tmp_path: Path) -> None:
    result = airlock("demo", env=clean_env(), cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "waiting_for_approval" in result.stdout
    assert "→ 202" in result.stdout and "completed" in result.stdout
    assert "the audit stream" in result.stdout
    assert list(tmp_path.iterdir()) == []  # it left nothing behind


def test_run_then_list_show_events(cli_env: dict[str, str], tmp_path: Path) -> None:
    created = airlock(
        "run", "w1", "mail 42", "--metadata", '{"t": 1}', "--json", env=cli_env, cwd=tmp_path
    )
    assert created.returncode == 0, created.stderr
    run_id = json.loads(created.stdout)["id"]
    listed = airlock("runs", "list", "--json", env=cli_env, cwd=tmp_path)
    assert [r["id"] for r in json.loads(listed.stdout)["runs"]] == [run_id]
    table = airlock("runs", "list", "--status", "queued", env=cli_env, cwd=tmp_path)
    assert run_id in table.stdout
    narrow = airlock("runs", "list", env=cli_env | {"COLUMNS": "80"}, cwd=tmp_path)
    assert run_id in narrow.stdout  # whole, as runs show takes it, in a narrow terminal
    assert "queued" in narrow.stdout and "…" not in narrow.stdout  # no cell cut
    shown = airlock("runs", "show", run_id, "--json", env=cli_env, cwd=tmp_path)
    assert json.loads(shown.stdout)["metadata"] == {"t": 1}
    events = airlock("runs", "events", run_id, "--json", env=cli_env, cwd=tmp_path)
    assert [e["kind"] for e in json.loads(events.stdout)] == ["request"]


def test_approve_deny_cancel_retry(
    cli_env: dict[str, str], tmp_path: Path, service: Service
) -> None:
    first = waiting(service)
    shown = airlock("runs", "show", first, env=cli_env, cwd=tmp_path)
    assert "send_email" in shown.stdout and "yes" in shown.stdout
    approved = airlock("approve", first, "--approver", "ops", env=cli_env, cwd=tmp_path)
    assert approved.returncode == 0, approved.stderr
    assert service.store.runs.require(first).status is RunStatus.QUEUED
    again = airlock("approve", first, env=cli_env, cwd=tmp_path)
    assert again.returncode == 1 and "not waiting" in again.stderr

    second = waiting(service)
    no_reason = airlock("deny", second, env=cli_env, cwd=tmp_path)
    assert no_reason.returncode == 2 and "--reason" in no_reason.stderr
    denied = airlock("deny", second, "--reason", "not today", env=cli_env, cwd=tmp_path)
    assert denied.returncode == 0
    decision = next(e for e in service.store.events.read(second) if e.kind == "decision")
    assert decision.payload["source"] == "cli" and decision.payload["reason"] == "not today"

    third = waiting(service)
    unknown_call = airlock("approve", third, "--call", "nope", env=cli_env, cwd=tmp_path)
    assert unknown_call.returncode == 2 and "unknown call ids: nope" in unknown_call.stderr
    assert airlock("cancel", third, "--as", "olga", env=cli_env, cwd=tmp_path).returncode == 0
    cancelled = next(e for e in service.store.events.read(third) if e.kind == "cancelled")
    assert cancelled.payload["principal"] == "olga"
    assert cancelled.payload["auth"] == {"method": "cli", "os_user": getpass.getuser(), "roles": []}
    assert airlock("cancel", third, env=cli_env, cwd=tmp_path).returncode == 1
    retried = airlock("retry", third, env=cli_env, cwd=tmp_path)
    assert retried.returncode == 1 and "only failed runs" in retried.stderr

    run, _ = service.start_run("w1", "x")
    service.store.transitions.claim(run.id, "w", service.limits.lease)
    service.store.transitions.finish(run.id, RunStatus.FAILED, owner="w", error="boom")
    bulk = airlock("retry", "--all-failed", env=cli_env, cwd=tmp_path)
    assert bulk.returncode == 0 and "1 failed runs queued" in bulk.stdout
    assert service.store.runs.require(run.id).status is RunStatus.QUEUED


def test_purge_and_stats(cli_env: dict[str, str], tmp_path: Path, service: Service) -> None:
    run, _ = service.start_run("w1", "x")
    service.cancel(run.id, by=Principal.trusted("test"))
    stats = airlock("stats", "--json", env=cli_env, cwd=tmp_path)
    data = json.loads(stats.stdout)
    assert data["runs"]["cancelled"] == 1 and data["finished"]["last_5m"] == {"cancelled": 1}
    assert data["expired_leases"] == 0
    kept = airlock("purge", "--older-than", "1d", env=cli_env, cwd=tmp_path)
    assert kept.returncode == 0 and "removed 0" in kept.stdout
    gone = airlock("purge", "--older-than", "0s", env=cli_env, cwd=tmp_path)
    assert "removed 1" in gone.stdout and service.store.runs.get(run.id) is None


def test_db_recount_repairs_the_tallies(
    cli_env: dict[str, str], tmp_path: Path, service: Service
) -> None:
    service.start_run("w1", "x")
    with service.store.engine.begin() as conn:
        conn.execute(text("UPDATE run_tallies SET queued = queued + 5 WHERE slot = 0"))
    assert service.stats().runs[RunStatus.QUEUED] == 6
    done = airlock("db", "recount", env=cli_env, cwd=tmp_path)
    assert done.returncode == 0 and "queued 1," in done.stdout, done.stdout
    assert service.stats().runs[RunStatus.QUEUED] == 1


@pytest.mark.parametrize("window", ["\u0663d", "3\u0661h", "\uff13d", "3 days", "-1d"])
def test_purge_refuses_a_duration_not_of_ascii_digits_and_removes_nothing(
    cli_env: dict[str, str], tmp_path: Path, service: Service, window: str
) -> None:
    """Issue 47, item 10: ``--older-than ٣d`` (an Arabic-Indic three) was read as 3d."""
    run, _ = service.start_run("w1", "x")
    service.cancel(run.id, by=Principal.trusted("test"))
    refused = airlock("purge", "--older-than", window, env=cli_env, cwd=tmp_path)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "not a duration" in refused.stderr and "ASCII" in refused.stderr
    assert service.store.runs.get(run.id) is not None


def test_stats_says_when_the_sweeper_ran(
    cli_env: dict[str, str], tmp_path: Path, service: Service
) -> None:
    never = airlock("stats", env=cli_env, cwd=tmp_path)
    assert "sweeper: never ran" in never.stdout
    service.sweep()
    data = json.loads(airlock("stats", "--json", env=cli_env, cwd=tmp_path).stdout)
    assert data["sweeper"]["state"] == "ok" and data["sweeper"]["last_run_at"]
    assert "sweeper: last ran" in airlock("stats", env=cli_env, cwd=tmp_path).stdout


@pytest.mark.parametrize("command", [["airlock.workers"], ["celery", "-A", "airlock.workers"]])
def test_beat_starts_in_a_folder_without_its_home(
    cli_env: dict[str, str], tmp_path: Path, command: list[str]
) -> None:
    """Issue 27, defect 1: beat exited at start where .airlock/ did not exist (as in
    the image); it makes the folder of its schedule file and saves it there. So does
    `celery -A airlock.workers beat`, whose banner opens the schedule before beat_init is sent."""
    env = {k: v for k, v in cli_env.items() if k != "AIRLOCK_HOME"}
    folder = tmp_path / "empty"
    folder.mkdir()
    beat = subprocess.Popen(
        [sys.executable, "-m", *command, "beat", "-l", "info"],
        env=env, cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        for line in beat.stdout or ():
            if "Sending due task" in line:
                break
        assert beat.poll() is None
        assert list((folder / ".airlock").glob("celerybeat-schedule*"))
    finally:
        beat.terminate()
        beat.communicate(timeout=30)


def test_beat_refuses_in_one_line_a_schedule_folder_it_cannot_make(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "a-file").write_text("")
    schedule = tmp_path / "a-file" / "beat" / "schedule"
    refused = airlock("beat", "-s", str(schedule), env=cli_env, cwd=tmp_path)
    assert refused.returncode == 2
    assert refused.stderr.count("\n") == 1 and str(schedule.parent) in refused.stderr
    home = airlock("beat", env={**cli_env, "AIRLOCK_HOME": str(tmp_path / "a-file")}, cwd=tmp_path)
    assert home.returncode == 2 and str(tmp_path / "a-file") in home.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["runs", "show", "00000000-0000-0000-0000-000000000000"], "no run has id"),
        (["run", "nobody", "x"], "unknown agent 'nobody'"),
        (["purge", "--older-than", "soon"], "not a duration"),
        (["runs", "list", "--status", "sleeping"], "sleeping"),
        (["run", "w1", "x", "--metadata", "[1]"], "must be a JSON object"),
        (["frobnicate"], "No such command"),
    ],
)
def test_bad_arguments_fail_clearly(
    cli_env: dict[str, str], tmp_path: Path, args: list[str], message: str
) -> None:
    result = airlock(*args, env=cli_env, cwd=tmp_path)
    assert result.returncode != 0
    assert message in result.stderr, result.stderr


def test_bad_configuration_names_the_variable(tmp_path: Path) -> None:
    result = airlock("runs", "list", env=clean_env(AIRLOCK_DATABASE_URL="mysql://x"), cwd=tmp_path)
    assert result.returncode == 2 and "AIRLOCK_DATABASE_URL" in result.stderr


def test_approve_shows_the_turn_and_quotes_a_digest(
    cli_env: dict[str, str], tmp_path: Path, service: Service
) -> None:
    run_id = waiting(service)
    stale = airlock("approve", run_id, "--digest", "0" * 64, env=cli_env, cwd=tmp_path)
    assert stale.returncode == 1 and "not the digest of the turn that waits" in stale.stderr
    assert service.store.runs.require(run_id).status is RunStatus.WAITING_FOR_APPROVAL
    digest = service.store.runs.require(run_id).turn_digest or ""
    shown = airlock("approve", run_id, env=cli_env, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert digest in shown.stdout and "send_email" in shown.stdout
    assert service.store.runs.require(run_id).status is RunStatus.QUEUED

    other = waiting(service)
    quoted = service.store.runs.require(other).turn_digest or ""
    denied = airlock("deny", other, "--reason", "no", "--digest", quoted, env=cli_env, cwd=tmp_path)
    assert denied.returncode == 0, denied.stderr
    assert service.store.runs.require(other).status is RunStatus.QUEUED


def test_a_decision_the_service_would_refuse_is_answered_in_one_line(
    cli_env: dict[str, str], tmp_path: Path, service: Service
) -> None:
    """A body that fails validation (a reason over 2000 characters, a digest that is
    not one) exits 2 with one line naming the field, not pydantic's report of four."""
    run_id = waiting(service)
    long = airlock("approve", run_id, "--reason", "r" * 2001, env=cli_env, cwd=tmp_path)
    assert long.returncode == 2 and long.stderr.count("\n") == 1, long.stderr
    assert long.stderr.startswith("airlock: reason: ") and "2000" in long.stderr
    short = airlock("deny", run_id, "--reason", "no", "--digest", "ab", env=cli_env, cwd=tmp_path)
    assert short.returncode == 2 and short.stderr.count("\n") == 1, short.stderr
    assert short.stderr.startswith("airlock: turn_digest: ")
    assert service.store.runs.require(run_id).status is RunStatus.WAITING_FOR_APPROVAL


def test_the_operator_decides_as_named_with_the_os_user_and_counts_toward_a_quorum(
    cli_env: dict[str, str], tmp_path: Path, service: Service
) -> None:
    # the requester may not approve their own run, even as the operator
    mine, _ = service.start_run("four_eyes", "move it", requested_by="alice")
    service.run_segment(mine.id, "cli-test")
    refused = airlock("approve", mine.id, "--as", "alice", env=cli_env, cwd=tmp_path)
    assert refused.returncode == 1 and "alice requested this run" in refused.stderr
    assert service.store.runs.require(mine.id).status is RunStatus.WAITING_FOR_APPROVAL

    first = airlock("approve", mine.id, "--as", "ops-ann", env=cli_env, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert "1 of 2 approvals" in first.stdout
    # withdrawn, and given again (issue 26, defect 5)
    taken = airlock("withdraw", mine.id, "--as", "ops-ann", env=cli_env, cwd=tmp_path)
    assert taken.returncode == 0 and "withdrawn" in taken.stdout, taken.stderr
    digest = service.store.runs.require(mine.id).turn_digest or ""
    assert service.store.decisions.approvals(mine.id, digest) == []
    none = airlock("withdraw", mine.id, "--as", "ops-ann", env=cli_env, cwd=tmp_path)
    assert none.returncode == 1 and "no approval of this turn" in none.stderr
    first = airlock("approve", mine.id, "--as", "ops-ann", env=cli_env, cwd=tmp_path)
    assert first.returncode == 0 and "1 of 2 approvals" in first.stdout, first.stderr
    again = airlock("approve", mine.id, "--as", "ops-ann", env=cli_env, cwd=tmp_path)
    assert again.returncode == 0 and "already recorded" in again.stdout
    assert service.store.runs.require(mine.id).status is RunStatus.WAITING_FOR_APPROVAL
    second = airlock("approve", mine.id, "--approver", "ops-bo", env=cli_env, cwd=tmp_path)
    assert second.returncode == 0 and "queued to resume" in second.stdout
    assert service.store.runs.require(mine.id).status is RunStatus.QUEUED
    approval, withdrawn, _ = [
        e.payload for e in service.store.events.read(mine.id) if e.kind == "approval"
    ]
    assert withdrawn["withdrawn"] is True and withdrawn["principal"] == "ops-ann"
    auth = approval["auth"]
    assert isinstance(auth, dict) and auth["method"] == "cli" and auth["os_user"]
    (decision,) = [e.payload for e in service.store.events.read(mine.id) if e.kind == "decision"]
    assert decision["approved_by"] == ["ops-ann", "ops-bo"]

    # without --as, the OS user decides
    other = waiting(service)
    assert airlock("approve", other, env=cli_env, cwd=tmp_path).returncode == 0
    (decided,) = [e.payload for e in service.store.events.read(other) if e.kind == "decision"]
    assert decided["principal"] == auth["os_user"]


@pytest.mark.parametrize(
    ("broker", "args", "error"),
    [
        ("filesystem://", ("--bogus",), "celery worker: No such option '--bogus'"),
        ("redis://127.0.0.1:1/0", ("-c", "0"), "-c/--concurrency must be at least 1, not 0"),
        ("redis://127.0.0.1:1/0", ("-c", "x"), "a whole number, not 'x'"),
        ("redis://127.0.0.1:1/0", ("-P", "prefork", "-c", "0"), "must be at least 1, not 0"),
        ("redis://127.0.0.1:1/0", ("-n",), "-n/--hostname needs a value"),
        ("redis://127.0.0.1:1/0", ("-P",), "-P/--pool needs a value"),
    ],
)
def test_a_worker_refuses_bad_options_in_a_line(
    cli_env: dict[str, str], tmp_path: Path, broker: str, args: tuple[str, ...], error: str
) -> None:
    """No traceback: the option named, exit 2, before any broker is reached."""
    result = airlock("worker", *args, env=cli_env | {"AIRLOCK_BROKER_URL": broker}, cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert error in result.stderr and "Traceback" not in result.stderr + result.stdout


def test_runs_events_follow_prints_each_event_once_until_the_run_ends(
    cli_env: dict[str, str], tmp_path: Path, service: Service
) -> None:
    run_id = waiting(service)
    so_far = len(service.events(run_id))
    follow = subprocess.Popen(
        [sys.executable, "-m", "airlock.workers", "runs", "events", run_id, "--follow", "--json"],
        env=cli_env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert follow.stdout is not None
        printed = [json.loads(follow.stdout.readline()) for _ in range(so_far)]  # then it waits
        digest = service.get_run(run_id).turn_digest or ""
        body = DecisionBody.model_validate({"turn_digest": digest, "decision": "approve"})
        service.record_decision(run_id, body, Principal.operator("ops", os_user="ops"))
        service.run_segment(run_id, "cli-test")
        rest, errors = follow.communicate(timeout=60)
    finally:
        follow.kill()
    assert follow.returncode == 0, errors
    printed += [json.loads(line) for line in rest.splitlines()]
    events = [event_view(e) for e in service.events(run_id)]
    assert printed == json.loads(json.dumps(events))
    assert events[-1]["kind"] == "completed"
    unknown = airlock("runs", "events", "nope", "--follow", env=cli_env, cwd=tmp_path)
    assert unknown.returncode == 4


def test_approve_with_a_grant_then_list_and_revoke_it(
    cli_env: dict[str, str], tmp_path: Path, service: Service
) -> None:
    first = waiting(service)
    bad = airlock("approve", first, "--grant", "call", "--for", "40d", env=cli_env, cwd=tmp_path)
    assert bad.returncode == 2 and "30 days" in bad.stderr
    alone = airlock("approve", first, "--for", "8h", env=cli_env, cwd=tmp_path)
    assert alone.returncode == 2 and "--grant" in alone.stderr  # no grant silently not given
    for duration in ("banana", "0", "2²"):  # refused before the turn is read or printed
        bad = airlock(
            "approve", first, "--grant", "call", "--for", duration, env=cli_env, cwd=tmp_path
        )
        assert bad.returncode == 2 and "--for" in bad.stderr and repr(duration) in bad.stderr
        assert "30m" in bad.stderr and bad.stdout == ""
    assert service.store.runs.require(first).status is RunStatus.WAITING_FOR_APPROVAL
    granted = airlock(
        "approve", first, "--as", "olga", "--grant", "call", "--for", "2h",
        env=cli_env, cwd=tmp_path,
    )  # fmt: skip
    assert granted.returncode == 0, granted.stderr
    listed = json.loads(airlock("grants", "list", "--json", env=cli_env, cwd=tmp_path).stdout)
    assert f"granted: {listed['grants'][0]['id']}" in granted.stdout
    listed = json.loads(airlock("grants", "list", "--json", env=cli_env, cwd=tmp_path).stdout)
    (grant,) = listed["grants"]
    assert (grant["granted_by"], grant["tool"], grant["scope"]) == ("olga", "send_email", "call")
    table = airlock("grants", "list", env=cli_env, cwd=tmp_path)
    assert grant["id"] in table.stdout and "active" in table.stdout

    service.run_segment(first, "cli-test")
    repeat, _ = service.start_run("w1", "mail")  # the same script: the same call
    service.run_segment(repeat.id, "cli-test")
    assert service.store.runs.require(repeat.id).status is RunStatus.QUEUED
    shown = airlock("runs", "events", repeat.id, "--json", env=cli_env, cwd=tmp_path)
    (decision,) = [e["payload"] for e in json.loads(shown.stdout) if e["kind"] == "decision"]
    assert (decision["source"], decision["approver"]) == ("grant", "olga")
    assert event_summary("decision", decision) == "approve by olga via grant"

    revoked = airlock("grants", "revoke", grant["id"], env=cli_env, cwd=tmp_path)
    assert revoked.returncode == 0 and "revoked (1 release(s)" in revoked.stdout
    again = airlock("grants", "revoke", grant["id"], env=cli_env, cwd=tmp_path)
    assert again.returncode == 1 and "was revoked" in again.stderr
    shown = airlock("grants", "show", grant["id"], env=cli_env, cwd=tmp_path).stdout
    assert f"id  {grant['id']}" in shown and "granted_by  olga" in shown
    assert json.dumps(grant["arguments"]) in shown.replace("\n", "")
    as_json = airlock("grants", "show", grant["id"], "--json", env=cli_env, cwd=tmp_path)
    assert json.loads(as_json.stdout)["id"] == grant["id"]
    unknown = airlock("grants", "show", "nope", env=cli_env, cwd=tmp_path)
    assert unknown.returncode == 4 and "no grant has id 'nope'" in unknown.stderr
    assert "no grants stand now" in airlock("grants", "list", env=cli_env, cwd=tmp_path).stdout


def test_run_with_the_broker_out_of_reach_says_so_in_one_line(
    cli_env: dict[str, str], tmp_path: Path, service: Service
) -> None:
    env = cli_env | {"AIRLOCK_BROKER_URL": "redis://127.0.0.1:9/0"}  # nothing listens
    result = airlock("run", "w1", "mail", "--json", env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr  # queued in the database all the same
    run_id = json.loads(result.stdout)["id"]
    assert service.store.runs.require(run_id).status is RunStatus.QUEUED
    assert "Traceback" not in result.stderr
    assert "could not publish the run's wake-up" in result.stderr
    assert "sweeper re-sends it" in result.stderr


def test_health_on_a_database_file_not_there_names_it_and_makes_none(tmp_path: Path) -> None:
    """Issue 42, item 6: probes look and never write. Said in one line naming the file
    (the operator's own command), exit 1, and nothing made."""
    env = clean_env(AIRLOCK_HOME=str(tmp_path / "home"))
    folder = tmp_path / "data"
    folder.mkdir()
    beat = airlock("health", "beat", env=env, cwd=folder)
    assert beat.returncode == 1, beat.stdout + beat.stderr
    assert beat.stdout == (
        f"beat: the database file {folder / 'airlock.db'} does not exist: "
        "run `airlock db upgrade`\n"
    )
    assert list(folder.iterdir()) == [], "a probe made the database"


def test_health_on_a_database_nobody_has_open_adds_no_wal_to_it(
    sqlite_template: Path, tmp_path: Path
) -> None:
    file = tmp_path / "airlock.db"
    shutil.copyfile(sqlite_template, file)
    env = clean_env(AIRLOCK_DATABASE_URL=f"sqlite:///{file}", AIRLOCK_HOME=str(tmp_path / "h"))
    beat = airlock("health", "beat", env=env, cwd=tmp_path)
    assert beat.returncode == 1, beat.stdout + beat.stderr  # no beat ever ran
    assert beat.stdout.startswith("beat: the sweeper never ran")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["airlock.db"]


def test_the_stdio_gateway_says_when_its_held_calls_would_queue_where_no_worker_reads(
    tmp_path: Path,
) -> None:
    """Found by a newcomer: ``airlock gateway --stdio`` pointed at the workers' PostgreSQL
    but not at their broker queued held calls on an embedded broker of its own. It says
    so on stderr (its stdout is the MCP channel); with a broker, or on SQLite, it does not."""
    servers = tmp_path / "servers.toml"
    servers.write_text('[servers.bank]\nurl = "http://127.0.0.1:9/mcp"\n')
    base = {"AIRLOCK_MCP_SERVERS": str(servers), "AIRLOCK_HOME": str(tmp_path / "home")}
    pg = "postgresql+psycopg://postgres@127.0.0.1:1/none"
    said = airlock(
        "gateway", "--stdio", env=clean_env(**base, AIRLOCK_DATABASE_URL=pg), cwd=tmp_path
    )
    assert "AIRLOCK_BROKER_URL is not set" in said.stderr and said.stdout == ""
    assert str(tmp_path / "home" / "broker") in said.stderr.replace("\n", "")
    brokered = clean_env(
        **base, AIRLOCK_DATABASE_URL=pg, AIRLOCK_BROKER_URL="redis://127.0.0.1:1/0"
    )
    assert (
        "AIRLOCK_BROKER_URL" not in airlock("gateway", "--stdio", env=brokered, cwd=tmp_path).stderr
    )
