"""Approval policy as a file operators own (``AIRLOCK_POLICY``): pure, no I/O.

Parse with :func:`parse_policy` (given the linear-time engine regex conditions run on:
:data:`CompileRegex`), judge a call with :func:`judge`; ``decide`` also says why each rule
tried did not match, ``lint`` warns of dead rules, ``run_cases`` checks expected verdicts.
"""

from airlock.loop.policy.bounds import CompileRegex, Regex
from airlock.loop.policy.cases import CaseResult, run_cases
from airlock.loop.policy.evaluate import CallFacts, Step, decide, judge
from airlock.loop.policy.lint import lint
from airlock.loop.policy.parse import PolicyError, parse_policy
from airlock.loop.policy.rules import Policy, Predicate, Rule
from airlock.loop.policy.run import RunPolicy
from airlock.loop.policy.verdicts import NO_RULE, Judgement, strictest

__all__ = [
    "NO_RULE",
    "CallFacts",
    "CaseResult",
    "CompileRegex",
    "Judgement",
    "Policy",
    "PolicyError",
    "Predicate",
    "Regex",
    "Rule",
    "RunPolicy",
    "Step",
    "decide",
    "judge",
    "lint",
    "parse_policy",
    "run_cases",
    "strictest",
]
