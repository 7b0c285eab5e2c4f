from __future__ import annotations

import json
from pathlib import Path

import pytest

from airlock.loop import (
    SCHEMA_VERSION,
    ApprovalRequired,
    Approve,
    StateError,
    StateVersionError,
    SuspendedRunState,
    Termination,
    ToolLoop,
    Usage,
)
from tests.unit.agents import Recorder, answer, call, calls, make_agent

FIXTURES = Path(__file__).parent.parent / "fixtures" / "run_state"


def fixture_agent(rec: Recorder) -> object:
    return make_agent(
        [
            calls(call("lookup", q="42"), usage=(12, 3)),
            calls(
                call("lookup", q="42"),
                call("send_email", to="alice@example.com", body="Hello"),
                usage=(20, 5),
            ),
            answer("Mailed.", usage=(25, 2)),
        ],
        rec,
    )


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("v*.json")), ids=lambda p: p.stem)
def test_every_released_version_still_resumes(path: Path) -> None:
    state = SuspendedRunState.from_json(path.read_text())
    assert state.iterations == 2
    assert state.usage == Usage(32, 8)
    assert [c.name for c in state.pending_calls if c.requires_approval] == ["send_email"]
    rec = Recorder()
    result = ToolLoop().resume(fixture_agent(rec), state, Approve())  # type: ignore[arg-type]
    assert result.termination is Termination.COMPLETED
    assert result.output == "Mailed."
    assert (result.iterations, result.usage) == (3, Usage(57, 10))
    assert rec.calls == [
        (
            "send_email",
            {"to": "alice@example.com", "body": "Hello"},
            "0b9e7c8e-6f1e-4c55-9a51-2f6f5c1f1a01:call_1_1",
        )
    ]


def test_current_version_has_a_frozen_fixture() -> None:
    assert (FIXTURES / f"v{SCHEMA_VERSION}.json").exists()


def raw_fixture() -> dict[str, object]:
    loaded: dict[str, object] = json.loads((FIXTURES / f"v{SCHEMA_VERSION}.json").read_text())
    return loaded


def test_a_newer_version_is_refused_naming_both_versions() -> None:
    raw = raw_fixture()
    raw["schema_version"] = SCHEMA_VERSION + 1
    with pytest.raises(
        StateVersionError, match=rf"schema_version {SCHEMA_VERSION + 1}.*up to {SCHEMA_VERSION}"
    ):
        SuspendedRunState.from_json(json.dumps(raw))


@pytest.mark.parametrize("version", [None, 0, "1", True])
def test_a_missing_or_invalid_version_is_refused(version: object) -> None:
    raw = raw_fixture()
    raw["schema_version"] = version
    with pytest.raises(StateError, match="no valid schema_version"):
        SuspendedRunState.from_json(json.dumps(raw))


def test_tampered_arguments_are_refused() -> None:
    raw = raw_fixture()
    raw["pending_calls"][1]["arguments"]["to"] = "mallory@example.com"  # type: ignore[index]
    with pytest.raises(StateError, match="turn_digest does not match"):
        SuspendedRunState.from_json(json.dumps(raw))


def test_pending_calls_must_match_the_last_turn() -> None:
    raw = raw_fixture()
    transcript = raw["transcript"]
    transcript[-1]["tool_calls"][1]["arguments"]["to"] = "mallory@example.com"  # type: ignore[index]
    with pytest.raises(StateError, match="do not match the last turn"):
        SuspendedRunState.from_json(json.dumps(raw))


@pytest.mark.parametrize("blob", ["", "[1]", "{not json", '{"schema_version": 1}'])
def test_malformed_state_is_refused(blob: str) -> None:
    with pytest.raises(StateError):
        SuspendedRunState.from_json(blob)


def test_round_trip_is_lossless() -> None:
    rec = Recorder()
    with pytest.raises(ApprovalRequired) as info:
        ToolLoop().run(fixture_agent(rec), "Mail customer 42")  # type: ignore[arg-type]
    state = info.value.state
    assert SuspendedRunState.from_json(state.to_json()) == state
    assert SuspendedRunState.from_json(state.to_json().encode()) == state
