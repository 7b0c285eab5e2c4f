"""The MCP runtime's rows: the pinned tool definitions (``mcp_pins``) and the
fingerprints calls were suspended under (``mcp_reviews``)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import JSON, ForeignKey, String
from sqlalchemy.orm import Mapped, mapped_column

from airlock.persistence.models import Base


class McpPinRow(Base):
    """An MCP tool as it was reviewed: its definition (name, description, input schema,
    annotations) and that definition's fingerprint, recorded when the tool was first
    imported and replaced only by ``airlock mcp pin``. A call of the tool is executed
    only while the server lists it with this fingerprint."""

    __tablename__ = "mcp_pins"

    server: Mapped[str] = mapped_column(String(40), primary_key=True)
    tool: Mapped[str] = mapped_column(String(200), primary_key=True)
    fingerprint: Mapped[str] = mapped_column(String(64))
    definition: Mapped[dict[str, Any]] = mapped_column(JSON)
    pinned_at: Mapped[datetime]


class McpReviewRow(Base):
    """The fingerprint an MCP call was suspended (reviewed) under: the call runs after
    its approval only if the server still lists its tool with this fingerprint."""

    __tablename__ = "mcp_reviews"

    run_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("agent_runs.id", ondelete="CASCADE"), primary_key=True
    )
    call_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    tool: Mapped[str] = mapped_column(String(250))
    fingerprint: Mapped[str] = mapped_column(String(64))
