"""The msgspec schema of the config file and the translation of msgspec's errors.

Owns the per-entry Structs (one server entry, the settings object, a toolset), the loop
that validates one entry and collects every problem in it (msgspec stops at the first),
and the mapping of msgspec's messages to ones that name the key the user wrote with a
close match for a misspelt one. msgspec elides dict keys in error paths (docs/sdk.md §6), so
callers validate each server entry on its own and prefix its name themselves.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, Final, TypeVar

import msgspec
from msgspec import UNSET, UnsetType

__all__ = [
    "DURATION_KEYS",
    "KNOB_KEYS",
    "AuthEntry",
    "CompoundEntry",
    "ExposedToolEntry",
    "ServerEntry",
    "SettingsEntry",
    "SubtoolEntry",
    "SubtoolServerEntry",
    "ToolRefEntry",
    "ToolsetEntry",
    "close_match",
    "convert_collecting",
    "describe_type",
    "field_names",
]

T = TypeVar("T", bound=msgspec.Struct)

Duration = float | str
"""A number of seconds or a string with a unit; `parse_duration` checks it after msgspec."""

_CLOSE_MATCH_CUTOFF: Final = 0.6
"""difflib's default ratio: catches one or two typos in a key without wild guesses."""

_MIN_PREFIX: Final = 3
"""A misspelt key this long that starts a known key is offered that key."""

_EXPECTED_WORDS: Final = {
    "str": "a string",
    "int": "an integer",
    "float": "a number",
    "bool": "true or false",
    "array": "a list",
    "object": "an object",
    "null": "null",
}
_GOT_WORDS: Final = {**_EXPECTED_WORDS, "bool": "a boolean"}

_DURATION_EXPECTED: Final = 'a number of seconds or a string like "30s" or "500ms"'

