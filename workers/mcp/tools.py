"""``mcp_tools("bank")``: a declared server's tools as ``Tool`` objects for an agent.

Each is named ``<server>__<tool>``, offers the definition that was pinned (recorded on
first import; ``airlock mcp pin`` replaces it) and has the effect the operator decided
(``catalog.decide_effect``). Its calls go through the gate and the ledger as any tool's;
``invoke`` makes the one upstream call (``runtime.call``)."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from functools import lru_cache

import jsonschema
from pydantic import JsonValue
from sqlalchemy.exc import SQLAlchemyError

from airlock.loop import Effect, Tool, ToolArgumentsError, ToolContext, ToolSchema
from airlock.loop.messages import JsonObject
from airlock.persistence.crypto import StateCipher
from airlock.persistence.db import make_engine
from airlock.persistence.store import RunStore
from airlock.workers.mcp import runtime
from airlock.workers.mcp.catalog import (
    BadToolError,
    Definition,
    check_schema,
    decide_effect,
    full_name,
)
from airlock.workers.mcp.config import McpConfigError, ServerConfig, Servers, load_servers
from airlock.workers.service.settings import settings

log = logging.getLogger("airlock")
IMPORT_TIMEOUT = 10.0
"""The longest ``mcp_tools`` waits for a server's listing (then it offers the pins)."""


class McpToolError(Exception):
    """The upstream tool answered with ``isError``, or the call got no answer: the
    message is what the model reads."""


class McpTool(Tool):
    def __init__(self, server: ServerConfig, definition: Definition) -> None:
        self.server = server
        self.definition = definition
        self.name = full_name(server.name, definition.name)
        self.description = definition.description
        self.effect = decide_effect(server, definition)
        declared = server.tools.get(definition.name)
        if declared is not None:
            self.approvers, self.quorum = declared.approvers, declared.quorum
        self._raw: dict[str, list[JsonValue]] = {}
        self._validator = jsonschema.validators.validator_for(definition.input_schema)(
            definition.input_schema
        )

    @property
    def fingerprint(self) -> str:
        """The fingerprint of the definition this tool offers (its pin when imported)."""
        return self.definition.fingerprint()

    def schema(self) -> ToolSchema:
        return ToolSchema(self.name, self.description, self.definition.input_schema)

    def validate(self, arguments: Mapping[str, JsonValue]) -> JsonObject:
        errors = sorted(self._validator.iter_errors(dict(arguments)), key=str)
        if errors:
            where = ".".join(str(p) for p in errors[0].absolute_path) or "(arguments)"
            raise ToolArgumentsError(
                f'invalid arguments for tool "{self.name}": {where}: {errors[0].message}'
            )
        return dict(arguments)

    def invoke(self, arguments: JsonObject, ctx: ToolContext) -> JsonValue:
        try:
            outcome = runtime.call(
                self.server,
                self.definition.name,
                dict(arguments),
                idempotency_key=ctx.idempotency_key,
                repeatable=self.effect is not Effect.WRITE,
            )
        except runtime.McpCallError as exc:
            ran = " It may have run upstream." if exc.maybe_ran else " It did not run."
            raise McpToolError(f"{exc}.{ran}") from exc
        content = outcome.raw.get("content")
        others = [b for b in content if _not_text(b)] if isinstance(content, list) else []
        if others:
            self._raw[ctx.idempotency_key] = others
        if outcome.is_error:
            raise McpToolError(outcome.text)
        return outcome.text

    def take_content(self, ctx: ToolContext) -> list[JsonValue]:
        """The blocks other than text of the call's answer (the model read a summary):
        the guard writes them in the run's events."""
        return self._raw.pop(ctx.idempotency_key, [])


def _not_text(block: JsonValue) -> bool:
    return not (isinstance(block, dict) and block.get("type") == "text")


@lru_cache(maxsize=1)
def servers() -> Servers:
    """The servers ``AIRLOCK_MCP_SERVERS`` declares (read once per process)."""
    path = settings().mcp_servers
    if path is None:
        raise McpConfigError("", 0, "not set: no MCP server is declared")
    return load_servers(path)


@contextmanager
def pin_store() -> Iterator[RunStore]:
    """A store for the import's pins, on an engine of its own that is closed after it: an
    import runs before a prefork pool forks, and a child must not share its connections."""
    config = settings()
    engine = make_engine(config.database_url)
    try:
        yield RunStore(engine, cipher=StateCipher(config.state_key))
    finally:
        engine.dispose()


def mcp_tools(server: str) -> list[Tool]:
    """The tools of the declared server ``server``, as pinned.

    The server is asked for its tools now: one not pinned yet is pinned as listed
    (first import). A server that cannot be reached does not stop the import: its
    pinned tools are offered, and their calls fail until it answers. A tool whose
    name or schema no model could use is left out, with a logged reason."""
    config = servers().get(server)
    try:
        live = runtime.list_tools(config, timeout=min(config.timeout, IMPORT_TIMEOUT))
    except runtime.McpCallError as exc:
        log.warning("%s; offering its pinned tools", exc, extra={"action": "mcp.unavailable"})
        live = []
    try:
        pinned = _pin_first(config, usable(config, live))
    except SQLAlchemyError as exc:  # no pins table yet (airlock db upgrade), or no database
        log.error(
            "MCP server %r: its tools' pins cannot be read or recorded (%s); its calls are "
            "refused as drifted until they can",
            server, type(exc).__name__, extra={"action": "mcp.pins_unavailable"},
        )  # fmt: skip
        pinned = live
    return [McpTool(config, d) for d in usable(config, pinned)]


def _pin_first(config: ServerConfig, live: list[Definition]) -> list[Definition]:
    """Pin the tools not pinned yet as listed (the first import); every pinned one."""
    with pin_store() as store:
        for definition in live:
            store.mcp.record_first(
                config.name, definition.name, definition.fingerprint(), definition.as_json()
            )
        pins = store.mcp.pins(config.name)
    return [Definition.from_json(p.definition) for p in pins.values()]


def usable(config: ServerConfig, definitions: list[Definition]) -> list[Definition]:
    """The definitions a model can be offered; the others are logged and left out."""
    kept = []
    for definition in definitions:
        try:
            full_name(config.name, definition.name)
            check_schema(definition)
            jsonschema.validators.validator_for(definition.input_schema).check_schema(
                definition.input_schema
            )
        except (BadToolError, jsonschema.SchemaError) as exc:
            log.error(
                "MCP server %r: %s", config.name, str(exc).splitlines()[0],
                extra={"action": "mcp.tool_refused"},
            )  # fmt: skip
            continue
        kept.append(definition)
    return kept
