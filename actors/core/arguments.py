"""A tool's arguments against its ``inputSchema``: the one checker (sans-IO).

`use_tool` (and through it the fast path) and compound tools both refuse a call whose
arguments fail the tool's schema before anything is sent; they share this checker and
its caches, and each words the error its own way.

Owns:

* `checker_of`: the compiled `Checker` of a schema (None when the schema is itself not
  valid JSON Schema: the upstream decides), cached by the schema object and, behind
  that, by its JSON text, so a re-listed identical schema is not compiled again;
* `Checker.first_error`: None for valid arguments, else jsonschema's most relevant
  error. The common flat schema (an object of typed properties, some required) is
  answered "valid" in about a microsecond by a quick check; anything that check cannot
  vouch for goes to jsonschema (15-30 us, measured), which has the last word.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from typing import Any, Final

__all__ = ["VALIDATOR_CACHE", "Checker", "checker_of"]

VALIDATOR_CACHE: Final = 1024
"""Compiled checkers kept (one per distinct tool schema): more than any catalog holds;
the identity cache is dropped whole when full, so a long-lived proxy whose upstreams keep
changing stays bounded."""

_ANNOTATIONS: Final = frozenset({"description", "title", "default", "examples", "$schema", "$id", "$comment"})
"""Keywords that never make an instance invalid."""
_FLAT_TOP: Final = _ANNOTATIONS | {"type", "properties", "required", "additionalProperties"}
_PROPERTY_ANNOTATIONS: Final = _ANNOTATIONS | {"format"}
"""``format`` asserts nothing without a format checker, as jsonschema is used here."""
_BOUNDS: Final[Mapping[str, Callable[[Any, Any], bool]]] = {
    "minimum": lambda v, b: v >= b,
    "maximum": lambda v, b: v <= b,
    "exclusiveMinimum": lambda v, b: v > b,
    "exclusiveMaximum": lambda v, b: v < b,
}
"""Draft 6+ numeric bounds (a boolean ``exclusiveMinimum`` is draft 4's: not flat)."""


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


_JSON_TYPES: Final[Mapping[str, Callable[[Any], bool]]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: (isinstance(v, int) and not isinstance(v, bool))
    or (isinstance(v, float) and v.is_integer()),
    "number": _is_number,
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
}
"""JSON Schema's types over decoded JSON (an integral float is an integer, as in
jsonschema from draft 4 on)."""


def _type_check(kind: Any) -> Callable[[Any], bool] | bool:
    """A property's ``type`` (a name or a list of names) as one predicate; False when not plain."""
    kinds = (kind,) if isinstance(kind, str) else tuple(kind) if isinstance(kind, list) else None
    if not kinds or not all(isinstance(k, str) and k in _JSON_TYPES for k in kinds):
        return False
    if len(kinds) == 1:
        return _JSON_TYPES[kinds[0]]
    checks = tuple(_JSON_TYPES[k] for k in kinds)
    return lambda v: any(check(v) for check in checks)


def _property_check(prop: Mapping[str, Any]) -> Any:
    """One predicate for a flat property schema, None when anything goes, or False when
    it is not flat enough for the quick check."""
    checks: list[Any] = []
    for key, bound in prop.items():
        if key in _PROPERTY_ANNOTATIONS:
            continue
        if key == "type":
            check = _type_check(bound)
            if check is False:
                return False
            checks.append(check)
        elif key == "enum" and isinstance(bound, list) and all(isinstance(e, str) for e in bound):
            checks.append(lambda v, allowed=frozenset(bound): isinstance(v, str) and v in allowed)
        elif key in _BOUNDS and _is_number(bound):
            checks.append(lambda v, op=_BOUNDS[key], b=bound: not _is_number(v) or op(v, b))
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


class _Flat:
    """The quick check of a flat schema: answers only "valid for sure"."""

    __slots__ = ("closed", "required", "types")

    def __init__(self, types: dict[str, Any], required: tuple[str, ...], closed: bool) -> None:
        self.types = types
        self.required = required
        self.closed = closed

    @classmethod
    def of(cls, schema: Mapping[str, Any]) -> _Flat | None:
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties", True)
        required = schema.get("required") or []
        if (schema.get("type") != "object" or not set(schema) <= _FLAT_TOP
                or not isinstance(props, Mapping) or not isinstance(extra, bool)
                or not isinstance(required, list)):
            return None
        types: dict[str, Any] = {}
        for name, prop in props.items():
            check = _property_check(prop) if isinstance(prop, Mapping) else False
            if check is False:
                return None
            types[name] = check
        return cls(types, tuple(required), not extra)

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


class Checker:
    """One schema compiled: the quick check when the schema is flat, and jsonschema's
    validator for everything else and for the message."""

    __slots__ = ("flat", "validator")

    def __init__(self, validator: Any, flat: _Flat | None) -> None:
        self.validator = validator
        self.flat = flat

    def first_error(self, arguments: Mapping[str, Any]) -> Any:
        """None when ``arguments`` are valid, else jsonschema's most relevant error.

        Whatever the validator raises (an unresolvable ``$ref`` ...) is the caller's to judge.
        """
        flat = self.flat
        if flat is not None and flat.is_valid(arguments):
            return None
        instance = arguments if isinstance(arguments, dict) else dict(arguments)
        if self.validator.is_valid(instance):  # the common case, about twice as fast as collecting errors
            return None
        import jsonschema.exceptions  # type: ignore[import-untyped]  # loaded by _compiled already
        return jsonschema.exceptions.best_match(self.validator.iter_errors(instance))


@functools.lru_cache(maxsize=VALIDATOR_CACHE)
def _compiled(schema_json: str) -> Checker | None:
    """The checker of one schema (None when the schema itself is invalid)."""
    # jsonschema (and attrs, referencing, rpds under it) is imported the first time a schema
    # is compiled: only compound tools and use_tool check arguments, and a proxy without
    # them should not pay its import time and memory at start.
    import jsonschema.exceptions
    import jsonschema.validators  # type: ignore[import-untyped]  # no stubs in the venv

    schema = json.loads(schema_json)
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except jsonschema.exceptions.SchemaError:
        return None
    flat = _Flat.of(schema) if cls is not jsonschema.Draft3Validator else None  # draft 3's integers differ
    return Checker(cls(schema), flat)


_BY_IDENTITY: Final[dict[int, tuple[Mapping[str, Any], Checker | None]]] = {}
"""Schema object -> its checker: a call and a rebuild see the same listed dicts again and
again, and serialising each schema for `_compiled`'s key would cost more than the check."""


def checker_of(schema: Mapping[str, Any]) -> Checker | None:
    """The checker of ``schema`` (shared by every tool with that schema), None when the
    schema is not valid JSON Schema."""
    hit = _BY_IDENTITY.get(id(schema))
    if hit is not None and hit[0] is schema:
        return hit[1]
    checker = _compiled(json.dumps(schema, sort_keys=True, separators=(",", ":"), default=str))
    if len(_BY_IDENTITY) >= VALIDATOR_CACHE:
        _BY_IDENTITY.clear()
    _BY_IDENTITY[id(schema)] = (schema, checker)  # holding the schema keeps its id its own
    return checker
