"""One duration parser for every duration (issue 47, item 10; DESIGN §6): ASCII digits
and a unit, wherever a duration is read."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from airlock.loop.durations import duration_seconds, parse_seconds
from airlock.loop.policy import PolicyError
from airlock.loop.policy.parse import parse_policy
from airlock.workers.service.decisions import GrantBody

ROOT = Path(__file__).resolve().parents[2]
NOT_ASCII = [
    "\u0663d",
    "3\u0661h",
    "\uff13d",
    "\u09e9m",
    "\U0001d7d1s",
]  # Arabic-Indic, fullwidth, Bengali, bold


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("30m", 1800), ("8h", 28800), ("2d", 172800), ("1.5h", 5400),
     (" 30 m ", 1800), ("0s", 0), (3600, 3600)],
)  # fmt: skip
def test_durations_read(text: object, seconds: float) -> None:
    assert parse_seconds(text) == seconds


@pytest.mark.parametrize(
    "text", [*NOT_ASCII, "30", "d", "1w", "30d\n1d", "-1d", "1e3s", "", True, -5, 1.5, None]
)
def test_anything_else_is_refused_by_name(text: object) -> None:
    with pytest.raises(ValueError, match="is not a duration"):
        parse_seconds(text)
    assert duration_seconds(text) is None


def test_a_positive_duration_excludes_zero_and_an_int_beyond_a_float_is_inf() -> None:
    assert duration_seconds("0s") is None and duration_seconds(0) is None
    assert parse_seconds(10**400) == math.inf


@pytest.mark.parametrize("text", NOT_ASCII)
def test_a_grant_and_the_policy_file_refuse_what_the_cli_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        GrantBody(scope="call", expires_in=text)
    rule = f'[[rules]]\nname = "r"\ntool = "t"\nverdict = "ask"\nexpires_in = "{text}"\n'
    with pytest.raises(PolicyError, match="expires_in"):
        parse_policy(f"version = 1\n{rule}")


def test_no_module_parses_a_duration_of_its_own() -> None:
    """A unit pattern (``[smhd]`` or ``s|m|h|d``) appears in the one parser only."""
    unit = re.compile(r"\[smhd\]|s\|m\|h\|d")
    found = [
        str(path.relative_to(ROOT))
        for folder in ("loop", "persistence", "providers", "workers")
        for path in (ROOT / folder).rglob("*.py")
        if unit.search(path.read_text())
    ]
    assert found == ["loop/durations.py"]