_ERROR_RE: Final = re.compile(r"^(?P<msg>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.S)
_TOP_KEY_RE: Final = re.compile(r"^\.([^.\[]+)")


class _Knobs(msgspec.Struct, forbid_unknown_fields=True, rename="camel"):
    """Supervision knobs: settable per server and, as defaults, under `settings`."""

    timeout: Duration | UnsetType = UNSET
    max_call_time: Duration | UnsetType = UNSET
    startup_timeout: Duration | UnsetType = UNSET
    health_check_interval: Duration | UnsetType = UNSET
    health_check_timeout: Duration | UnsetType = UNSET
    max_missed_pings: int | UnsetType = UNSET
    restart_delay: Duration | UnsetType = UNSET
    restart_delay_max: Duration | UnsetType = UNSET
    restart_reset_after: Duration | UnsetType = UNSET
    circuit_failures: int | UnsetType = UNSET
    circuit_open_for: Duration | UnsetType = UNSET
    circuit_open_max: Duration | UnsetType = UNSET
    restart_wait: Duration | UnsetType = UNSET
    shutdown_grace: Duration | UnsetType = UNSET
    restart_intensity: int | UnsetType = UNSET
    restart_period: Duration | UnsetType = UNSET
    relist_interval: Duration | UnsetType = UNSET


class ExposedToolEntry(msgspec.Struct, forbid_unknown_fields=True):
    """`exposedTools` object form: `{"original": "write_file", "exposed": "save"}`."""

    original: str
    exposed: str | None = None


class OAuthEntry(msgspec.Struct, forbid_unknown_fields=True, rename="camel"):
    """A server's `oauth` object as written (Claude Code's keys, plus mcpvisor's)."""

    client_id: str | UnsetType = UNSET
    client_secret: str | UnsetType = UNSET
    client_metadata_url: str | UnsetType = UNSET
    callback_port: int | UnsetType = UNSET
    scopes: list[str] | str | UnsetType = UNSET
    grant: str | UnsetType = UNSET
    token_endpoint_auth_method: str | UnsetType = UNSET
    private_key_file: str | UnsetType = UNSET


class OAuthSettingsEntry(msgspec.Struct, forbid_unknown_fields=True, rename="camel"):
    """`settings.oauth` as written: how the proxy runs a login it needs."""

    open_browser: bool | UnsetType = UNSET


class ServerEntry(_Knobs, forbid_unknown_fields=True, rename="camel"):
    """One `mcpServers` entry as written, before defaults, interpolation and transport rules."""

    kind: str | UnsetType = msgspec.field(default=UNSET, name="type")
    transport: str | UnsetType = UNSET
    command: str | UnsetType = UNSET
    args: list[str] | UnsetType = UNSET
    env: dict[str, str] | UnsetType = UNSET
    cwd: str | UnsetType = UNSET
    url: str | UnsetType = UNSET
    headers: dict[str, str] | UnsetType = UNSET
    image: str | UnsetType = UNSET
    docker_args: list[str] | UnsetType = UNSET
    enabled: bool | UnsetType = UNSET
    lazy: bool | UnsetType = UNSET
    scope: str | UnsetType = UNSET
    pool: int | UnsetType = UNSET
    description: str | UnsetType | None = UNSET
    protocol: str | UnsetType = UNSET
    exposed_tools: list[str | ExposedToolEntry] | UnsetType = UNSET
    hidden_tools: list[str] | UnsetType = UNSET
    oauth: OAuthEntry | UnsetType = UNSET
    # Written by other clients; tolerated with a warning (see FOREIGN_KEYS in config.py).
    disabled: bool | UnsetType = UNSET
    disabled_tools: list[str] | UnsetType = UNSET
    always_allow: Any = UNSET
    auto_approve: Any = UNSET
    headers_helper: Any = UNSET


class AuthEntry(msgspec.Struct, forbid_unknown_fields=True, rename="camel"):
    """`settings.auth` as written: the OAuth issuer whose access tokens are accepted."""

    issuer: str
    audience: str | list[str]
    required_scopes: list[str] = msgspec.field(default_factory=list)
    jwks_uri: str | UnsetType = UNSET


class TelemetryEntry(msgspec.Struct, forbid_unknown_fields=True, rename="camel"):
    """`settings.telemetry` as written: where OpenTelemetry traces go (``OTEL_*`` variables win)."""

    endpoint: str | UnsetType = UNSET
    protocol: str | UnsetType = UNSET
    service_name: str | UnsetType = UNSET
    sample_ratio: float | UnsetType = UNSET
    enabled: bool | UnsetType = UNSET


class TokenEntry(msgspec.Struct, forbid_unknown_fields=True):
    """A named token in object form: `{"token": ..., "toolset"?: ...}`; a client presenting
    it sees only that toolset (the plain string form sees what the proxy exposes)."""

    token: str
    toolset: str | UnsetType | None = UNSET


class MetricsEntry(msgspec.Struct, forbid_unknown_fields=True):
    """`settings.metrics` as written: `{"public": true}` opens `/metrics` on loopback without a token."""

    public: bool = False


class SettingsEntry(_Knobs, forbid_unknown_fields=True, rename="camel"):
    """The `settings` object as written."""

    exposure: str | UnsetType = UNSET
    namespacing: str | UnsetType = UNSET
    env_mode: str | UnsetType = UNSET
    startup_wait: Duration | UnsetType = UNSET
    max_message_bytes: int | UnsetType = UNSET
    pin_schemas: str | UnsetType = UNSET
    fast_path: bool | UnsetType = UNSET
    state_dir: str | UnsetType | None = UNSET
    log_level: str | UnsetType = UNSET
    auth_token: str | UnsetType | None = UNSET
    auth_tokens: dict[str, str | TokenEntry] | UnsetType = UNSET
    auth: AuthEntry | UnsetType | None = UNSET
    oauth: OAuthSettingsEntry | UnsetType = UNSET
    allowed_hosts: list[str] | UnsetType = UNSET
    allowed_origins: list[str] | UnsetType = UNSET
    max_sessions: int | UnsetType = UNSET
    session_idle_timeout: Duration | UnsetType = UNSET
    handshake_timeout: Duration | UnsetType = UNSET
    drain_timeout: Duration | UnsetType = UNSET
    discovery_budget: int | UnsetType = UNSET
    journal: str | UnsetType | None = UNSET
    journal_payloads: bool | UnsetType = UNSET
    store: str | UnsetType | None = UNSET
    telemetry: TelemetryEntry | UnsetType | None = UNSET
    metrics: MetricsEntry | UnsetType = UNSET


class ToolRefEntry(msgspec.Struct, forbid_unknown_fields=True, rename="camel"):
    """A toolset member in object form (HyperTool's shape): `{namespacedName | refId, alias?}`."""

    namespaced_name: str | UnsetType = UNSET
    ref_id: str | UnsetType = UNSET
    alias: str | UnsetType | None = UNSET


class ToolsetEntry(msgspec.Struct, forbid_unknown_fields=True):
    """A toolset in object form: `{"description": ..., "tools": [...]}`."""

    tools: list[Any]  # each member is checked on its own, so every bad one is reported
    description: str | None = None


class SubtoolEntry(msgspec.Struct, forbid_unknown_fields=True):
    """One subtool of a compound tool: `{"name": "search", "description"?: "..."}`."""

    name: str
    description: str | None = None


class SubtoolServerEntry(msgspec.Struct, forbid_unknown_fields=True):
    """A compound tool's subtools of one server: `{"tools": [...]}`."""

    tools: list[Any]  # each subtool is checked on its own, so every bad one is reported


class CompoundEntry(msgspec.Struct, forbid_unknown_fields=True):
    """A compound tool of the top-level `tools` section (MCP Coordinator's shape)."""

    subtools: dict[str, Any]  # each server's entry is checked on its own (msgspec elides dict keys)
    description: str | None = None


KNOB_KEYS: Final = _Knobs.__struct_encode_fields__
DURATION_KEYS: Final = (frozenset(KNOB_KEYS) - {"maxMissedPings", "circuitFailures", "restartIntensity"}) | {
    "startupWait",
    "sessionIdleTimeout",
    "handshakeTimeout",
    "drainTimeout",
}


def field_names(struct: type[msgspec.Struct]) -> tuple[str, ...]:
    """The keys a Struct accepts, as written in the file (its encoded names: read off the
    class, where `msgspec.structs.fields` would resolve every annotation, ~0.2 ms a Struct)."""
    return struct.__struct_encode_fields__


def close_match(word: str, candidates: Iterable[str]) -> str:
    """` (did you mean "x"?)` for the closest candidate (case-insensitive), or ``."""
    import difflib  # here: only a misspelt key or value needs a suggestion

    by_lower = {c.lower(): c for c in candidates}
    found = difflib.get_close_matches(word.lower(), list(by_lower), n=1, cutoff=_CLOSE_MATCH_CUTOFF)
    if not found and len(word) >= _MIN_PREFIX:  # "desc" for "description"
        found = [c for c in by_lower if c.startswith(word.lower())][:1]
    return f' (did you mean "{by_lower[found[0]]}"?)' if found else ""


def describe_type(value: object) -> str:
    """How a JSON value's type reads in a message: `a string`, `a list`, `a boolean`..."""
    name = {str: "str", bool: "bool", int: "int", float: "float", list: "array", dict: "object"}.get(
        type(value), "null" if value is None else type(value).__name__
    )
    return _GOT_WORDS.get(name, name)


def _words(types: str, table: Mapping[str, str]) -> str:
    return " or ".join(table.get(t.strip(), t.strip()) for t in types.split("|"))


def _field_path(path: str, data: Mapping[str, Any]) -> str:
    """msgspec's `.env[...]` path as the user's `env.KEY` (first value of the wrong type)."""
    m = re.fullmatch(r"\.([^.\[]+)\[\.\.\.\]", path)
    if m and isinstance(data.get(m[1]), dict):
        bad = next((k for k, v in data[m[1]].items() if not isinstance(v, str)), None)
        if bad is not None:
            return f"{m[1]}.{bad}"
    return path.removeprefix(".")


def _translate(
    error: str, data: Mapping[str, Any], known: tuple[str, ...], nested: Mapping[str, tuple[str, ...]]
) -> tuple[str | None, str]:
    """One msgspec ValidationError -> (the top-level key to drop, a readable problem)."""
    m = _ERROR_RE.match(error)
    assert m is not None  # the pattern matches any string
    msg, path = m["msg"], m["path"] or ""
    top = _TOP_KEY_RE.match(path)
    key = top[1] if top else None
    field = _field_path(path, data)
    if u := re.fullmatch(r"Object contains unknown field `(.+)`", msg):
        name = u[1]
        if key is None:
            return name, f'unknown field "{name}"{close_match(name, known)}'
        return key, f'field "{field}": unknown field "{name}"{close_match(name, nested.get(key, ()))}'
    if r := re.fullmatch(r"Object missing required field `(.+)`", msg):
        where = f'field "{field}": ' if field else ""
        return key, f'{where}missing required field "{r[1]}"'
    if e := re.fullmatch(r"Expected `([^`]+)`(.*?)(?:, got `([^`]+)`)?", msg):
        expected = (
            _DURATION_EXPECTED if key in DURATION_KEYS and field == key else _words(e[1], _EXPECTED_WORDS)
        )
        text = f"expected {expected}{e[2]}"
        if e[3]:
            text += f", got {_words(e[3], _GOT_WORDS)}"
        return key, f'field "{field}": {text}'
    return key, f'field "{field}": {msg[:1].lower()}{msg[1:]}'


def convert_collecting(
    data: Mapping[str, Any],
    struct: type[T],
    *,
    suggest: tuple[str, ...] | None = None,
    nested: Mapping[str, tuple[str, ...]] | None = None,
) -> tuple[T | None, list[str], set[str]]:
    """Validate `data` as `struct`, collecting every problem instead of the first.

    Each failing top-level key is reported and dropped, and the rest is validated again,
    so one pass names every unknown key and every wrong type.

    Args:
        data: the decoded JSON object.
        struct: a Struct with `forbid_unknown_fields=True`.
        suggest: keys offered as close matches for an unknown key (default: all fields).
        nested: for a top-level key holding objects, the keys those objects accept.

    Returns:
        The Struct built from the valid keys (None only if no progress was possible), the
        problems, and the keys that were dropped.
    """
    known = suggest if suggest is not None else field_names(struct)
    work = dict(data)
    problems: list[str] = []
    dropped: set[str] = set()
    for _ in range(len(data) + 1):
        try:
            return msgspec.convert(work, struct), problems, dropped
        except msgspec.ValidationError as err:
            key, problem = _translate(str(err), work, known, nested or {})
            problems.append(problem)
            if key is None or key not in work:
                break
            del work[key]
            dropped.add(key)
    return None, problems, dropped
