"""``prefix`` conditions: a prefix starting with ``/`` compares normalised absolute paths
(``/srv/data/../etc/passwd`` is not under ``/srv/data/``; a relative path cannot be
judged); any other prefix is plain text; ``check`` warns where either could surprise."""

from __future__ import annotations

import json

import pytest

from airlock.loop.policy import CallFacts, PolicyError, decide, judge, lint, parse_policy


def prefix_rule(prefix: str, verdict: str = "allow", name: str = "r") -> str:
    reason = 'reason = "no"\n' if verdict == "deny" else ""
    return (
        f'[[rules]]\nname = "{name}"\ntool = "write_file"\nverdict = "{verdict}"\n{reason}'
        f'when = [{{ path = "path", op = "prefix", value = {json.dumps(prefix)} }}]\n'
    )


def write_file(path: str) -> CallFacts:
    return CallFacts("a", "write_file", {"path": path})


@pytest.mark.parametrize(
    ("prefix", "value", "holds"),
    [
        ("/srv/data/", "/srv/data/reports/q1.csv", True),
        ("/srv/data/", "/srv/data/../etc/passwd", False),
        ("/srv/data/", "/srv/data/reports/../../../etc/passwd", False),
        ("/srv/data/", "/srv/data/reports/../q1.csv", True),
        ("/srv/data/", "/srv/./data//q1.csv", True),
        ("/srv/data/", "//srv/data/q1.csv", True),
        ("/srv/data/", "/srv/data", True),  # the folder itself
        ("/srv/data/", "/srv/data/.", True),
        ("/srv/data/", "/srv/database/q1.csv", False),
        ("/srv/data", "/srv/database/q1.csv", True),  # a prefix of the name: check warns
        ("/srv/data", "/srv/data/q1.csv", True),
        ("/", "/etc/passwd", True),
        ("acct_", "acct_9", True),
        ("acct_", "acct_/../x", True),  # plain text: nothing is resolved
        ("acct_", "/acct_9", False),
    ],
)  # fmt: skip
def test_a_path_prefix_compares_normalised_paths(prefix: str, value: str, holds: bool) -> None:
    got = judge(parse_policy(prefix_rule(prefix)), write_file(value))
    assert got.verdict == ("allow" if holds else "ask"), got


def test_a_deny_on_a_folder_catches_a_path_that_climbs_into_it() -> None:
    policy = parse_policy(
        prefix_rule("/etc/", "deny", "no-etc")
        + prefix_rule("/", "allow", "anywhere-else").replace("[[rules]]", "\n[[rules]]")
    )
    for sneaky in ("/srv/data/../../etc/passwd", "//etc/shadow", "/etc", "/./etc/hosts"):
        assert judge(policy, write_file(sneaky)).rule == "no-etc", sneaky
    assert judge(policy, write_file("/srv/data/q1.csv")).verdict == "allow"


@pytest.mark.parametrize("value", ["etc/passwd", "../../etc/passwd", "", "~/notes"])
def test_a_relative_path_cannot_be_judged_by_a_path_prefix(value: str) -> None:
    got, steps = decide(parse_policy(prefix_rule("/srv/data/")), write_file(value))
    assert (got.verdict, got.rule) == ("ask", "r")
    assert "is not an absolute path" in (got.error or "")
    assert steps[0].outcome == "error"


@pytest.mark.parametrize(
    ("prefix", "written"),
    [("/srv/../etc/", "/etc/"), ("/srv//data/", "/srv/data/"), ("/srv/data/.", "/srv/data"),
     ("//srv/", "/srv/"), ("/srv/./data", "/srv/data")],
)  # fmt: skip
def test_a_path_prefix_not_normalised_is_refused_naming_the_line(prefix: str, written: str) -> None:
    with pytest.raises(PolicyError) as info:
        parse_policy(prefix_rule(prefix))
    assert info.value.line == 5
    assert f"path prefix: the path prefix {prefix!r} is not normalised" in info.value.reason
    assert f"write {written!r}" in info.value.reason


def test_check_warns_of_a_prefix_whose_meaning_could_surprise() -> None:
    text = "\n".join(
        prefix_rule(prefix, name=name)
        for name, prefix in [
            ("folder", "/srv/data/"),
            ("name-start", "/srv/data"),
            ("url", "https://api.example.com/public/"),
            ("plain", "acct_"),
            ("root", "/"),
        ]
    )
    warnings = [str(w) for w in lint(parse_policy(text))]
    assert warnings == [
        "line 7: rule \"name-start\" at path: prefix '/srv/data' also matches "
        "'/srv/data-old': end it with '/' to mean the folder and what is in it",
        "line 13: rule \"url\" at path: prefix 'https://api.example.com/public/' is compared "
        "as plain text ('..' in a value is not resolved): only a prefix that starts with '/' "
        "is compared as a path",
    ]
