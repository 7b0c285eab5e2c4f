"""Judging a call is bounded by construction: regex conditions run on RE2 (linear in the
text), their programs are bounded when the file is read, the text they read is bounded
when a call is judged (a longer one is ``ask``, and ``explain`` says why), and globs are
bounded in length. The step budget is RE2's: each instruction at most once per byte."""

from __future__ import annotations

import fnmatch
import json
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from airlock.loop.policy import CallFacts, PolicyError, Regex, decide, judge, parse_policy
from airlock.loop.policy.bounds import (
    MAX_GLOB_LENGTH,
    MAX_MATCHED_BYTES,
    MAX_PATTERN_LENGTH,
    MAX_REGEX_SIZE,
    STEP_BUDGET,
)
from airlock.workers.service.policy_file import PolicyFileError, read_policy
from airlock.workers.service.policy_regex import Re2Regex, compile_re2

ROOT = Path(__file__).resolve().parents[2]
CATASTROPHIC = r"^([a-zA-Z0-9._-]+)*@corp\.com$"
"""Python's ``re`` takes about 2^42 steps to find that 43 characters do not match."""
HOSTILE = "a" * 42 + "!"


def regex_rule(pattern: str, verdict: str = "allow") -> str:
    reason = 'reason = "no"\n' if verdict == "deny" else ""
    return (
        f'[[rules]]\nname = "r"\ntool = "send"\nverdict = "{verdict}"\n{reason}'
        f'when = [{{ path = "to", op = "regex", value = {json.dumps(pattern)} }}]\n'
    )


def test_the_catastrophic_pattern_is_judged_on_re2(tmp_path: Path) -> None:
    """On Python's ``re`` this never ends (in a gevent worker, it froze every segment
    of the process); the timeout only guards against that hang."""
    path = tmp_path / "policy.toml"
    path.write_text(regex_rule(CATASTROPHIC))
    script = textwrap.dedent(f"""
        from pathlib import Path
        from airlock.loop.policy import CallFacts, judge
        from airlock.workers.service.policy_file import read_policy
        policy = read_policy(Path({str(path)!r}))
        print(judge(policy, CallFacts("a", "send", {{"to": {HOSTILE!r}}})).line())
        print(judge(policy, CallFacts("a", "send", {{"to": "pat.lee@corp.com"}})).line())
    """)
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    asked, allowed = done.stdout.splitlines()
    assert asked.startswith('ask by rule "(no rule matched)"')
    assert allowed.startswith('allow by rule "r"')
    (predicate,) = read_policy(path).rules[0].when
    assert isinstance(predicate.pattern, Re2Regex)


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [
        ("@corp(?=\\.com$)", "lookaround is not supported"),
        ("(?<!x)@corp", "lookaround is not supported"),
        ("^(\\w)\\1$", "backreferences are not supported"),
        ("^a*+$", "possessive repetitions are not supported"),
        ("(?>a+)b", "atomic groups are not supported"),
        ("corp\\.com\\Z", "write \\z for the end of the text"),
        ("(unclosed", "RE2 refuses it: missing )"),
        (".{1000}", f"compiles to 16008 instructions, more than the {MAX_REGEX_SIZE}"),
        ("a" * (MAX_PATTERN_LENGTH + 1), f"is {MAX_PATTERN_LENGTH + 1} characters long"),
    ],
)
def test_a_pattern_re2_cannot_run_refuses_the_file_naming_the_line(
    pattern: str, reason: str, tmp_path: Path
) -> None:
    path = tmp_path / "policy.toml"
    path.write_text("version = 1\n\n" + regex_rule(pattern))
    with pytest.raises(PolicyFileError) as info:
        read_policy(path)
    assert str(info.value).startswith(f"{path}: line 7: to regex: ")
    assert reason in str(info.value)


