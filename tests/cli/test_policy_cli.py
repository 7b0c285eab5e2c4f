"""``airlock policy check|test|explain``, run as the command is. CI runs
``airlock policy test`` on examples/policy_cases.toml here."""

from __future__ import annotations

from pathlib import Path

from airlock.persistence.db import make_engine
from airlock.persistence.store import RunStore
from airlock.workers.service import Service
from airlock.workers.service.policy_file import PolicyHolder
from airlock.workers.service.registry import Registry
from tests.cli.test_cli import ROOT, airlock, clean_env

EXAMPLE = ROOT / "examples" / "policy.toml"
CASES = ROOT / "examples" / "policy_cases.toml"


def test_the_examples_policy_passes_its_own_cases(tmp_path: Path) -> None:
    result = airlock("policy", "test", str(CASES), "--policy", str(EXAMPLE),
                     env=clean_env(), cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "7 passed, 0 failed" in result.stdout
    assert airlock("policy", "check", str(EXAMPLE), env=clean_env(), cwd=tmp_path).returncode == 0


def test_a_mismatch_fails_naming_the_case_and_its_line(tmp_path: Path) -> None:
    cases = tmp_path / "cases.toml"
    cases.write_text(
        '[[cases]]\nname = "huge"\nagent = "support"\ntool = "refund"\n'
        'arguments = { amount_cents = 900_000 }\nexpect = "allow"\n'
    )
    env = clean_env(AIRLOCK_POLICY=str(EXAMPLE))
    result = airlock("policy", "test", str(cases), env=env, cwd=tmp_path)
    assert result.returncode == 1
    assert "FAIL huge" in result.stdout
    assert 'line 1: expected allow, got deny by rule "refund-over-5000-refused"' in result.stdout


def test_check_names_the_line_of_an_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('version = 1\n\n[[rules]]\nname = "x"\nverdict = "deny"\n')
    result = airlock("policy", "check", str(bad), env=clean_env(), cwd=tmp_path)
    assert result.returncode == 2
    assert f'{bad}: line 5: rule "x": a deny needs a reason' in result.stderr


def test_check_names_the_line_of_a_regex_re2_cannot_run(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(
        '[[rules]]\nname = "corp"\ntool = "send_email"\nverdict = "allow"\n'
        'when = [{ path = "to", op = "regex", value = \'@corp(?=\\.com$)\' }]\n'
    )
    result = airlock("policy", "check", "--policy", str(bad), env=clean_env(), cwd=tmp_path)
    assert result.returncode == 2
    assert f"{bad}: line 5: to regex: lookaround is not supported" in result.stderr


def test_check_warns_of_a_prefix_whose_meaning_could_surprise(tmp_path: Path) -> None:
    path = tmp_path / "prefix.toml"
    path.write_text(
        '[[rules]]\nname = "data"\ntool = "write_file"\nverdict = "allow"\n'
        'when = [{ path = "path", op = "prefix", value = "/srv/data" }]\n'
    )
    result = airlock("policy", "check", str(path), env=clean_env(), cwd=tmp_path)
    assert result.returncode == 1
    assert "line 1: rule \"data\" at path: prefix '/srv/data' also matches" in result.stdout


def test_check_warns_of_a_shadowed_rule(tmp_path: Path) -> None:
    shadowed = tmp_path / "shadowed.toml"
    shadowed.write_text(
        '[[rules]]\nname = "all"\nverdict = "allow"\n\n'
        '[[rules]]\nname = "refunds"\ntool = "refund"\nverdict = "allow"\n'
    )
    result = airlock("policy", "check", str(shadowed), env=clean_env(), cwd=tmp_path)
    assert result.returncode == 1
    assert 'line 5: rule "refunds" is shadowed by rule "all" (line 1)' in result.stdout


def test_a_bad_policy_file_refuses_to_start_naming_the_variable_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[[rules]]\nname = "x"\nverdict = "maybe"\n')
    result = airlock("stats", env=clean_env(AIRLOCK_POLICY=str(bad)), cwd=tmp_path)
    assert result.returncode == 2
    assert "AIRLOCK_POLICY" in result.stderr and "line 3" in result.stderr


def test_explain_says_which_rule_decided_and_why_the_earlier_did_not(
    sqlite_url: str, tmp_path: Path
) -> None:
    service = Service(
        store=RunStore(make_engine(sqlite_url)),
        registry=Registry.from_paths("tests.integration.agents:AGENTS"),
        enqueue=lambda run_id, delay=None: None,
        policy=PolicyHolder.load(EXAMPLE),
    )
    run, _ = service.start_run("refund_large", "refund")
    service.run_segment(run.id, "cli-test")
    service.store.engine.dispose()
    env = clean_env(
        AIRLOCK_DATABASE_URL=sqlite_url,
        AIRLOCK_HOME=str(tmp_path / "home"),
        AIRLOCK_AGENTS="tests.integration.agents:AGENTS",
        AIRLOCK_POLICY=str(EXAMPLE),
    )
    result = airlock("policy", "explain", run.id, "call_0_0", env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert 'recorded: rule "refund-over-100-needs-two-leads" (this file)' in result.stdout
    assert any('skipped deny  "refund-over-5000-refused"' in line
               and "not amount_cents > 500000" in line for line in lines)  # fmt: skip
    assert any('matched ask   "refund-over-100-needs-two-leads"' in line for line in lines)
    unknown = airlock("policy", "explain", run.id, "call_9", env=env, cwd=tmp_path)
    assert unknown.returncode == 4 and "made no call 'call_9'" in unknown.stderr
    del env["AIRLOCK_POLICY"]  # the file named instead
    named = airlock("policy", "explain", run.id, "--policy", str(EXAMPLE), env=env, cwd=tmp_path)
    assert named.returncode == 0, named.stdout + named.stderr
    assert 'recorded: rule "refund-over-100-needs-two-leads" (this file)' in named.stdout
    positional = airlock("policy", "explain", run.id, str(EXAMPLE), env=env, cwd=tmp_path)
    assert positional.returncode == 2
    assert f"{EXAMPLE} is a file, not a call id: name the policy file with --policy" in (
        positional.stderr
    )
    none = airlock("policy", "explain", run.id, env=env, cwd=tmp_path)
    assert none.returncode == 2 and "name one (--policy FILE), or set AIRLOCK_POLICY" in none.stderr
