"""Turn a decoded config document into a `Config`, collecting every problem on the way.

Owns the rules that sit on top of the msgspec schema: top-level keys, the transport of
each server and the fields it takes, foreign keys from other clients, interpolation per
field, duration bounds, settings defaults flowing into servers, toolset declarations and
compound tools (the top-level `tools` section, MCP Coordinator's shape).
Everything is checked before anything is returned, so a bad file never partially applies.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any
from urllib.parse import urlsplit

from msgspec import UNSET

from actors.core.catalog import bare, flatten
from actors.core.compound import CompoundDecl, SubtoolDecl
from actors.core.toolsets import MANAGEMENT_TOOLS
from supervisor._config_durations import format_duration, parse_duration
from supervisor._config_env import ENV_MODES, Interpolator, parse_dotenv
from supervisor._config_schema import (
    AuthEntry,
    CompoundEntry,
    ExposedToolEntry,
    ServerEntry,
    SettingsEntry,
    SubtoolEntry,
    SubtoolServerEntry,
    ToolRefEntry,
    ToolsetEntry,
    close_match,
    convert_collecting,
    describe_type,
    field_names,
)
from supervisor._config_types import (
    APPLIES,
    DEFAULT_DISCOVERY_BUDGET,
    DEFAULT_MAX_SESSIONS,
    DISCOVERY_BUDGET_MAX,
    DISCOVERY_BUDGET_MIN,
    DOTENV_NAME,
    EXPOSURES,
    FOREIGN,
    HTTP_ALIASES,
    KNOB_PAIRS,
    KNOBS,
    LOG_LEVELS,
    MAX_MESSAGE_BYTES,
    MAX_POOL,
    MAX_SESSIONS_HIGH,
    MIN_MESSAGE_BYTES,
    MIN_TOKEN_CHARS,
    NAME_RE,
    NAME_RULE,
    NAMESPACINGS,
    PIN_SCHEMAS,
    PROTOCOLS,
    REQUIRED,
    SCOPES,
    SERVER_KEYS,
    SESSION_IDLE_MAX_S,
    SESSION_IDLE_MIN_S,
    STARTUP_WAIT_MAX_S,
    TOP_KEYS,
    TRANSPORT_FIELDS,
    TRANSPORTS,
    URL_SCHEMES,
    Config,
    ConfigError,
    ExposedTool,
    Knob,
    OAuthSettings,
    ServerSpec,
    Settings,
    ToolRef,
    ToolsetDecl,
)

__all__ = ["build"]

_KNOB_BY_KEY = {k.key: k for k in KNOBS}


def _quoted(choices: tuple[str, ...]) -> str:
    return ", ".join(f'"{c}"' for c in choices)


def build(doc: Mapping[str, Any], *, path: Path | None, label: str, env: Mapping[str, str]) -> Config:
    """Validate and resolve `doc`; raise ConfigError with every problem, or return the Config."""
    return _Builder(doc, path=path, label=label, env=env).run()


class _Builder:
    """One pass over one document; `problems` fail the load, `warnings` ride along."""

    def __init__(
        self, doc: Mapping[str, Any], *, path: Path | None, label: str, env: Mapping[str, str]
    ) -> None:
        self.doc = doc
        self.path = path
        self.label = label
        self.env = env
        self.base = Path(os.path.abspath(path.parent if path is not None else Path()))
        self.problems: list[str] = []
        self.warnings: list[str] = []
        self.interp = Interpolator("disable", process={}, dotenv={}, builtins={})
        self.server_names: tuple[str, ...] = ()
        self.compound_names: frozenset[str] = frozenset()
        self.settings_entry: SettingsEntry | None = None

    def problem(self, where: str, msg: str) -> None:
        self.problems.append(f"{self.label}: {where}: {msg}" if where else f"{self.label}: {msg}")

    def warn(self, where: str, msg: str) -> None:
        self.warnings.append(f"{self.label}: {where}: {msg}" if where else f"{self.label}: {msg}")

    def section(self, key: str) -> Mapping[str, Any]:
        """A top-level object (empty when absent); anything else is a problem."""
        value = self.doc.get(key, {})
        if isinstance(value, Mapping):
            return value
        self.problem("", f'"{key}" must be an object, got {describe_type(value)}')
        return {}

    def run(self) -> Config:
        if "servers" in self.doc:
            self.problem(
                "", '"servers" is VS Code format: use `mcpvisor import vscode` (mcpvisor reads "mcpServers")'
            )
        for key in self.doc:
            if key not in TOP_KEYS and key != "servers":
                self.warn("", f'unknown top-level key "{key}" ignored{close_match(key, TOP_KEYS[1:])}')
        settings = self.settings(self.section("settings"))
        self.interp = self.interpolator(settings.env_mode)
        settings = self.security(settings)
        servers: dict[str, ServerSpec] = {}
        entries = self.section("mcpServers")
        self.server_names = tuple(entries)
        for name, entry in entries.items():
            spec = self.server(name, entry, settings)
            if spec is not None:
                servers[name] = spec
        compounds = self.compounds(servers, settings)
        toolsets = {}
        for name, entry in self.section("toolsets").items():
            decl = self.toolset(name, entry)
            if decl is not None:
                toolsets[name] = decl
        if self.problems:
            raise ConfigError(self.problems, self.path)
        return Config(
            path=self.path,
            servers=MappingProxyType(servers),
            toolsets=MappingProxyType(toolsets),
            settings=settings,
            compound_tools=MappingProxyType(compounds),
            warnings=tuple(self.warnings),
            raw=MappingProxyType(copy.deepcopy(dict(self.doc))),
        )

    # -- settings -----------------------------------------------------------------------

    def choice(self, where: str, key: str, value: str, choices: tuple[str, ...]) -> bool:
        if value in choices:
            return True
        self.problem(
            where, f'field "{key}": "{value}" is not one of {_quoted(choices)}{close_match(value, choices)}'
        )
        return False

    def knob(self, where: str, knob: Knob, value: Any) -> float | None:
        """Parse one supervision knob; a problem and None when it is out of bounds."""
        if knob.count:
            if knob.low <= value <= knob.high:
                return float(value)
            self.problem(
                where, f'field "{knob.key}": {value} is out of range ({knob.low:g} to {knob.high:g})'
            )
            return None
        try:
            return parse_duration(value, field=knob.key, max_s=knob.high, min_s=knob.low)
        except ValueError as err:
            self.problem(where, str(err))
            return None

    def knobs(self, where: str, entry: SettingsEntry | ServerEntry) -> dict[str, float]:
        """The knobs `entry` sets, parsed, keyed by attribute name."""
        out: dict[str, float] = {}
        for knob in KNOBS:
            value = getattr(entry, knob.attr)
            if value is not UNSET:
                parsed = self.knob(where, knob, value)
                if parsed is not None:
                    out[knob.attr] = int(parsed) if knob.count else parsed
        return out

    def check_pairs(self, where: str, merged: Mapping[str, float], given: Mapping[str, float] | None) -> None:
        """A first delay or open period longer than its cap is a problem (if `where` set one)."""
        for first_key, cap_key in KNOB_PAIRS:
            first, cap = _KNOB_BY_KEY[first_key], _KNOB_BY_KEY[cap_key]
            if given is not None and first.attr not in given and cap.attr not in given:
                continue
            a, b = merged.get(first.attr, first.default), merged.get(cap.attr, cap.default)
            if a > b:
                too_long = f"{format_duration(a)} is longer than"
                self.problem(where, f'field "{first_key}": {too_long} "{cap_key}" ({format_duration(b)})')

    def settings(self, raw: Mapping[str, Any]) -> Settings:
        where = "settings"
        entry, problems, _ = convert_collecting(raw, SettingsEntry, nested={"auth": field_names(AuthEntry)})
        for p in problems:
            self.problem(where, p)
        self.settings_entry = entry
        if entry is None:
            return Settings()
        values: dict[str, Any] = {}
        for key, attr, choices in (
            ("exposure", "exposure", EXPOSURES),
            ("namespacing", "namespacing", NAMESPACINGS),
            ("envMode", "env_mode", ENV_MODES),
            ("pinSchemas", "pin_schemas", PIN_SCHEMAS),
            ("logLevel", "log_level", LOG_LEVELS),
        ):
            value = getattr(entry, attr)
            if value is not UNSET and self.choice(where, key, value, choices):
                values[attr] = value
        if entry.startup_wait is not UNSET:
            try:
                values["startup_wait"] = parse_duration(
                    entry.startup_wait, field="startupWait", max_s=STARTUP_WAIT_MAX_S
                )
            except ValueError as err:
                self.problem(where, str(err))
        if entry.max_message_bytes is not UNSET:
            if MIN_MESSAGE_BYTES <= entry.max_message_bytes <= MAX_MESSAGE_BYTES:
                values["max_message_bytes"] = entry.max_message_bytes
            else:
                self.problem(
                    where,
                    f'field "maxMessageBytes": {entry.max_message_bytes} is out of range '
                    f"({MIN_MESSAGE_BYTES} to {MAX_MESSAGE_BYTES} bytes, 1 KiB to 1 GiB)",
                )
        if entry.fast_path is not UNSET:
            values["fast_path"] = entry.fast_path
        if entry.journal is not UNSET:
            values["journal"] = None if entry.journal is None else self.local_path(entry.journal)
        if entry.journal_payloads is not UNSET:
            values["journal_payloads"] = entry.journal_payloads
        if entry.state_dir is not UNSET:
            values["state_dir"] = None if entry.state_dir is None else self.local_path(entry.state_dir)
        if entry.max_sessions is not UNSET:
            if 1 <= entry.max_sessions <= MAX_SESSIONS_HIGH:
                values["max_sessions"] = entry.max_sessions
            else:
                self.problem(where, f'field "maxSessions": {entry.max_sessions} is out of range '
                                    f"(1 to {MAX_SESSIONS_HIGH}; the default is {DEFAULT_MAX_SESSIONS})")
        if entry.discovery_budget is not UNSET:
            if DISCOVERY_BUDGET_MIN <= entry.discovery_budget <= DISCOVERY_BUDGET_MAX:
                values["discovery_budget"] = entry.discovery_budget
            else:
                self.problem(where, f'field "discoveryBudget": {entry.discovery_budget} is out of range '
                                    f"({DISCOVERY_BUDGET_MIN} to {DISCOVERY_BUDGET_MAX} bytes; the default "
                                    f"is {DEFAULT_DISCOVERY_BUDGET})")
        if entry.session_idle_timeout is not UNSET:
            try:
                values["session_idle_timeout"] = parse_duration(
                    entry.session_idle_timeout, field="sessionIdleTimeout", max_s=SESSION_IDLE_MAX_S,
                    min_s=SESSION_IDLE_MIN_S,
                )
            except ValueError as err:
                self.problem(where, str(err))
        if entry.allowed_hosts is not UNSET:
            values["allowed_hosts"] = tuple(
                self.allowed_host(where, i, h) for i, h in enumerate(entry.allowed_hosts)
            )
        if entry.allowed_origins is not UNSET:
            values["allowed_origins"] = tuple(
                self.allowed_origin(where, i, o) for i, o in enumerate(entry.allowed_origins)
            )
        defaults = self.knobs(where, entry)
        self.check_pairs(where, defaults, None)
        return Settings(**values, server_defaults=MappingProxyType(defaults))

    def allowed_host(self, where: str, i: int, host: str) -> str:
        """A host name or address, without scheme, port or path."""
        name = host.strip()
        bare = name[1:-1] if name.startswith("[") and name.endswith("]") else name
        if not bare or any(c in bare for c in "/@ ") or (":" in bare and not name.startswith("[")
                                                           and bare.count(":") == 1):
            self.problem(where, f'field "allowedHosts[{i}]": "{host}" is not a host name or address '
                                '(write "myhost.lan" or "192.0.2.7", no scheme, port or path)')
        return name.lower()

    def allowed_origin(self, where: str, i: int, origin: str) -> str:
        """A browser origin: ``http(s)://host[:port]``, nothing after it."""
        parts = urlsplit(origin.strip())
        if parts.scheme not in ("http", "https") or not parts.netloc or parts.path not in ("", "/") \
                or parts.query or parts.fragment:
            self.problem(where, f'field "allowedOrigins[{i}]": "{origin}" is not an origin '
                                '(expected "https://host" or "http://host:port", no path)')
        return origin.strip().rstrip("/").lower()

    def security(self, settings: Settings) -> Settings:
        """The tokens and `auth` of `settings`, interpolated and checked (after `envMode` is known).

        A problem names the field, never the token's value.
        """
        entry = self.settings_entry
        if entry is None:
            return settings
        where = "settings"
        tokens: dict[str, str] = {}
        if entry.auth_token is not UNSET and entry.auth_token is not None:
            tokens["default"] = self.token(where, "authToken", entry.auth_token)
        if entry.auth_tokens is not UNSET:
            for name, value in entry.auth_tokens.items():
                if not NAME_RE.match(name):
                    self.problem(where, f'field "authTokens": token name "{name}" is invalid: {NAME_RULE}')
                if name == "default" and "default" in tokens:
                    self.problem(where, 'field "authTokens": the name "default" is taken by "authToken"')
                tokens[name] = self.token(where, f"authTokens.{name}", value)
        auth = None
        if entry.auth is not UNSET and entry.auth is not None:
            auth = self.oauth(where, entry.auth)
        return dataclasses.replace(settings, auth_tokens=MappingProxyType(tokens), auth=auth)

    def token(self, where: str, key: str, value: str) -> str:
        token = self.sub(where, key, value, strict=True)
        if len(token) < MIN_TOKEN_CHARS:
            self.problem(where, f'field "{key}": the token is shorter than {MIN_TOKEN_CHARS} characters '
                                "(make one with `openssl rand -hex 32`)")
        elif not all("!" <= c <= "~" for c in token):
            self.problem(where, f'field "{key}": the token may hold only printable ASCII, no spaces '
                                "(it travels in an HTTP header)")
        return token

    def oauth(self, where: str, entry: AuthEntry) -> OAuthSettings:
        issuer = self.sub(where, "auth.issuer", entry.issuer, strict=True).rstrip("/")
        parts = urlsplit(issuer)
        host = (parts.hostname or "").lower()
        local = host in ("localhost", "::1") or host.startswith("127.")
        if not parts.netloc or not (parts.scheme == "https" or (parts.scheme == "http" and local)):
            self.problem(where, f'field "auth.issuer": "{issuer}" must be an https:// URL '
                                "(http:// only on loopback; OAuth 2.1 section 1.5)")
        audiences = [entry.audience] if isinstance(entry.audience, str) else list(entry.audience)
        audiences = [self.sub(where, "auth.audience", a, strict=True) for a in audiences]
        if not audiences or not all(audiences):
            self.problem(where, 'field "auth.audience": name the audience the issuer puts in its tokens '
                                "(usually this server's URL, e.g. https://host:8848/mcp)")
        jwks = None
        if entry.jwks_uri is not UNSET:
            jwks = self.sub(where, "auth.jwksUri", entry.jwks_uri, strict=True)
            if urlsplit(jwks).scheme not in ("http", "https"):
                self.problem(where, f'field "auth.jwksUri": "{jwks}" is not an http(s) URL')
        for i, scope in enumerate(entry.required_scopes):
            if not scope or " " in scope:
                self.problem(where, f'field "auth.requiredScopes[{i}]": "{scope}" is not a scope')
        return OAuthSettings(issuer=issuer, audience=tuple(audiences),
                             required_scopes=tuple(entry.required_scopes), jwks_uri=jwks)

    def local_path(self, value: str) -> str:
        """`~` expanded; a relative path is taken relative to the config file's directory."""
        return str(self.base / os.path.expanduser(value))

    def interpolator(self, mode: str) -> Interpolator:
        dotenv: dict[str, str] = {}
        dotenv_path = self.base / DOTENV_NAME
        if mode in ("enable", "dotenv") and self.path is not None:
            try:
                text = dotenv_path.read_text(encoding="utf-8")
            except FileNotFoundError:
                text = ""
            except (OSError, UnicodeDecodeError) as err:
                self.warn("", f"{dotenv_path}: cannot read ({err}); no variables taken from it")
                text = ""
            dotenv, notes = parse_dotenv(text, label=str(dotenv_path))
            self.warnings.extend(notes)
        builtins = {"MCPVISOR_PYTHON": sys.executable, "MCPVISOR_CONFIG_DIR": str(self.base)}
        return Interpolator(
            mode, process=self.env, dotenv=dotenv, builtins=builtins, dotenv_label=str(dotenv_path)
        )

    # -- servers ------------------------------------------------------------------------

    def server(self, name: str, raw: Any, settings: Settings) -> ServerSpec | None:
        where = f'server "{name}"'
        if not NAME_RE.match(name):
            self.problem("", f'server name "{name}" is invalid: {NAME_RULE}')
        if not isinstance(raw, Mapping):
            self.problem(where, f"expected an object, got {describe_type(raw)}")
            return None
        before = len(self.problems)
        entry, problems, dropped = convert_collecting(
            raw, ServerEntry, suggest=SERVER_KEYS, nested={"exposedTools": field_names(ExposedToolEntry)}
        )
        for p in problems:
            self.problem(where, p)
        if entry is None:
            return None
        for key, note in FOREIGN.items():
            if key in raw:
                self.warn(where, f'field "{key}" {note}')
        enabled = True if entry.enabled is UNSET else entry.enabled
        if entry.disabled is not UNSET:
            if entry.enabled is not UNSET and entry.enabled == entry.disabled:
                self.problem(where, 'fields "enabled" and "disabled" contradict each other; keep one')
            enabled = not entry.disabled
        transport = self.transport(where, raw, entry, dropped)
        # A disabled server's missing variables must not block the rest: warn, keep literal.
        strict = enabled
        spec: dict[str, Any] = {}
        if transport is not None:
            for key in TRANSPORT_FIELDS:
                if key in raw and key not in dropped and key not in APPLIES[transport]:
                    self.problem(where, f'field "{key}" does not apply to transport "{transport}"')
            required = REQUIRED[transport]
            if required not in raw and not dropped:  # a dropped key is likely the misspelt one
                self.problem(where, f'transport "{transport}" needs field "{required}"')
        sub = functools.partial(self.sub, where, strict=strict)
        if entry.command is not UNSET:
            spec["command"] = sub("command", entry.command)
        if entry.args is not UNSET:
            spec["args"] = tuple(sub(f"args[{i}]", a) for i, a in enumerate(entry.args))
        if entry.env is not UNSET:
            spec["env"] = MappingProxyType({k: sub(f"env.{k}", v) for k, v in entry.env.items()})
        if entry.cwd is not UNSET:
            spec["cwd"] = self.local_path(sub("cwd", entry.cwd))
        if entry.url is not UNSET:
            spec["url"] = sub("url", entry.url)
            if transport is not None:
                self.check_url(where, transport, spec["url"])
        if entry.headers is not UNSET:
            spec["headers"] = MappingProxyType({k: sub(f"headers.{k}", v) for k, v in entry.headers.items()})
        if entry.image is not UNSET:
            spec["image"] = sub("image", entry.image)
        if entry.docker_args is not UNSET:
            spec["docker_args"] = tuple(sub(f"dockerArgs[{i}]", a) for i, a in enumerate(entry.docker_args))
        if entry.protocol is not UNSET and self.choice(where, "protocol", entry.protocol, PROTOCOLS):
            spec["protocol"] = entry.protocol
        if entry.exposed_tools is not UNSET:
            spec["exposed_tools"] = self.exposed(where, entry.exposed_tools)
        if entry.scope is not UNSET and self.choice(where, "scope", entry.scope, SCOPES):
            spec["scope"] = entry.scope
        if entry.pool is not UNSET:
            if spec.get("scope") != "session":
                self.problem(where, 'field "pool" needs "scope": "session" '
                                    '(a shared server has one instance)')
            elif not 0 <= entry.pool <= MAX_POOL:
                self.problem(where, f'field "pool": {entry.pool} is out of range (0 to {MAX_POOL})')
            else:
                spec["pool"] = entry.pool
        hidden = [*([] if entry.hidden_tools is UNSET else entry.hidden_tools)]
        hidden += [] if entry.disabled_tools is UNSET else entry.disabled_tools
        own = self.knobs(where, entry)
        self.check_pairs(where, {**settings.server_defaults, **own}, own)
        if len(self.problems) > before or transport is None:
            return None
        return ServerSpec(
            name=name,
            transport=transport,
            enabled=enabled,
            lazy=False if entry.lazy is UNSET else entry.lazy,
            description=None if entry.description is UNSET else entry.description,
            hidden_tools=frozenset(hidden),
            raw=MappingProxyType(copy.deepcopy(dict(raw))),
            **spec,
            **{**settings.server_defaults, **own},
        )

    def transport(
        self, where: str, raw: Mapping[str, Any], entry: ServerEntry, dropped: set[str]
    ) -> str | None:
        """The server's transport: given (`type` or its alias `transport`) or implied."""
        given = [v for v in (entry.kind, entry.transport) if v is not UNSET]
        if len(given) == 2 and given[0] != given[1]:
            self.problem(
                where, f'fields "type" ("{given[0]}") and "transport" ("{given[1]}") disagree; give one'
            )
            return None
        if given:
            key = "type" if entry.kind is not UNSET else "transport"
            value = "http" if given[0] in HTTP_ALIASES else given[0]
            if not self.choice(where, key, value, TRANSPORTS):
                return None
            return value
        for key, implied in (("command", "stdio"), ("url", "http"), ("image", "stdio-docker")):
            if key in raw and key not in dropped:
                return implied
        if dropped:  # the misspelt or mistyped key already has its problem
            return None
        self.problem(where, 'needs "command" (stdio), "url" (http, sse, ws) or "image" (stdio-docker)')
        return None

    def sub(self, where: str, key: str, value: str, *, strict: bool) -> str:
        """Interpolate one value; a problem (or, for a disabled server, a warning) on failure."""
        try:
            return self.interp(value)
        except ValueError as err:
            (self.problem if strict else self.warn)(
                where, f'field "{key}": {err}' + ("" if strict else "; kept as written")
            )
            return value

    def check_url(self, where: str, transport: str, url: str) -> None:
        schemes = URL_SCHEMES.get(transport)
        if schemes is None:
            return
        parts = urlsplit(url)
        if parts.scheme not in schemes or not parts.netloc:
            want = " or ".join(f"{s}://..." for s in schemes)
            self.problem(
                where, f'field "url": "{url}" is not a URL transport "{transport}" can use (expected {want})'
            )

    def exposed(self, where: str, entries: list[str | ExposedToolEntry]) -> tuple[ExposedTool, ...]:
        out = []
        for i, item in enumerate(entries):
            tool = (
                ExposedTool(item, None) if isinstance(item, str) else ExposedTool(item.original, item.exposed)
            )
            if not tool.original or tool.exposed == "":
                self.problem(where, f'field "exposedTools[{i}]": a tool name cannot be empty')
            out.append(tool)
        return tuple(out)

    # -- toolsets -----------------------------------------------------------------------

    def toolset(self, name: str, raw: Any) -> ToolsetDecl | None:
        where = f'toolset "{name}"'
        if not NAME_RE.match(name):
            self.problem("", f'toolset name "{name}" is invalid: {NAME_RULE.split(" (")[0]}')
        if isinstance(raw, list):
            raw = {"tools": raw}
        if not isinstance(raw, Mapping):
            self.problem(where, f"expected a list of tools or an object, got {describe_type(raw)}")
            return None
        before = len(self.problems)
        entry, problems, _ = convert_collecting(raw, ToolsetEntry)
        for p in problems:
            self.problem(where, p)
        if entry is None:
            return None
        refs = []
        for i, item in enumerate(entry.tools):
            ref = self.tool_ref(where, i, item)
            if ref is None:
                continue
            refs.append(ref)
            server = (ref.namespaced_name or "").partition(".")[0]
            if server and server not in self.server_names and server not in self.compound_names:
                hint = close_match(server, self.server_names)
                self.warn(where, f'tool "{ref.namespaced_name}": no server "{server}"{hint}')
        if len(self.problems) > before:
            return None
        return ToolsetDecl(name=name, tools=tuple(refs), description=entry.description)

    def tool_ref(self, where: str, i: int, item: Any) -> ToolRef | None:
        """One toolset member: `"server.tool"` or `{namespacedName | refId, alias?}`."""
        at = f'field "tools[{i}]"'
        if isinstance(item, str):
            item = {"namespacedName": item}
        if not isinstance(item, Mapping):
            self.problem(
                where, f'{at}: expected a "server.tool" string or an object, got {describe_type(item)}'
            )
            return None
        ref, problems, _ = convert_collecting(item, ToolRefEntry)
        for p in problems:
            self.problem(where, f"{at}: {p}")
        if ref is None or problems:
            return None
        if (ref.namespaced_name is UNSET) == (ref.ref_id is UNSET):
            self.problem(where, f'{at}: give exactly one of "namespacedName" or "refId"')
            return None
        if ref.namespaced_name is not UNSET:
            server, dot, tool = ref.namespaced_name.partition(".")
            if not (server and dot and tool) and ref.namespaced_name not in self.compound_names:
                self.problem(where, f'{at}: "{ref.namespaced_name}" is not a "server.tool" name')
                return None
        if ref.ref_id == "":
            self.problem(where, f'{at}: "refId" cannot be empty')
            return None
        return ToolRef(
            namespaced_name=None if ref.namespaced_name is UNSET else ref.namespaced_name,
            ref_id=None if ref.ref_id is UNSET else ref.ref_id,
            alias=None if ref.alias is UNSET else ref.alias,
        )

    # -- compound tools (top-level "tools") -------------------------------------------

    def compounds(self, servers: Mapping[str, ServerSpec], settings: Settings) -> dict[str, CompoundDecl]:
        """The `tools` section: every problem named by compound tool and field.

        An unknown server, an unknown key, an empty `subtools` or tool list, and a name
        that clashes with a management tool or with a server tool the config names (its
        `exposedTools`, or a declared subtool, as the namespacing exposes it) are problems.
        Whether a running server has the tool is known only at run time (a warning then).
        """
        section = self.section("tools")
        self.compound_names = frozenset(section)
        taken = self.server_tool_names(servers, settings, section)
        out: dict[str, CompoundDecl] = {}
        for name, raw in section.items():
            where = f'compound tool "{name}"'
            before = len(self.problems)
            if not NAME_RE.match(name):
                self.problem("", f'compound tool name "{name}" (in "tools") is invalid: {NAME_RULE.split(" (")[0]}')
            elif name in MANAGEMENT_TOOLS:
                self.problem(where, f'the name clashes with the management tool "{name}"; choose another')
            elif name in taken:
                self.problem(where, f'the name clashes with the server tool {taken[name]} '
                                    f'(exposed as "{name}" with namespacing "{settings.namespacing}"); choose another')
            if not isinstance(raw, Mapping):
                self.problem(where, f'expected an object with "subtools", got {describe_type(raw)}')
                continue
            entry, problems, _ = convert_collecting(raw, CompoundEntry)
            for p in problems:
                self.problem(where, p)
            if entry is None:
                continue
            if not entry.subtools:
                self.problem(where, 'field "subtools": is empty; name at least one server and its tools, '
                                    'e.g. {"web": {"tools": [{"name": "search"}]}}')
            subs: list[SubtoolDecl] = []
            for server, sraw in entry.subtools.items():
                subs += self.subtools(where, server, sraw, servers)
            seen: set[str] = set()
            for sub in subs:
                if sub.key in seen:
                    self.problem(where, f'field "subtools.{sub.server}.tools": "{sub.tool}" is listed twice')
                seen.add(sub.key)
            if len(self.problems) == before:
                out[name] = CompoundDecl(name=name, description=entry.description, subtools=tuple(subs))
        return out

    def subtools(self, where: str, server: str, raw: Any,
                 servers: Mapping[str, ServerSpec]) -> list[SubtoolDecl]:
        """One server's subtools of a compound tool."""
        at = f"subtools.{server}"
        if server not in self.server_names:
            self.problem(where, f'field "{at}": no server "{server}" in "mcpServers"'
                                f"{close_match(server, self.server_names)}")
        elif server in servers and not servers[server].enabled:
            self.warn(where, f'field "{at}": server "{server}" is disabled; its subtools stay unavailable '
                             "until it is enabled")
        if not isinstance(raw, Mapping):
            self.problem(where, f'field "{at}": expected an object {{"tools": [...]}}, '
                                f"got {describe_type(raw)}")
            return []
        entry, problems, _ = convert_collecting(raw, SubtoolServerEntry)
        for p in problems:
            self.problem(where, p.replace('field "', f'field "{at}.', 1) if p.startswith('field "')
                         else f'field "{at}": {p}')
        if entry is None:
            return []
        if not entry.tools:
            self.problem(where, f'field "{at}.tools": is empty; name at least one tool, '
                                'e.g. [{"name": "search"}]')
        out = []
        for i, item in enumerate(entry.tools):
            field_at = f"{at}.tools[{i}]"
            if isinstance(item, str):
                item = {"name": item}
            if not isinstance(item, Mapping):
                self.problem(where, f'field "{field_at}": expected an object {{"name": ...}}, '
                                    f"got {describe_type(item)}")
                continue
            sub, sub_problems, _ = convert_collecting(item, SubtoolEntry)
            for p in sub_problems:
                self.problem(where, p.replace('field "', f'field "{field_at}.', 1) if p.startswith('field "')
                             else f'field "{field_at}": {p}')
            if sub is None or sub_problems:
                continue
            if not sub.name:
                self.problem(where, f'field "{field_at}.name": a tool name cannot be empty')
                continue
            out.append(SubtoolDecl(server=server, tool=sub.name, description=sub.description or None))
        return out

    def server_tool_names(self, servers: Mapping[str, ServerSpec], settings: Settings,
                          section: Mapping[str, Any]) -> dict[str, str]:
        """Exposed name -> `server.tool`, for the server tools this config names.

        Those are `exposedTools` entries and declared subtools that are not hidden. Under
        namespacing "auto" a server tool sharing a compound tool's name is prefixed, so
        nothing clashes there.
        """
        if settings.namespacing == "auto":
            return {}
        named: dict[str, set[str]] = {}
        for spec in servers.values():
            if spec.exposed_tools is not None:
                for t in spec.exposed_tools:
                    named.setdefault(spec.name, set()).add(t.exposed or t.original)
        for raw in section.values():
            subtools = raw.get("subtools") if isinstance(raw, Mapping) else None
            for server, sraw in (subtools.items() if isinstance(subtools, Mapping) else ()):
                owner = servers.get(server)
                tools = sraw.get("tools") if isinstance(sraw, Mapping) else None
                for item in tools if isinstance(tools, list) else ():
                    tool = item.get("name") if isinstance(item, Mapping) else item
                    if not isinstance(tool, str) or owner is None or tool in owner.hidden_tools:
                        continue
                    if owner.exposed_tools is None:
                        named.setdefault(server, set()).add(tool)
        out: dict[str, str] = {}
        for server, tools in named.items():
            for tool in tools:
                prefix = settings.namespacing == "prefix"
                exposed = f"{flatten(server)}_{flatten(tool)}" if prefix else bare(tool)
                out.setdefault(exposed, f"{server}.{tool}")
        return out
