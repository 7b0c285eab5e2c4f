"""Who decides: the principal a decision is made by, as the auth layer verified it, and
what it may decide (roles, separation of duties, quorum). Pure: no HTTP, no database."""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

from pydantic import JsonValue

from airlock.loop import Agent, Approve, Edit, PendingCall, SuspendedRunState
from airlock.loop.decisions import Decisions
from airlock.loop.errors import AirlockError
from airlock.loop.gate import resolve

Method = Literal["webhook", "oidc", "cli", "api", "inbox", "airlock"]


MAX_NAME = 200


def check_name(value: str, what: str = "a principal's name") -> str:
    """A principal's name as the tables can hold it and an audit can show it: 1 to
    200 characters, none of them a control character (NUL, newline, escape) or a lone
    surrogate. Raises ``ValueError``."""
    if not value or len(value) > MAX_NAME:
        raise ValueError(f"{what} must be 1 to {MAX_NAME} characters")
    if any(unicodedata.category(c) in ("Cc", "Cs") for c in value):
        raise ValueError(f"{what} holds a control character or a lone surrogate")
    return value


class ForbiddenError(AirlockError):
    """The principal may not make this decision (403): a role it does not hold, its own
    run, or an ``approver`` that is not who it is."""


@dataclass(frozen=True)
class Principal:
    """A verified identity that decides.

    - ``webhook``: a named approval client signed the request; ``id`` is the end
      approver it vouches for (or ``client:<name>`` when it names none), with the roles
      the client may speak for.
    - ``oidc``: a JWT's ``sub``, with the roles of its configured claim.
    - ``cli``: the operator (``--as``, with the OS user), who holds every role.
    - ``api``: a caller of the Python API, trusted as the operator is.
    - ``inbox``: signed in to the inbox with the API token, as the name given, trusted
      as the operator is.
    - ``airlock``: Airlock itself (the expiry's deny).
    """

    id: str
    method: Method
    roles: frozenset[str] = frozenset()
    every_role: bool = False
    client: str | None = None
    issuer: str | None = None
    os_user: str | None = None
    names_itself: bool = field(default=True, compare=False)
    """Whether a body's ``approver`` must equal ``id``; false for a principal that
    vouches for whoever the body names, who is then the principal (``vouching``)."""

    def __post_init__(self) -> None:
        check_name(self.id)

    @classmethod
    def of_client(cls, name: str, roles: frozenset[str], approver: str | None) -> Principal:
        return cls(
            id=approver or f"client:{name}",
            method="webhook",
            roles=roles,
            client=name,
            names_itself=False,
        )

    @classmethod
    def operator(cls, name: str, *, os_user: str | None = None) -> Principal:
        """The CLI's operator: trusted with every role (they hold the database)."""
        return cls(id=name, method="cli", every_role=True, os_user=os_user)

    @classmethod
    def trusted(cls, name: str) -> Principal:
        """A caller of the Python API, trusted as the operator is; like an approval
        client, it vouches for the ``approver`` a decision's body names (``name``
        when it names none)."""
        return cls(id=name, method="api", every_role=True, names_itself=False)

    @property
    def key(self) -> str:
        """Who it is: its method, the authority that vouches for it and its subject
        (``webhook:<client>:<approver>``, ``oidc:<issuer>:<sub>``, ``inbox:<name>``,
        ``cli:<name>``, ``api:<name>``). Two principals are the same person only when
        their keys are equal; ``id``, a name, is only shown."""
        match self.method:
            case "webhook":
                return f"webhook:{self.client}:{self.id}"
            case "oidc":
                return f"oidc:{self.issuer}:{self.id}"
            case "airlock":
                return "airlock"
            case _:
                return f"{self.method}:{self.id}"

    @property
    def source(self) -> str:
        """The ``source`` of its decision events, as before principals (``webhook``,
        ``cli``, ``expiry``, …)."""
        return "expiry" if self.method == "airlock" else self.method

    def vouching(self, approver: str | None) -> Principal:
        """The principal that decides when a body names ``approver``: this one, or (for
        one that vouches) the approver it names. Raises ``ForbiddenError`` when a
        principal that names itself is named otherwise."""
        if approver is None or approver == self.id:
            return self
        if self.names_itself:
            raise ForbiddenError(
                f"the body names approver {approver!r}, but the request is "
                f"authenticated as {self.id!r}"
            )
        return replace(self, id=approver)

    def holds_any(self, roles: tuple[str, ...]) -> bool:
        return not roles or self.every_role or not self.roles.isdisjoint(roles)

    def auth(self, roles: list[str]) -> dict[str, JsonValue]:
        """How it was authenticated, for the audit: method, the client / issuer / OS
        user, and the roles it acted with."""
        found: dict[str, JsonValue] = {"method": self.method}
        for key, value in (("client", self.client), ("issuer", self.issuer)):
            if value is not None:
                found[key] = value
        if self.os_user is not None:
            found["os_user"] = self.os_user
        found["roles"] = list(roles)
        return found


