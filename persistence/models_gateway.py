"""The MCP gateway's held calls (``mcp_gateway_calls``)."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import ForeignKey, String, Uuid
from sqlalchemy.orm import Mapped, mapped_column

from airlock.persistence.models import Base


class McpGatewayCallRow(Base):
    """A call the MCP gateway holds in a run of the agent ``mcp``; ``open_key`` (unique)
    is set until its result was returned once (``persistence.store.gateway``)."""

    __tablename__ = "mcp_gateway_calls"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    open_key: Mapped[str | None] = mapped_column(String(64), unique=True)
    digest: Mapped[str] = mapped_column(String(64))
    principal: Mapped[str] = mapped_column(String(500))
    server: Mapped[str] = mapped_column(String(40))
    tool: Mapped[str] = mapped_column(String(250))
    run_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("agent_runs.id", ondelete="CASCADE"), index=True
    )
    created_at: Mapped[datetime]
    returned_at: Mapped[datetime | None]
