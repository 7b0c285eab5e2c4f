"""Listing and revoking standing grants (``Service.grants``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from airlock.persistence.domain import GrantRecord
from airlock.persistence.store import RunStore
from airlock.workers.service.grants import UnknownGrantError, summary
from airlock.workers.service.principals import ForbiddenError, Principal, identity_of
from airlock.workers.service.results import ConflictError


@dataclass
class GrantDesk:
    """Listing and revoking grants (``Service.grants``)."""

    store: RunStore
    operator_roles: frozenset[str]

    def list(
        self, *, state: Literal["active", "all"] = "active", agent: str | None = None,
        limit: int = 100,
    ) -> list[GrantRecord]:  # fmt: skip
        return self.store.grants.list(active=state == "active", agent=agent, limit=limit)

    def now(self) -> datetime:
        """The store's clock: what a grant's ``state`` is judged at (``view``)."""
        return self.store.now()

    def get(self, grant_id: str) -> GrantRecord:
        found = self.store.grants.get(grant_id)
        if found is None:
            raise UnknownGrantError(f"no grant has id {grant_id!r}")
        return found

    def revoke(self, grant_id: str, *, by: Principal) -> GrantRecord:
        """Revoke a live grant on ``by``'s authority (the operator, its grantor, or a
        holder of an operator role): from its commit, no turn is released by it; a
        release that holds it is waited for. A ``grant_revoked`` event is added to the
        run it was given on, in the revocation's transaction. Raises
        ``UnknownGrantError``, ``ForbiddenError``, ``ConflictError`` (already revoked,
        or expired)."""
        grant = self.get(grant_id)
        grantor = identity_of(grant.auth, grant.granted_by)
        if not (by.every_role or by.key == grantor or by.roles & self.operator_roles):
            raise ForbiddenError(
                f"{by.id} may not revoke grant {grant.id}: only its grantor "
                f"({grant.granted_by}), the operator or a holder of "
                f"{' or '.join(sorted(self.operator_roles)) or 'an operator role'}"
            )
        # the audit names the grant as it was read (its summary never changes); its
        # run may be purged: then the grant's row alone keeps who revoked it
        payload = {**summary(grant), "revoked_by": by.id, "identity": by.key, "auth": by.auth([])}
        result, found = self.store.grants.revoke(grant.id, by.id, event=("grant_revoked", payload))
        if found is None:
            raise UnknownGrantError(f"no grant has id {grant_id!r}")
        if result != "revoked":
            when = (
                f"was revoked by {found.revoked_by} at {found.revoked_at:%Y-%m-%d %H:%M:%S}Z"
                if found.revoked_at
                else f"expired at {found.expires_at:%Y-%m-%d %H:%M:%S}Z"
            )
            raise ConflictError(f"grant {found.id} {when}")
        return found
