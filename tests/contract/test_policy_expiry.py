"""A policy rule's expiry on both databases: ``expires_in`` shortens the approval's time
and ``default = "cancel"`` is what expiry does, though the agent's own action is deny."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from airlock.persistence.db import make_engine
from airlock.persistence.domain import RunStatus
from airlock.persistence.store import RunStore, utcnow
from airlock.workers.service import Service
from airlock.workers.service.policy_file import PolicyHolder
from airlock.workers.service.registry import Registry

POLICY = """
[[rules]]
name = "refunds-wait-a-minute"
tool = "refund"
verdict = "ask"
expires_in = 60
default = "cancel"
"""


def test_the_rules_expiry_and_default_apply(db_url: str, tmp_path: Path) -> None:
    path = tmp_path / "policy.toml"
    path.write_text(POLICY)
    now = [utcnow()]

    def clock() -> object:
        return now[0]

    service = Service(
        store=RunStore(make_engine(db_url), clock=clock),  # type: ignore[arg-type]
        registry=Registry.from_paths("tests.integration.agents:AGENTS"),
        enqueue=lambda run_id, delay=None: None,
        clock=clock,  # type: ignore[arg-type]
        policy=PolicyHolder.load(path),
    )
    try:
        run, _ = service.start_run("refund_large", "refund")
        service.run_segment(run.id, "test")
        waiting = service.get_run(run.id)
        assert waiting.status is RunStatus.WAITING_FOR_APPROVAL
        assert waiting.expires_at is not None and waiting.suspended_at is not None
        assert waiting.expires_at - waiting.suspended_at <= timedelta(seconds=60)
        assert service.expire_approvals() == ()
        now[0] = now[0] + timedelta(seconds=61)
        assert service.expire_approvals() == (run.id,)
        assert service.get_run(run.id).status is RunStatus.CANCELLED
        expired = [e.payload for e in service.events(run.id) if e.kind == "expired"]
        assert expired == [{"action": "cancel"}]
    finally:
        service.store.engine.dispose()
