"""The operator's MCP server declarations (``AIRLOCK_MCP_SERVERS``, a TOML file).

```toml
[servers.bank]
url = "http://127.0.0.1:9000/mcp"            # Streamable HTTP; or
# command = ["python", "-m", "bank_server"]  # stdio
headers = { Authorization = "Bearer ${BANK_TOKEN}" }
trust_annotations = false

[servers.bank.tools]
balance  = { effect = "read" }
transfer = { effect = "write", approvers = ["payments"] }
```

A bad file is refused whole, with the line and the reason (``McpConfigError``);
``${VAR}`` is taken from the environment and a missing variable is refused by name.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from airlock.loop import AirlockError, Effect
from airlock.loop.policy.locate import Locator
from airlock.loop.tools import approval_rule

SERVER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,39}$")
"""A server's name: the prefix of its tools' names (``bank__transfer``), so it holds no
``__`` and only what model APIs accept in a tool name."""
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class McpConfigError(AirlockError, ValueError):
    """The MCP servers file cannot be used; ``line`` is where (0: the file as a whole)."""

    def __init__(self, path: str, line: int, reason: str) -> None:
        where = f"{path}:{line}: " if line else f"{path}: " if path else ""
        super().__init__(f"AIRLOCK_MCP_SERVERS: {where}{reason}")
        self.line = line
        self.reason = reason


class ToolDeclaration(BaseModel):
    """The operator's word on one tool: its effect, and who may decide its calls."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    effect: Effect
    approvers: tuple[str, ...] = ()
    quorum: int = Field(default=1, ge=1)

    @model_validator(mode="after")
    def _rule(self) -> ToolDeclaration:
        approval_rule("tool", self.approvers, self.quorum)
        return self


class _ServerModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    url: str | None = Field(default=None, pattern=r"^https?://")
    command: tuple[str, ...] | None = Field(default=None, min_length=1)
    env: dict[str, str] = {}
    headers: dict[str, str] = {}
    trust_annotations: bool = False
    timeout: float = Field(default=30.0, gt=0, le=3600)
    tools: dict[str, ToolDeclaration] = {}

    @model_validator(mode="after")
    def _one_transport(self) -> _ServerModel:
        if (self.url is None) == (self.command is None):
            raise ValueError("give exactly one of url (Streamable HTTP) or command (stdio)")
        if self.headers and self.url is None:
            raise ValueError("headers apply to a url server only")
        return self


@dataclass(frozen=True, slots=True)
class ServerConfig:
    name: str
    url: str | None
    command: tuple[str, ...] | None
    env: Mapping[str, str]
    headers: Mapping[str, str]
    trust_annotations: bool
    timeout: float
    """The deadline of one call, retries included (seconds)."""
    tools: Mapping[str, ToolDeclaration]

    @property
    def transport(self) -> Literal["http", "stdio"]:
        return "http" if self.url is not None else "stdio"


@dataclass(frozen=True, slots=True)
class Servers:
    path: str
    servers: Mapping[str, ServerConfig]

    def get(self, name: str) -> ServerConfig:
        found = self.servers.get(name)
        if found is None:
            known = ", ".join(sorted(self.servers)) or "none"
            raise McpConfigError(
                self.path, 0, f"no server {name!r} is declared (declared: {known})"
            )
        return found


def load_servers(path: str | Path, environ: Mapping[str, str] | None = None) -> Servers:
    """The servers ``path`` declares, ``${VAR}`` taken from ``environ`` (the process's)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise McpConfigError(str(path), 0, f"cannot read the file: {exc}") from exc
    return parse_servers(text, str(path), os.environ if environ is None else environ)


def parse_servers(text: str, path: str, environ: Mapping[str, str]) -> Servers:
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        found = re.search(r"at line (\d+)", str(exc))
        raise McpConfigError(path, int(found.group(1)) if found else 0, str(exc)) from exc
    where = Locator(text)
    unknown = sorted(set(raw) - {"servers"})
    if unknown:
        raise McpConfigError(path, where.top_key(unknown[0]), f"unknown key {unknown[0]!r}")
    servers = raw.get("servers", {})
    if not isinstance(servers, dict):
        raise McpConfigError(path, where.top_key("servers"), "servers must be a table")
    parsed = {
        name: _server(name, section, path, where, environ) for name, section in servers.items()
    }
    return Servers(path, parsed)


def _server(
    name: str, section: object, path: str, where: Locator, environ: Mapping[str, str]
) -> ServerConfig:
    start = where.table(f"servers.{name}", 0)
    if not SERVER_NAME.match(name) or "__" in name:
        raise McpConfigError(
            path, start, f"server name {name!r}: use letters, digits, '-' and single '_' "
            "(at most 40; it prefixes its tools' names as NAME__TOOL)"
        )  # fmt: skip
    try:
        model = _ServerModel.model_validate(section)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        loc = [str(p) for p in error["loc"]]
        line = _line_of(where, name, loc, start)
        field = ".".join(loc) or name
        raise McpConfigError(path, line, f"[servers.{name}] {field}: {error['msg']}") from exc
    for tool in model.tools:
        if "__" in tool:
            raise McpConfigError(
                path, _line_of(where, name, ["tools", tool], start),
                f"[servers.{name}.tools] {tool!r}: a tool's own name holds no '__'",
            )  # fmt: skip

    def expand(key: str, value: str) -> str:
        return _expand(value, environ, path, where.key(start, key), f"servers.{name}.{key}")

    return ServerConfig(
        name=name,
        url=expand("url", model.url) if model.url else None,
        command=tuple(expand("command", a) for a in model.command) if model.command else None,
        env={k: expand("env", v) for k, v in model.env.items()},
        headers={k: expand("headers", v) for k, v in model.headers.items()},
        trust_annotations=model.trust_annotations,
        timeout=model.timeout,
        tools=dict(model.tools),
    )


def _line_of(where: Locator, server: str, loc: list[str], start: int) -> int:
    if loc[:1] == ["tools"]:
        table = where.table(f"servers.{server}.tools", 0)
        if len(loc) > 1 and table:
            return where.key(table, loc[1])
        return table or start
    return where.key(start, loc[0]) if loc else start


def _expand(value: str, environ: Mapping[str, str], path: str, line: int, what: str) -> str:
    def one(found: re.Match[str]) -> str:
        name = found.group(1)
        if name not in environ:
            raise McpConfigError(path, line, f"{what}: environment variable {name} is not set")
        return environ[name]

    return _VARIABLE.sub(one, value)
