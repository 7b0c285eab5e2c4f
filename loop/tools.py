"""Tools, their effects and the approval rule."""

from __future__ import annotations

import functools
import inspect
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, get_type_hints, overload

from pydantic import BaseModel, ConfigDict, JsonValue, ValidationError, create_model

from airlock.loop.errors import ToolArgumentsError
from airlock.loop.messages import JsonObject

ToolFunction = Callable[..., JsonValue]


class Effect(StrEnum):
    READ = "read"
    IDEMPOTENT_WRITE = "idempotent_write"
    WRITE = "write"


class RequiresApproval:
    """Marker: every call of a tool that carries it waits for a person."""


@dataclass(frozen=True, slots=True)
class ToolContext:
    run_id: str
    call_id: str
    agent: str
    tool: str

    @property
    def idempotency_key(self) -> str:
        """Stable across redeliveries and resumes: hand it to the system you act on."""
        return f"{self.run_id}:{self.call_id}"


@dataclass(frozen=True, slots=True)
class ToolSchema:
    name: str
    description: str
    parameters: JsonObject


class AnyArguments(BaseModel):
    """The default schema of a ``Tool`` subclass that declares none: any object."""

    model_config = ConfigDict(extra="allow")


class Tool:
    """A tool the model may call.

    Subclass it with ``name`` (default: the class name in snake_case),
    ``description``, ``effect``, an ``arguments`` pydantic model and
    ``invoke(arguments, ctx)`` (or ``run(**arguments)``); or decorate a function
    with :func:`tool`.

    ``approvers``: the roles that may decide its calls (none: any approver, or the
    agent's ``approvers``). ``quorum``: how many distinct principals must approve a
    call before it runs (a deny by any one of them ends the turn at once).
    """

    name: str = ""
    description: str = ""
    effect: Effect = Effect.READ
    arguments: type[BaseModel] = AnyArguments
    approvers: tuple[str, ...] = ()
    quorum: int = 1

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if not cls.__dict__.get("name") and cls.__name__ != "FunctionTool":
            cls.name = re.sub(r"(?<!^)(?=[A-Z])", "_", cls.__name__).lower()
        if not cls.__dict__.get("description") and cls.__doc__:
            cls.description = inspect.cleandoc(cls.__doc__)
        cls.approvers, cls.quorum = approval_rule(f"tool {cls.name!r}", cls.approvers, cls.quorum)

    def invoke(self, arguments: JsonObject, ctx: ToolContext) -> JsonValue:
        run = getattr(self, "run", None)
        if not callable(run):
            raise NotImplementedError(f"tool {self.name!r} must define invoke(arguments, ctx)")
        result: JsonValue = run(**arguments)
        return result

    def validate(self, arguments: Mapping[str, JsonValue]) -> JsonObject:
        try:
            parsed = self.arguments.model_validate(dict(arguments))
        except ValidationError as exc:
            raise ToolArgumentsError(_describe(self.name, exc)) from exc
        try:
            dumped: JsonObject = parsed.model_dump(mode="json")
        except UnicodeEncodeError as exc:  # a lone surrogate in a free-form key: no JSON
            raise ToolArgumentsError(
                f'invalid arguments for tool "{self.name}": a key holds text that is not '
                f"valid Unicode ({exc.reason})"
            ) from exc
        return dumped

    def schema(self) -> ToolSchema:
        return ToolSchema(self.name, self.description, _json_schema(self.arguments))


@functools.cache
def _json_schema(arguments: type[BaseModel]) -> JsonObject:
    """An arguments model's JSON schema, made once: the loop sends the tools' schemas
    with every model call, and pydantic builds one anew each time it is asked. Shared:
    read it, do not change it."""
    schema: JsonObject = arguments.model_json_schema()
    return schema


def approval_rule(owner: str, approvers: Sequence[str], quorum: int) -> tuple[tuple[str, ...], int]:
    """``approvers`` and ``quorum`` of a tool (or agent), checked: raises ``ValueError``
    naming ``owner`` when they make no sense."""
    if isinstance(approvers, str):
        raise ValueError(f"{owner}: approvers must be a list of roles, not one string")
    roles = tuple(approvers)
    if any(not isinstance(r, str) or not r.strip() for r in roles):
        raise ValueError(f"{owner}: every approver role must be a non-empty string")
    if isinstance(quorum, bool) or not isinstance(quorum, int) or quorum < 1:
        raise ValueError(f"{owner}: quorum must be a whole number of at least 1")
    return roles, quorum


def requires_approval(tool: Tool) -> bool:
    return isinstance(tool, RequiresApproval) or tool.effect in (
        Effect.IDEMPOTENT_WRITE,
        Effect.WRITE,
    )


def render_result(value: JsonValue) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def _describe(name: str, exc: ValidationError) -> str:
    problems = "; ".join(
        f"{'.'.join(str(p) for p in err['loc']) or '(arguments)'}: {err['msg']}"
        for err in exc.errors(include_url=False)
    )
    return f'invalid arguments for tool "{name}": {problems}'


class FunctionTool(Tool):
    """A tool made from a plain function by :func:`tool`."""

    def __init__(
        self,
        fn: ToolFunction,
        *,
        name: str | None,
        description: str | None,
        effect: Effect,
        approvers: Sequence[str] = (),
        quorum: int = 1,
    ) -> None:
        self.fn = fn
        self.name = name or fn.__name__
        self.description = description or inspect.getdoc(fn) or ""
        self.effect = effect
        self.approvers, self.quorum = approval_rule(f"tool {self.name!r}", approvers, quorum)
        self._ctx_params, self.arguments = _arguments_model(fn, self.name)

    def invoke(self, arguments: JsonObject, ctx: ToolContext) -> JsonValue:
        values = dict(self.arguments.model_validate(arguments))
        for param in self._ctx_params:
            values[param] = ctx
        result: JsonValue = self.fn(**values)
        return result


def _arguments_model(fn: ToolFunction, name: str) -> tuple[list[str], type[BaseModel]]:
    hints = get_type_hints(fn)
    ctx_params: list[str] = []
    fields: dict[str, Any] = {}
    for param in inspect.signature(fn).parameters.values():
        annotation = hints.get(param.name, Any)
        if annotation is ToolContext:
            ctx_params.append(param.name)
            continue
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[param.name] = (annotation, default)
    model = create_model(f"{name}_arguments", __config__=ConfigDict(extra="forbid"), **fields)
    return ctx_params, model


@overload
def tool(fn: ToolFunction, /) -> FunctionTool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    effect: Effect = Effect.READ,
    approvers: Sequence[str] = (),
    quorum: int = 1,
) -> Callable[[ToolFunction], FunctionTool]: ...


def tool(
    fn: ToolFunction | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    effect: Effect = Effect.READ,
    approvers: Sequence[str] = (),
    quorum: int = 1,
) -> FunctionTool | Callable[[ToolFunction], FunctionTool]:
    """Turn a function into a tool; its type hints become the JSON schema.

    A parameter annotated ``ToolContext`` is injected and never shown to the model.
    ``approvers`` and ``quorum``: who may approve its calls, and how many must (see
    :class:`Tool`).
    """

    def wrap(f: ToolFunction) -> FunctionTool:
        return FunctionTool(
            f,
            name=name,
            description=description,
            effect=effect,
            approvers=approvers,
            quorum=quorum,
        )

    return wrap(fn) if fn is not None else wrap