AIRLOCK = Principal(id="airlock", method="airlock", every_role=True)
"""Airlock itself: the expiry's deny."""


def identity_of(auth: Mapping[str, JsonValue], name: str) -> str:
    """The key (``Principal.key``) of a principal an audit's ``auth`` describes under
    ``name``: its ``identity``, or for a record made before identities were kept, the
    key worked out of its method, client and issuer."""
    identity = auth.get("identity")
    if isinstance(identity, str):
        return identity
    method = auth.get("method")
    if method == "webhook":
        return f"webhook:{auth.get('client')}:{name}"
    if method == "oidc":
        return f"oidc:{auth.get('issuer')}:{name}"
    return f"{method}:{name}"


@dataclass(frozen=True)
class Requester:
    """Who asked for a run: ``name`` as recorded, and ``identity`` when the caller proved
    it (a token's subject creating its own run); none when a trusted client (the API
    token's holder, the CLI, the Python API) named the requester, which is then known
    by that name alone."""

    name: str | None
    identity: str | None = None

    @classmethod
    def of(cls, requested_by: str | None, caller: str | None) -> Requester:
        """The requester of a run recorded with ``requested_by`` by ``caller`` (its
        idempotency scope): a token's subject (``oidc:…``, the key of the principal
        that created it) proved who it is; any other caller named the requester."""
        proven = caller is not None and caller.startswith("oidc:")
        return cls(requested_by, caller if proven else None)

    def is_(self, principal: Principal) -> bool:
        """Whether ``principal`` is the requester, for separation of duties, which errs
        on refusing: the same identity; or, for a requester known by name alone, a
        principal of that name, however it signed in."""
        if self.identity is not None:
            return self.identity == principal.key
        return self.name is not None and self.name == principal.id

    def proven(self, principal: Principal) -> bool:
        """Whether ``principal`` proved to be the requester (to act as one: cancel or
        retry its run): the same identity; a name alone proves nothing."""
        return self.identity is not None and self.identity == principal.key


NOBODY = Requester(None)


@dataclass(frozen=True)
class Authority:
    """What a principal's decision on a turn covers, once it may make it."""

    covered: tuple[str, ...]
    """The calls it decides (not those a policy or their kind decided)."""
    approves: bool
    """Whether it approves (or edits) any call: a decision that approves none is a deny."""
    quorum: int
    """How many distinct principals must approve this decision before it applies."""
    roles: list[str]
    """The principal's roles that the covered calls asked for."""
    effect: dict[str, JsonValue] = field(default_factory=dict)
    """What the decision does to each covered call, whatever its wording: ``deny``, or
    ``{"approve": <the arguments it runs with>}``. Approvals toward a quorum count
    together when their effects are equal."""
    policy: dict[str, JsonValue] = field(default_factory=dict)
    """Per covered call the policy file judged: the rule and the file's sha256."""


def approval_of(agent: Agent, call: PendingCall) -> tuple[tuple[tuple[str, ...], ...], int]:
    """Who may decide ``call`` and how many must approve it: the code's roles (the tool's
    or the agent's) and each role set of the policy file's judgement, a principal holding
    one role of every set; the larger quorum (the strictest wins)."""
    roles, needed = agent.approval_of(call.name)
    sets = ((roles,) if roles else ()) + (call.policy.approvers if call.policy else ())
    return sets, max(needed, call.policy.quorum if call.policy else 1)


