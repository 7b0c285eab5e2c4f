"""A principal is its method, the authority that vouches for it and its subject, not its
name: approvals toward a quorum are one per identity, and a decision keeps the identity
of who made it (issue 42). Stored approvals get the identity their audit describes.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-07 16:00:00
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _identity(auth: Any, name: str) -> str:
    """``Principal.key`` of an approval made before identities were kept, as of this
    revision (frozen here: the code's may change, the rows this made do not)."""
    found = json.loads(auth) if isinstance(auth, str) else (auth or {})
    if isinstance(found.get("identity"), str):
        return str(found["identity"])
    method = found.get("method")
    if method == "webhook":
        return f"webhook:{found.get('client')}:{name}"
    if method == "oidc":
        return f"oidc:{found.get('issuer')}:{name}"
    return f"{method}:{name}"


def upgrade() -> None:
    with op.batch_alter_table("approvals") as batch:
        batch.add_column(sa.Column("identity", sa.String(length=600), nullable=True))
    approvals = sa.table(
        "approvals",
        sa.column("id", sa.BigInteger()),
        sa.column("principal", sa.String()),
        sa.column("auth", sa.JSON()),
        sa.column("identity", sa.String()),
    )
    conn = op.get_bind()
    rows = conn.execute(sa.select(approvals.c.id, approvals.c.principal, approvals.c.auth)).all()
    for row_id, principal, auth in rows:
        conn.execute(
            approvals.update()
            .where(approvals.c.id == row_id)
            .values(identity=_identity(auth, principal))
        )
    with op.batch_alter_table("approvals") as batch:
        batch.alter_column("identity", existing_type=sa.String(length=600), nullable=False)
        batch.drop_constraint("uq_approvals_run_id_turn_digest_principal", type_="unique")
        batch.create_unique_constraint(
            "uq_approvals_run_id_turn_digest_identity", ["run_id", "turn_digest", "identity"]
        )
    with op.batch_alter_table("decisions") as batch:
        batch.add_column(sa.Column("identity", sa.String(length=600), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("decisions") as batch:
        batch.drop_column("identity")
    with op.batch_alter_table("approvals") as batch:
        batch.drop_constraint("uq_approvals_run_id_turn_digest_identity", type_="unique")
        batch.create_unique_constraint(
            "uq_approvals_run_id_turn_digest_principal", ["run_id", "turn_digest", "principal"]
        )
        batch.drop_column("identity")
