"""The policy file end to end: examples/policy.toml over a real worker on Redis and
PostgreSQL. A small refund runs straight through, a large one waits for two support
leads, a huge one is refused with the reason fed to the model; reloading the file never
changes the verdict of a turn already waiting. A pattern that backtracks without end on
Python's re is judged on RE2 by ``airlock worker``'s gevent pool, whose log names the
file it loaded."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path
from typing import Any

import pytest

from airlock.loop.policy import NO_RULE
from airlock.persistence.domain import RunStatus
from airlock.workers.service import ForbiddenError
from airlock.workers.service.decisions import DecisionBody
from airlock.workers.service.principals import Principal
from airlock.workers.service.views import run_view
from airlock.workers.testing import Stack
from tests.integration.conftest import StackFactory

pytestmark = pytest.mark.integration

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "policy.toml"
LEADS = frozenset({"support-leads"})
ALL_RUN = '[[rules]]\nname = "all-refunds-run"\ntool = "refund"\nverdict = "allow"\n'


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    path = tmp_path / "policy.toml"
    shutil.copy(EXAMPLE, path)
    return path


@pytest.fixture
def deployment(
    make_stack: StackFactory, postgres_url: str, shared_redis: str, policy_file: Path
) -> Stack:
    stack = make_stack(
        AIRLOCK_DATABASE_URL=postgres_url,
        AIRLOCK_BROKER_URL=shared_redis,
        AIRLOCK_POLICY=str(policy_file),
    )
    stack.worker()
    return stack


def start(stack: Stack, agent: str) -> str:
    run, _ = stack.service.start_run(agent, "refund order 17", requested_by="customer-desk")
    return run.id


def lead(name: str) -> Principal:
    return Principal.of_client("leads-desk", LEADS, name)


def approve(stack: Stack, run_id: str, principal: Principal) -> str:
    digest = stack.run(run_id).turn_digest
    assert digest is not None
    body = DecisionBody(turn_digest=digest, decision="approve")
    return stack.service.record_decision(run_id, body, principal).result


def test_a_small_refund_runs_straight_through(deployment: Stack) -> None:
    run_id = start(deployment, "refund_small")
    run = deployment.wait_status(run_id, RunStatus.COMPLETED)
    assert run.output == "the tool said: refunded 5000 cents on order 17"
    assert deployment.executions()[f"refund {run_id}:call_0_0"] == 1
    decisions = [e.payload for e in deployment.service.events(run_id) if e.kind == "decision"]
    assert [(d["source"], d["rule"]) for d in decisions] == [("policy", "refund-up-to-100-runs")]
    assert "waiting_for_approval" not in deployment.kinds(run_id)


def test_a_huge_refund_is_refused_with_the_reason_fed_to_the_model(deployment: Stack) -> None:
    run_id = start(deployment, "refund_huge")
    run = deployment.wait_status(run_id, RunStatus.COMPLETED)
    assert run.output is not None
    assert "denied by the approval policy" in run.output
    assert "refunds over 5,000.00 are refused" in run.output
    assert deployment.executions()[f"refund {run_id}:call_0_0"] == 0


def test_a_large_refund_waits_for_two_support_leads_and_a_reload_changes_nothing(
    deployment: Stack, policy_file: Path
) -> None:
    run_id = start(deployment, "refund_large")
    deployment.wait_status(run_id, RunStatus.WAITING_FOR_APPROVAL)
    view: Any = run_view(deployment.service, deployment.run(run_id))
    (call,) = view["pending"]["calls"]
    assert (call["approvers"], call["quorum"]) == (["support-leads"], 2)
    assert call["policy"]["rule"] == "refund-over-100-needs-two-leads"
    suspended: Any = next(e for e in deployment.service.events(run_id) if e.kind == "suspended")
    assert suspended.payload["calls"][0]["policy"]["sha256"] == call["policy"]["sha256"]

    # the file now lets every refund run: the waiting turn keeps the verdict it was given
    policy_file.write_text(ALL_RUN)
    outsider = Principal.of_client("desk", frozenset({"support"}), "sam")
    with pytest.raises(ForbiddenError):
        approve(deployment, run_id, outsider)
    assert approve(deployment, run_id, lead("lena")) == "partial"
    assert approve(deployment, run_id, lead("lena")) == "duplicate"  # one principal counts once
    assert deployment.run(run_id).status is RunStatus.WAITING_FOR_APPROVAL
    assert deployment.executions()[f"refund {run_id}:call_0_0"] == 0
    assert approve(deployment, run_id, lead("lars")) == "recorded"
    run = deployment.wait_status(run_id, RunStatus.COMPLETED)
    assert run.output == "the tool said: refunded 25000 cents on order 17"
    decided: Any = [e.payload for e in deployment.service.events(run_id) if e.kind == "decision"]
    assert decided[0]["policy"]["call_0_0"]["rule"] == "refund-over-100-needs-two-leads"
    assert decided[0]["approved_by"] == ["lena", "lars"]
    assert deployment.executions()[f"refund {run_id}:call_0_0"] == 1

    # a new run is judged by the reloaded file
    again = start(deployment, "refund_large")
    deployment.wait_status(again, RunStatus.COMPLETED)
    decisions = [e.payload for e in deployment.service.events(again) if e.kind == "decision"]
    assert [d["rule"] for d in decisions] == ["all-refunds-run"]


CORP = """\
[[rules]]
name = "corp-notes-run"
tool = "send_note"
verdict = "allow"
when = [{ path = "to", op = "regex", value = '^([a-zA-Z0-9._-]+)*@corp\\.com$' }]
"""


def test_a_backtracking_pattern_is_judged_on_re2_and_the_worker_names_its_file(
    make_stack: StackFactory, postgres_url: str, shared_redis: str, tmp_path: Path
) -> None:
    path = tmp_path / "corp.toml"
    path.write_text(CORP)
    stack = make_stack(
        AIRLOCK_DATABASE_URL=postgres_url,
        AIRLOCK_BROKER_URL=shared_redis,
        AIRLOCK_POLICY=str(path),
    )
    worker = stack.worker(airlock=True)  # -P gevent -c 200: one stuck call stops them all
    sha256 = hashlib.sha256(CORP.encode()).hexdigest()
    assert f"AIRLOCK_POLICY: {path.resolve()} loaded, sha256 {sha256}" in worker.output()
    hostile, _ = stack.service.start_run("corp_note_hostile", "write to corp")
    plain, _ = stack.service.start_run("corp_note", "write to corp")
    stack.wait_status(hostile.id, RunStatus.WAITING_FOR_APPROVAL)
    assert stack.wait_status(plain.id, RunStatus.COMPLETED).output == "done"
    view: Any = run_view(stack.service, stack.run(hostile.id))
    (call,) = view["pending"]["calls"]
    assert call["arguments"]["to"] == "a" * 42 + "!"
    assert call["policy"]["rule"] == NO_RULE
    decisions = [e.payload for e in stack.service.events(plain.id) if e.kind == "decision"]
    assert [d["rule"] for d in decisions] == ["corp-notes-run"]
