"""``use_tool {tool_name, arguments}``: what a call means before anything is sent (sans-IO).

Owns:

* `plan_use`: from use_tool's arguments and the current snapshot, one of `CallRoute`
  (an upstream tool, its arguments checked against its input schema), `CallLocal` (a
  management tool), `NeedsLoad` (the name belongs to a lazy server not loaded yet), or
  a ``CallToolResult`` with ``isError`` (unknown tool with close matches, bad arguments
  naming the field). The front's SDK path, the fast path and the embedding API all use
  it, so they refuse and route alike.
* `check_arguments`: JSON Schema validation of a tool's arguments (jsonschema, the SDK's
  own dependency), validators cached per schema object.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import jsonschema  # type: ignore[import-untyped]
from jsonschema import Draft202012Validator

from actors import wire
from actors.core.catalog import Snapshot, ToolRoute
from actors.core.discovery import USE_TOOL, lazy_owner

logger = logging.getLogger(__name__)

VALIDATOR_CACHE: Final = 1024
"""Compiled validators kept (one per tool schema): more than any catalog holds; the cache
is dropped whole when full, so a long-lived proxy whose upstreams keep changing stays bounded."""

USE_TOOL_KEYS: Final = ("tool_name", "arguments")

_validators: dict[int, tuple[Mapping[str, Any], Any]] = {}
_simple: dict[int, _Simple] = {}


@dataclass(frozen=True, slots=True)
class CallRoute:
    route: ToolRoute
    arguments: dict[str, Any]


@dataclass(frozen=True, slots=True)
class CallLocal:
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True, slots=True)
class NeedsLoad:
    server: str
    tool_name: str


_SIMPLE_TYPES: Final[dict[str, Any]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
    "null": lambda v: v is None,
}
_SIMPLE_OBJECT_KEYS: Final = frozenset({"type", "properties", "required", "additionalProperties",
                                        "description", "title", "$schema"})
_ANNOTATION_KEYS: Final = frozenset({"description", "title", "default", "examples", "format"})
"""Property keys that never make a value invalid (``format`` asserts nothing without a
format checker, as jsonschema is used here)."""


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _property_check(prop: Mapping[str, Any]) -> Any:
    """One predicate for a flat property schema, or False when it is not flat enough."""
    checks: list[Any] = []
    for key, bound in prop.items():
        if key in _ANNOTATION_KEYS:
            continue
        if key == "type" and isinstance(bound, str) and bound in _SIMPLE_TYPES:
            checks.append(_SIMPLE_TYPES[bound])
        elif key == "enum" and isinstance(bound, list) and all(isinstance(e, str) for e in bound):
            checks.append(lambda v, allowed=frozenset(bound): isinstance(v, str) and v in allowed)
        elif key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum") and _is_number(bound):
            op = {"minimum": float.__ge__, "maximum": float.__le__, "exclusiveMinimum": float.__gt__,
                  "exclusiveMaximum": float.__lt__}[key]
            checks.append(lambda v, op=op, b=float(bound): not _is_number(v) or op(float(v), b))
        elif key in ("minLength", "maxLength") and isinstance(bound, int) and not isinstance(bound, bool):
            longer = key == "minLength"
            checks.append(lambda v, b=bound, longer=longer: not isinstance(v, str)
                          or (len(v) >= b if longer else len(v) <= b))
        else:
            return False
    if not checks:
        return None
    if len(checks) == 1:
        return checks[0]
    return lambda v: all(check(v) for check in checks)


class _Simple:
    """A quick check for the common flat schema (an object of typed properties, some
    required), about 1 us instead of jsonschema's 15-25 us: use_tool's budget over a direct
    call is 0.1 ms. Anything it cannot decide alone goes to jsonschema."""

    __slots__ = ("closed", "required", "types")

    def __init__(self, types: dict[str, Any], required: tuple[str, ...], closed: bool) -> None:
        self.types = types
        self.required = required
        self.closed = closed

    @classmethod
    def of(cls, schema: Mapping[str, Any]) -> _Simple | None:
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        if (schema.get("type") != "object" or not set(schema) <= _SIMPLE_OBJECT_KEYS
                or not isinstance(props, dict) or not isinstance(extra, bool)
                or not isinstance(schema.get("required", []), list)):
            return None
        types: dict[str, Any] = {}
        for name, prop in props.items():
            check = _property_check(prop) if isinstance(prop, dict) else False
            if check is False:
                return None
            types[name] = check
        return cls(types, tuple(schema.get("required", [])), not extra)

    def is_valid(self, arguments: Mapping[str, Any]) -> bool:
        for name in self.required:
            if name not in arguments:
                return False
        for name, value in arguments.items():
            check = self.types.get(name, False)
            if check is False:
                if self.closed:
                    return False
            elif check is not None and not check(value):
                return False
        return True


def _validator(schema: Mapping[str, Any]) -> Any:
    hit = _validators.get(id(schema))
    if hit is not None and hit[0] is schema:
        return hit[1]
    if len(_validators) >= VALIDATOR_CACHE:
        _validators.clear()
        _simple.clear()
    cls = jsonschema.validators.validator_for(schema, default=Draft202012Validator)
    try:
        cls.check_schema(schema)
        validator = cls(schema)
    except jsonschema.exceptions.SchemaError:
        validator = None  # an invalid schema: the upstream decides (see check_arguments)
    _validators[id(schema)] = (schema, validator)  # the schema is kept alive, so its id stays its own
    simple = _Simple.of(schema) if validator is not None else None
    if simple is not None:
        _simple[id(schema)] = simple
    return validator


def check_arguments(tool: Mapping[str, Any], arguments: Mapping[str, Any]) -> str | None:
    """None when ``arguments`` satisfy ``tool``'s ``inputSchema``; else what is wrong,
    naming the field (``arguments.path: 'x' is not of type 'integer'``).

    A schema that is itself invalid is not held against the caller: the upstream decides.
    """
    schema = tool.get("inputSchema")
    if not isinstance(schema, Mapping):
        return None
    validator = _validator(schema)
    if validator is None:
        return None
    simple = _simple.get(id(schema))
    if simple is not None and simple.is_valid(arguments):
        return None
    try:
        if validator.is_valid(arguments):  # the common case, about twice as fast as collecting errors
            return None
        error = jsonschema.exceptions.best_match(validator.iter_errors(dict(arguments)))
    except Exception:  # the validator itself failed (an unresolvable $ref ...): the upstream decides
        logger.debug("cannot check arguments against %r", schema, exc_info=True)
        return None
    if error is None:
        return None
    where = "arguments" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
    return f"{where}: {error.message}"


def _error(text: str, **data: Any) -> dict[str, Any]:
    return wire.tool_error_result(text, {"tool": USE_TOOL, **data})


def plan_use(snapshot: Snapshot, arguments: Any) -> CallRoute | CallLocal | NeedsLoad | dict[str, Any]:
    """What ``use_tool`` with ``arguments`` does now; a dict is the ``isError`` answer."""
    index = snapshot.discovery
    if not isinstance(arguments, Mapping):
        return _error('use_tool takes {"tool_name": NAME, "arguments": {...}}.', error="invalid_arguments")
    extra = [k for k in arguments if k not in USE_TOOL_KEYS]
    tool_name = arguments.get("tool_name")
    if extra or not isinstance(tool_name, str) or not tool_name:
        why = (f"unknown argument(s) {', '.join(map(repr, extra))}" if extra
               else "'tool_name' must be a non-empty string")
        return _error(f"use_tool: {why}; it takes tool_name and arguments.", error="invalid_arguments")
    args = arguments.get("arguments")
    if args is None:
        args = {}
    if not isinstance(args, Mapping):
        return _error(f"use_tool: 'arguments' must be an object (the arguments of {tool_name}).",
                      error="invalid_arguments")
    name = index.exposed_name(tool_name, snapshot) if index is not None else (
        tool_name if tool_name in snapshot.tools else None)
    if name is None:
        owner = lazy_owner(tool_name, (*index.lazy, *index.unavailable)) if index is not None else None
        if owner is not None:
            return NeedsLoad(owner.name, tool_name)
        close = index.close_matches(tool_name) if index is not None else []
        text = f"Unknown tool {tool_name!r}."
        text += (" Did you mean: " + ", ".join(close) + "?") if close else " Find tools with discover_tool."
        return _error(text, error="unknown_tool", toolName=tool_name, didYouMean=close)
    route = snapshot.tools.get(name)
    if route is None:
        return CallLocal(name, dict(args))
    problem = check_arguments(route.wire, args)
    if problem is not None:
        return _error(f"Invalid arguments for {name}: {problem}. Nothing was sent; see its input schema with "
                      f"discover_tool {{\"tool_name\": \"{name}\"}}.", error="invalid_arguments",
                      toolName=name, problem=problem)
    return CallRoute(route, dict(args))