def test_without_an_engine_a_regex_is_refused_not_run_on_python_re(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(PolicyError, match="line 5: to regex: a regex condition needs a linear"):
        parse_policy(regex_rule("@corp\\.com$"))
    path = tmp_path / "policy.toml"
    path.write_text(regex_rule("@corp\\.com$"))
    monkeypatch.setitem(sys.modules, "re2", None)  # google-re2 not installed
    with pytest.raises(PolicyFileError, match=r"line 5: to regex: RE2 \(the google-re2 package"):
        read_policy(path)


def test_re2_matches_text_as_python_would_for_the_plain_cases() -> None:
    policy = parse_policy(regex_rule("^[^@]+@corp\\.com$"), compile_re2)
    for address, verdict in [
        ("pat@corp.com", "allow"),
        ("pât.lée@corp.com", "allow"),
        ("pat@corp.com.evil.test", "ask"),
        ("pat@corp.com\n", "ask"),  # RE2's $ is the end of the text (Python's: or a \n)
        ("a@b@corp.com", "ask"),
    ]:
        assert judge(policy, CallFacts("a", "send", {"to": address})).verdict == verdict, address


def test_a_value_longer_than_the_bound_cannot_be_judged_and_explain_says_why() -> None:
    policy = parse_policy(regex_rule("@corp\\.com$", verdict="deny"), compile_re2)
    at_bound = "x" * (MAX_MATCHED_BYTES - len("@corp.com")) + "@corp.com"
    assert judge(policy, CallFacts("a", "send", {"to": at_bound})).verdict == "deny"
    for too_long, why in [
        ("x" + at_bound, f"is {MAX_MATCHED_BYTES + 1} characters long, more than the "
                         f"{MAX_MATCHED_BYTES} bytes a regex condition reads"),
        ("é" * (MAX_MATCHED_BYTES // 2) + "@corp.com", "bytes long in UTF-8"),
        ("\ud800@corp.com", "not valid Unicode text"),
    ]:  # fmt: skip
        got, steps = decide(policy, CallFacts("a", "send", {"to": too_long}))
        assert (got.verdict, got.rule) == ("ask", "r")
        assert got.error is not None and why in got.error
        assert [(s.outcome, why in s.why) for s in steps] == [("error", True)]


def test_a_glob_is_bounded_and_fnmatch_commits_to_each_star() -> None:
    long = "x" * (MAX_GLOB_LENGTH + 1)
    with pytest.raises(PolicyError, match=f"line 3: a tool glob is at most {MAX_GLOB_LENGTH}"):
        parse_policy(f'[[rules]]\nname = "r"\ntool = "{long}"\nverdict = "ask"\n')
    # the Python this runs on matches a glob's stars in atomic groups (no backtracking
    # into them): a match costs the glob's length times the name's, not a power of it
    assert fnmatch.translate("*a*b*c").count("(?>") == 2


@dataclass
class Counting:
    """RE2, counting the steps each search may take: its program size times the bytes
    of text it is given (plus one, for the end)."""

    steps: list[int] = field(default_factory=list)
    found: list[bool] = field(default_factory=list)

    def compile(self, source: str) -> Regex:
        return _Counted(compile_re2(source), self)


@dataclass
class _Counted:
    inner: Regex
    counter: Counting

    @property
    def size(self) -> int:
        return self.inner.size

    def search(self, text: bytes) -> bool:
        self.counter.steps.append(self.inner.size * (len(text) + 1))
        found = self.inner.search(text)
        self.counter.found.append(found)
        return found


ATOMS = ["a", "b", "@", "\\.", ".", "(?s:.)", "\\d", "\\w", "\\s", "\\pL", "[a-z.]", "[^@]"]
QUANTIFIERS = ["", "", "*", "+", "?", "*?", "{2}", "{0,30}", "{3,}", "{100}", "{1000}"]


@st.composite
def patterns(draw: st.DrawFn) -> str:
    """Patterns of the shapes that backtrack without end (nested and adjacent
    repetitions, alternations of overlapping branches), some too large to be accepted,
    and arbitrary text."""
    if draw(st.integers(0, 9)) == 0:
        return draw(st.text(max_size=30))
    atom = st.builds(str.__add__, st.sampled_from(ATOMS), st.sampled_from(QUANTIFIERS))
    pieces = st.recursive(
        atom,
        lambda inner: st.one_of(
            st.builds(lambda p, q: f"({p}){q}", inner, st.sampled_from(QUANTIFIERS)),
            st.builds(lambda a, b: f"(?:{a}|{b})", inner, inner),
            st.lists(inner, min_size=2, max_size=4).map("".join),
        ),
        max_leaves=8,
    )
    anchored = draw(st.booleans())
    body = draw(pieces)
    return f"^{body}$" if anchored else body


@st.composite
def arguments(draw: st.DrawFn) -> tuple[str, int]:
    """A text and how many times it is repeated: short ones, and up to and beyond the
    bound (built in the test: a failure's report stays short)."""
    unit = draw(st.text(alphabet="ab@.!é漢 \n", min_size=1, max_size=4))
    if draw(st.integers(0, 3)) == 0:
        return unit, draw(st.integers(0, 20))
    bound = MAX_MATCHED_BYTES // len(unit.encode())
    return unit, draw(st.integers(bound - 2, bound + 2))


@settings(max_examples=150, deadline=None)
@given(patterns(), arguments())
def test_any_accepted_pattern_judges_any_argument_within_the_step_budget(
    pattern: str, repeated: tuple[str, int]
) -> None:
    argument = repeated[0] * repeated[1]
    counting = Counting()
    try:
        policy = parse_policy(regex_rule(pattern), counting.compile)
    except PolicyError:
        event("refused at load")
        return  # never judged
    got = judge(policy, CallFacts("a", "send", {"to": argument}))
    assert all(steps <= STEP_BUDGET for steps in counting.steps), counting.steps
    event("judged a text beyond the bound" if counting.steps == [] else "judged by RE2")
    if len(argument.encode()) > MAX_MATCHED_BYTES:
        assert counting.steps == []  # the engine never saw it
        assert got.verdict == "ask" and "more than the" in (got.error or "")
    else:
        assert len(counting.steps) == 1  # judged by the engine given, and only by it
        assert got.verdict == ("allow" if counting.found == [True] else "ask")
