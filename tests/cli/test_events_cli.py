"""``airlock runs events RUN``: a table a person reads (the time with its date, the kind,
one line of what happened), ``--json`` for the raw events (issue 47, item 4: it printed
each payload's raw JSON, and a time with no date)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from airlock.persistence.domain import RunStatus
from airlock.workers.cli.events import when
from airlock.workers.service import Service
from airlock.workers.service.decisions import DecisionBody
from airlock.workers.service.principals import Principal
from airlock.workers.service.views import event_view
from tests.cli.test_cli import airlock, cli_env, service, waiting

__all__ = ["cli_env", "service"]  # the fixtures, shared with test_cli.py


def denied(service: Service) -> str:
    run_id = waiting(service)
    digest = service.get_run(run_id).turn_digest or ""
    body = DecisionBody.model_validate(
        {"turn_digest": digest, "decision": "deny", "reason": "not this one\nnor any other"}
    )
    service.record_decision(run_id, body, Principal.operator("olga", os_user="olga"))
    service.run_segment(run_id, "cli-test")
    assert service.get_run(run_id).status is RunStatus.COMPLETED
    return run_id


def test_events_are_a_table_with_dates_kinds_and_one_line_each(
    cli_env: dict[str, str], tmp_path: Path, service: Service
) -> None:
    run_id = denied(service)
    shown = airlock("runs", "events", run_id, env=cli_env, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    events = service.events(run_id)
    lines = shown.stdout.splitlines()
    assert "time (UTC)" in shown.stdout and "what happened" in shown.stdout
    rows = [line for line in lines if re.match(r"\W*\d+\W", line)]
    assert len(rows) == len(events), shown.stdout  # one line each
    for event, row in zip(events, rows, strict=True):
        assert re.match(rf"\W*{event.seq}\W", row), row
        assert when(event.created_at) in row and f" {event.kind} " in row, row
        assert re.search(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\.\d{3}", row)
    assert '{"' not in shown.stdout  # no payload's raw JSON
    denies = [row for row in rows if row.split("│")[3].strip() == "decision"]
    assert len(denies) == 1, shown.stdout
    deny = denies[0]
    assert "deny by olga via cli: not this one nor any other" in deny  # one line
    assert any("send_email → denied" in line or "send_email" in line for line in lines)


def test_json_is_the_events_as_the_api_gives_them(
    cli_env: dict[str, str], tmp_path: Path, service: Service
) -> None:
    run_id = denied(service)
    raw = airlock("runs", "events", run_id, "--json", env=cli_env, cwd=tmp_path)
    assert raw.returncode == 0, raw.stderr
    expected = [event_view(e) for e in service.events(run_id)]
    assert json.loads(raw.stdout) == json.loads(json.dumps(expected))


def test_followed_events_carry_their_date_too(
    cli_env: dict[str, str], tmp_path: Path, service: Service
) -> None:
    run_id = denied(service)
    followed = airlock("runs", "events", run_id, "--follow", env=cli_env, cwd=tmp_path)
    assert followed.returncode == 0, followed.stderr
    events = service.events(run_id)
    assert len(followed.stdout.splitlines()) == len(events)
    for event, line in zip(events, followed.stdout.splitlines(), strict=True):
        assert when(event.created_at) in line and event.kind in line
