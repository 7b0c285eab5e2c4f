"""What ``airlock mcp list`` shows and ``airlock mcp pin`` does."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from airlock.persistence.store import RunStore
from airlock.workers.mcp import runtime
from airlock.workers.mcp.catalog import Definition, decide_effect, full_name
from airlock.workers.mcp.config import ServerConfig, Servers

Drift = Literal["pinned", "drifted", "unpinned", "gone", "unknown"]


@dataclass(frozen=True, slots=True)
class ToolStatus:
    server: str
    name: str
    """The full name (``bank__transfer``)."""
    effect: str
    pin: str | None
    live: str | None
    drift: Drift


@dataclass(frozen=True, slots=True)
class ServerStatus:
    name: str
    transport: str
    reachable: str | None
    """None when it answered; else why not."""
    tools: list[ToolStatus]


class McpDesk:
    """The service's door to the pins (``Service.mcp()``)."""

    def __init__(self, store: RunStore) -> None:
        self._store = store

    def status(self, servers: Servers) -> list[ServerStatus]:
        return [_server_status(self._store, config) for config in servers.servers.values()]

    def pin(self, config: ServerConfig, tool: str | None = None) -> list[str]:
        return pin(self._store, config, tool)


def _server_status(store: RunStore, config: ServerConfig) -> ServerStatus:
    why: str | None = None
    try:
        live: dict[str, Definition] | None = {d.name: d for d in runtime.list_tools(config)}
    except runtime.McpCallError as exc:
        live, why = None, str(exc)
    pins = store.mcp.pins(config.name)
    tools = []
    for name in sorted(set(pins) | set(live or {})):
        pin = pins.get(name)
        now = (live or {}).get(name)
        definition = now or Definition.from_json(pin.definition if pin else {"name": name})
        tools.append(
            ToolStatus(
                config.name,
                f"{config.name}__{name}",
                decide_effect(config, definition).value,
                pin.fingerprint if pin else None,
                now.fingerprint() if now else None,
                _drift(pin.fingerprint if pin else None, now, live is not None),
            )
        )
    return ServerStatus(config.name, config.transport, why, tools)


def _drift(pin: str | None, now: Definition | None, reachable: bool) -> Drift:
    if not reachable:
        return "unknown"
    if now is None:
        return "gone"
    if pin is None:
        return "unpinned"
    return "pinned" if pin == now.fingerprint() else "drifted"


def pin(store: RunStore, config: ServerConfig, tool: str | None = None) -> list[str]:
    """Pin the server's tools (or ``tool``) as listed now; the full names pinned.
    Raises ``McpCallError`` when the server cannot be asked, ``LookupError`` for a tool
    it does not list."""
    live = {d.name: d for d in runtime.list_tools(config)}
    if tool is not None and tool not in live:
        raise LookupError(f"MCP server {config.name!r} lists no tool {tool!r}")
    chosen = [live[tool]] if tool is not None else list(live.values())
    pinned = []
    for definition in chosen:
        name = full_name(config.name, definition.name)
        store.mcp.replace(
            config.name, definition.name, definition.fingerprint(), definition.as_json()
        )
        pinned.append(name)
    return pinned
