"""``airlock policy check|test|explain``: for the people who own the approval rules."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from airlock.workers.cli.app import app, require_run, service
from airlock.workers.cli.output import console, fail

if TYPE_CHECKING:
    from airlock.loop.policy import Policy
    from airlock.workers.service.policy_explain import Explanation

policy_app = typer.Typer(help="The approval policy file (AIRLOCK_POLICY).", no_args_is_help=True)
app.add_typer(policy_app, name="policy")

FileArgument = Annotated[
    Path | None, typer.Argument(help="The policy file (default: AIRLOCK_POLICY).")
]
PolicyOption = Annotated[
    Path | None, typer.Option("--policy", help="The policy file (default: AIRLOCK_POLICY).")
]


def _load(path: Path | None) -> tuple[Path, Policy]:
    """The file named, else AIRLOCK_POLICY's (read as a worker reads it: regex
    conditions on RE2)."""
    from airlock.workers.service.policy_file import PolicyFileError, read_policy
    from airlock.workers.service.settings import settings

    path = path or settings().policy
    if path is None:
        fail("no policy file: name one (--policy FILE), or set AIRLOCK_POLICY", 2)
    try:
        return path, read_policy(path)
    except PolicyFileError as exc:
        fail(str(exc), 2)


@policy_app.command("check")
def check(path: FileArgument = None, policy_file: PolicyOption = None) -> None:
    """Parse the policy file: name the line of an error (a regex RE2 cannot run among
    them); warn of a rule shadowed by an earlier one, one that can never match, or a
    prefix whose meaning could surprise (exit 1 when there are warnings)."""
    from airlock.loop.policy import lint

    if path is not None and policy_file is not None:
        fail("name the policy file once: FILE or --policy FILE", 2)
    path, policy = _load(path or policy_file)
    warnings = lint(policy)
    for warning in warnings:
        say(f"warning: {path}: {warning}")
    rules = len(policy.all_rules())
    say(f"{path}: {rules} rules, sha256 {policy.sha256}")
    if warnings:
        raise typer.Exit(1)


@policy_app.command("test")
def test(
    fixtures: Annotated[Path, typer.Argument(help="A TOML file of [[cases]].")],
    policy_file: PolicyOption = None,
) -> None:
    """Judge each case of FIXTURES and compare with its expected verdict; exit 1 on any
    mismatch (for CI)."""
    from airlock.loop.policy import PolicyError, run_cases
    from airlock.workers.service.policy_explain import schema_of

    _, policy = _load(policy_file)
    try:
        results = run_cases(policy, fixtures.read_text(encoding="utf-8"), schema_of)
    except (OSError, UnicodeDecodeError) as exc:
        fail(f"{fixtures}: cannot be read: {exc}", 2)
    except PolicyError as exc:
        fail(f"{fixtures}: {exc}", 2)
    failed = [r for r in results if not r.passed]
    for result in results:
        mark = "ok  " if result.passed else "FAIL"
        say(f"{mark} {result.name}: {result.got.line()}")
        for problem in result.problems:
            say(f"      line {result.line}: {problem}")
    say(f"{len(results) - len(failed)} passed, {len(failed)} failed")
    if failed:
        raise typer.Exit(1)


@policy_app.command("explain")
def explain(
    run_id: Annotated[str, typer.Argument(help="The run.")],
    call: Annotated[
        str | None, typer.Argument(help="One call id (default: every gated call).")
    ] = None,
    policy_file: PolicyOption = None,
) -> None:
    """Which rule decides each gated call of RUN (or CALL), and why each rule tried
    before it did not match; with the verdict recorded when the call was judged."""
    from airlock.workers.service.policy_explain import explain_run

    if policy_file is None and call is not None and Path(call).is_file():
        fail(f"{call} is a file, not a call id: name the policy file with --policy {call}", 2)
    _, policy = _load(policy_file)
    run = require_run(run_id)
    svc = service()
    try:
        found = explain_run(run, svc.events(run.id), svc.registry, policy, call)
    except LookupError as exc:
        fail(str(exc), 4)
    if not found:
        say(f"run {run.id} made no call that needs approval")
    for explanation in found:
        _print(explanation, policy)


def _print(found: Explanation, policy: Policy) -> None:
    say(f"{found.call_id} {found.tool} {json.dumps(dict(found.arguments))}")
    recorded = found.recorded
    if recorded is not None:
        same = recorded.get("sha256") == policy.sha256
        note = "this file" if same else f"another file, sha256 {recorded.get('sha256')}"
        say(f'  recorded: rule "{recorded.get("rule")}" ({note})')
    for step in found.steps:
        rule = step.rule
        where = f"line {rule.line}" + ("" if rule.layer == "global" else f", agent {rule.layer}")
        say(f'  {step.outcome:>7} {rule.verdict:<5} "{rule.name}" ({where}): {step.why}')
    say(f"  decides: {found.judged.line()}")


def say(line: str) -> None:
    console.print(line, highlight=False, markup=False, soft_wrap=True)