def refusal(principal: Principal, agent: Agent, call: PendingCall) -> str | None:
    """Why ``principal`` may not decide ``call`` on its own: the roles it holds none of
    (its approval alone cannot release a call that needs a quorum: ``approval_of``)."""
    sets, _ = approval_of(agent, call)
    if all(principal.holds_any(roles) for roles in sets):
        return None
    return f"{call.id} ({call.name}: {' and '.join(', '.join(s) for s in sets)})"


def _refuse(principal: Principal, agent: Agent, refused: list[str], *, self_approval: bool) -> None:
    """Raises ``ForbiddenError`` for calls the principal holds no role for, or for an
    approval of its own run's calls that the agent does not allow."""
    if refused:
        raise ForbiddenError(
            f"{principal.id} holds none of the roles that may decide "
            f"{'call' if len(refused) == 1 else 'calls'} {'; '.join(refused)}"
        )
    if self_approval and not agent.self_approval:
        raise ForbiddenError(
            f"{principal.id} requested this run and may not approve its calls "
            f"(agent {agent.name!r} does not allow self-approval)"
        )


def authorise(
    principal: Principal,
    agent: Agent,
    state: SuspendedRunState,
    decisions: Decisions,
    *,
    requester: Requester,
) -> Authority:
    """Whether ``principal`` may make ``decisions`` on the turn ``state`` holds (checked
    by ``check_decisions``): the one place a person's authority over a turn is decided.
    Raises ``ForbiddenError``: a covered call whose roles it holds none of; an approval
    of its own run's calls (unless the agent allows it)."""
    # the calls a person decides: not those a policy or their kind (a read) settled
    covered = [
        (call, d)
        for call, d, source in resolve(agent, state, decisions)
        if source == "operator" and call.requires_approval
    ]
    refused: list[str] = []
    used: set[str] = set()
    quorum = 1
    approves = False
    effect: dict[str, JsonValue] = {}
    judged: dict[str, JsonValue] = {
        c.id: {"rule": c.policy.rule, "sha256": c.policy.sha256} for c, _ in covered if c.policy
    }
    for call, decision in covered:
        sets, needed = approval_of(agent, call)
        why = refusal(principal, agent, call)
        if why is not None:
            refused.append(why)
            continue
        used.update(r for roles in sets for r in roles if r in principal.roles)
        if isinstance(decision, Approve | Edit):
            approves = True
            quorum = max(quorum, needed)
            runs_with = decision.arguments if isinstance(decision, Edit) else call.arguments
            effect[call.id] = {"approve": dict(runs_with)}
        else:
            effect[call.id] = "deny"
    _refuse(principal, agent, refused, self_approval=approves and requester.is_(principal))
    return Authority(
        covered=tuple(call.id for call, _ in covered),
        approves=approves,
        quorum=quorum,
        roles=sorted(used),
        effect=effect,
        policy=judged,
    )


OPERATOR_ROLES = frozenset({"operator"})
"""The roles that may cancel and retry any run, unless ``AIRLOCK_OPERATOR_ROLES`` says
otherwise."""


@dataclass(frozen=True)
class Standing:
    """Why a principal may cancel or retry a run."""

    ground: Literal["operator", "requester", "role"]
    """The operator (every role: the CLI, the API token's holder, a caller of the Python
    API), the run's requester, or a holder of an operator role."""
    roles: list[str]
    """The operator roles it acted with."""


def may_operate(
    principal: Principal, action: str, *, requester: Requester, roles: frozenset[str]
) -> Standing:
    """Whether ``principal`` may ``action`` (cancel, retry) a run asked for by
    ``requester``: the operator, the requester (its proven identity: a name alone is
    no proof), or a holder of one of ``roles``. Raises ``ForbiddenError``."""
    if principal.every_role:
        return Standing("operator", [])
    held = sorted(principal.roles & roles)
    if held:
        return Standing("role", held)
    if requester.proven(principal):
        return Standing("requester", [])
    holders = f" or a holder of {' or '.join(sorted(roles))}" if roles else ""
    raise ForbiddenError(
        f"{principal.id} may not {action} this run: only its requester, the operator{holders}"
    )
