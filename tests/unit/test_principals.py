"""Who may decide what, as pure code: the tools' and agents' approval rules, the
principals' roles, self-approval and quorum (``airlock.workers.service.principals``), and the
settings
that configure principals."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from airlock.loop import (
    Agent,
    ApprovalRequired,
    Approve,
    Deny,
    Edit,
    Effect,
    ScriptedModel,
    SuspendedRunState,
    ToolLoop,
    tool,
)
from airlock.persistence.db import ConfigurationError
from airlock.workers.service.principals import (
    AIRLOCK,
    NOBODY,
    ForbiddenError,
    Principal,
    Requester,
    authorise,
)
from airlock.workers.service.settings import Settings, check_secrets, load_settings


@tool(effect=Effect.WRITE, approvers=["payments"])
def pay(invoice: str) -> str:
    return f"paid {invoice}"


@tool(effect=Effect.WRITE, approvers=["treasury", "finance"], quorum=2)
def transfer(amount: int) -> str:
    return f"moved {amount}"


@tool(effect=Effect.WRITE)
def note(text: str) -> str:
    return text


@tool
def lookup(q: str) -> str:
    return q


def agent(**kwargs: Any) -> Agent:
    steps = [
        {
            "tool_calls": [
                {"name": "pay", "arguments": {"invoice": "I-1"}},
                {"name": "transfer", "arguments": {"amount": 5}},
                {"name": "note", "arguments": {"text": "hi"}},
                {"name": "lookup", "arguments": {"q": "x"}},
            ]
        },
        {"content": "done"},
    ]
    return Agent(
        name="desk",
        model=ScriptedModel(steps),  # type: ignore[arg-type]
        tools=[pay, transfer, note, lookup],
        **kwargs,
    )


def waiting(a: Agent) -> SuspendedRunState:
    with pytest.raises(ApprovalRequired) as info:
        ToolLoop().run(a, "go", run_id="run-1")
    return info.value.state


def token(sub: str, *roles: str) -> Principal:
    return Principal(id=sub, method="oidc", roles=frozenset(roles), issuer="https://idp")


def test_tools_declare_roles_and_quorum_and_nonsense_is_refused() -> None:
    assert (pay.approvers, pay.quorum) == (("payments",), 1)
    assert (transfer.approvers, transfer.quorum) == (("treasury", "finance"), 2)
    assert (note.approvers, note.quorum) == ((), 1)
    for bad in ({"quorum": 0}, {"quorum": True}, {"approvers": "payments"}, {"approvers": [""]}):
        with pytest.raises(ValueError, match="tool 'x'"):
            tool(name="x", effect=Effect.WRITE, **bad)(lambda: "y")
    with pytest.raises(ValueError, match="agent 'desk'"):
        agent(approvers=[" "])


def test_an_agents_roles_apply_to_its_tools_that_name_none() -> None:
    a = agent(approvers=["ops"])
    assert a.approval_of("note") == (("ops",), 1)
    assert a.approval_of("pay") == (("payments",), 1)
    assert a.approval_of("transfer") == (("treasury", "finance"), 2)
    assert a.approval_of("gone") == (("ops",), 1)


def test_a_principal_needs_a_role_of_every_call_it_decides() -> None:
    a = agent()
    state = waiting(a)
    with pytest.raises(
        ForbiddenError, match=r"sam holds none .* calls call_0_0 \(pay: payments\); call_0_1"
    ):
        authorise(token("sam", "support"), a, state, Approve(), requester=NOBODY)
    # a deny needs the roles too
    with pytest.raises(ForbiddenError):
        authorise(token("sam", "payments"), a, state, Deny("no"), requester=NOBODY)
    both = token("fay", "payments", "finance")
    authority = authorise(both, a, state, Approve(), requester=NOBODY)
    assert authority.covered == ("call_0_0", "call_0_1", "call_0_2")  # not the read
    assert authority.roles == ["finance", "payments"]
    assert authority.approves and authority.quorum == 2


def test_per_call_decisions_cover_only_what_they_name_and_a_deny_needs_no_quorum() -> None:
    a = agent()
    state = waiting(a)
    payments = token("pat", "payments")
    # pat decides pay; the others stay undecided, which check_decisions refuses elsewhere,
    # so here a whole-turn deny by someone holding every role
    only_pay: dict[str, Approve | Deny | Edit] = {
        "call_0_0": Approve(),
        "call_0_1": Deny("no"),
        "call_0_2": Deny("no"),
    }
    with pytest.raises(ForbiddenError, match="call_0_1"):
        authorise(payments, a, state, only_pay, requester=NOBODY)
    everyone = token("root", "payments", "treasury")
    denied = authorise(everyone, a, state, Deny("no"), requester=NOBODY)
    assert not denied.approves and denied.quorum == 1
    edit: dict[str, Approve | Deny | Edit] = {
        "call_0_0": Deny("no"),
        "call_0_1": Edit({"amount": 1}),
        "call_0_2": Deny("no"),
    }
    edited = authorise(everyone, a, state, edit, requester=NOBODY)
    assert edited.approves and edited.quorum == 2


def test_the_requester_may_not_approve_unless_the_agent_allows_it() -> None:
    a = agent(approvers=["ops"])
    state = waiting(a)
    alice = token("alice", "payments", "treasury", "ops")
    with pytest.raises(ForbiddenError, match="alice requested this run"):
        authorise(alice, a, state, Approve(), requester=Requester("alice"))
    assert not authorise(alice, a, state, Deny("no"), requester=Requester("alice")).approves
    assert authorise(alice, a, state, Approve(), requester=Requester("bob")).approves
    lenient = agent(approvers=["ops"], self_approval=True)
    assert authorise(
        alice, lenient, waiting(lenient), Approve(), requester=Requester("alice")
    ).approves


def test_the_operator_holds_every_role_and_the_audit_says_how_each_was_verified() -> None:
    a = agent()
    state = waiting(a)
    operator = Principal.operator("ops-bob", os_user="bob")
    assert authorise(operator, a, state, Approve(), requester=NOBODY).quorum == 2
    assert operator.auth([]) == {"method": "cli", "os_user": "bob", "roles": []}
    client = Principal.of_client("desk", frozenset({"payments"}), None)
    assert client.id == "client:desk" and not client.names_itself
    assert client.auth(["payments"]) == {
        "method": "webhook",
        "client": "desk",
        "roles": ["payments"],
    }
    assert token("t").auth([]) == {"method": "oidc", "issuer": "https://idp", "roles": []}
    assert AIRLOCK.source == "expiry" and operator.source == "cli"


SECRET_A = "whsec_" + base64.b64encode(b"client-a-secret-0123456789abcdef").decode()
SECRET_B = "whsec_" + base64.b64encode(b"client-b-secret-0123456789abcdef").decode()


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"AIRLOCK_OIDC_ISSUER": "https://idp"}, "AIRLOCK_OIDC_AUDIENCE"),
        ({"AIRLOCK_OIDC_AUDIENCE": "airlock"}, "AIRLOCK_OIDC_ISSUER"),
        (
            {"AIRLOCK_OIDC_ISSUER": "idp", "AIRLOCK_OIDC_AUDIENCE": "a"},
            "AIRLOCK_OIDC_ISSUER",
        ),
        (
            {
                "AIRLOCK_OIDC_ISSUER": "https://idp",
                "AIRLOCK_OIDC_AUDIENCE": "a",
                "AIRLOCK_OIDC_ALGORITHMS": "HS256",
            },
            "AIRLOCK_OIDC_ALGORITHMS",
        ),
        ({"AIRLOCK_APPROVAL_CLIENTS": "{not json"}, "AIRLOCK_APPROVAL_CLIENTS"),
        ({"AIRLOCK_APPROVAL_CLIENTS": '{"a b": {"secret": "x"}}'}, "AIRLOCK_APPROVAL_CLIENTS"),
        ({"AIRLOCK_APPROVAL_CLIENTS": '{"a": {"roles": []}}'}, "AIRLOCK_APPROVAL_CLIENTS"),
        (
            {
                "AIRLOCK_WEBHOOK_SECRET": SECRET_A,
                "AIRLOCK_APPROVAL_CLIENTS": f'{{"default": {{"secret": "{SECRET_B}"}}}}',
            },
            "AIRLOCK_WEBHOOK_SECRET",
        ),
        (
            {
                "AIRLOCK_WEBHOOK_SECRET": SECRET_A,
                "AIRLOCK_APPROVAL_CLIENTS": f'{{"desk": {{"secret": "{SECRET_A}"}}}}',
            },
            "share a secret",
        ),
    ],
)
def test_bad_principal_settings_fail_at_start_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], named: str
) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(ConfigurationError, match=named):
        load_settings()


def test_a_short_client_secret_is_refused_and_the_default_client_is_the_webhook_secret() -> None:
    short = Settings.model_validate({"approval_clients": {"desk": {"secret": "short"}}})
    with pytest.raises(ConfigurationError, match="AIRLOCK_APPROVAL_CLIENTS\\['desk'\\]"):
        check_secrets(short)
    config = Settings.model_validate(
        {
            "webhook_secret": SECRET_A,
            "approval_clients": {"desk": {"secret": f"{SECRET_B}", "roles": ["payments"]}},
        }
    )
    assert set(config.clients) == {"default", "desk"}
    assert config.clients["default"].roles == () and config.clients["desk"].roles == ("payments",)
    check_secrets(config)
