"""The ``settings`` section of a config document, and what depends on it.

Owns `SettingsRules`: each setting's type, choices and bounds, the proxy-wide
defaults of the supervision knobs, `allowedHosts` and `allowedOrigins`, the tokens
and OAuth of ``settings`` (interpolated once ``envMode`` is known; a problem names the
field, never a token's value), and the interpolator ``envMode`` selects (with the
``.env`` file beside the config).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any
from urllib.parse import urlsplit

import msgspec
from msgspec import UNSET

from mcpvisor._config_check import Checker
from mcpvisor._config_durations import parse_duration
from mcpvisor._config_env import ENV_MODES, Interpolator, parse_dotenv
from mcpvisor._config_schema import (
    AuthEntry,
    MetricsEntry,
    OAuthSettingsEntry,
    SettingsEntry,
    TelemetryEntry,
    TokenEntry,
    convert_collecting,
    field_names,
)
from mcpvisor._config_types import (
    DEFAULT_MAX_SESSIONS,
    DISCOVERY_BUDGET_MAX,
    DISCOVERY_BUDGET_MIN,
    DOTENV_NAME,
    DRAIN_MAX_S,
    DRAIN_MIN_S,
    HANDSHAKE_MAX_S,
    HANDSHAKE_MIN_S,
    LOG_LEVELS,
    MAX_MESSAGE_BYTES,
    MAX_SESSIONS_HIGH,
    MIN_MESSAGE_BYTES,
    MIN_TOKEN_CHARS,
    NAME_RE,
    NAME_RULE,
    NAMESPACINGS,
    PIN_SCHEMAS,
    SESSION_IDLE_MAX_S,
    SESSION_IDLE_MIN_S,
    STARTUP_WAIT_MAX_S,
    OAuthSettings,
    Settings,
    TelemetrySettings,
    is_store_url,
    scheme_of,
)
from mcpvisor.actors.core.vocabulary import DEFAULT_DISCOVERY_BUDGET, EXPOSURES
from mcpvisor.actors.core.vocabulary import OTLP_PROTOCOLS as PROTOCOLS


class SettingsRules(Checker):
    """The ``settings`` rules of `mcpvisor._config_build._Builder`."""

    def settings(self, raw: Mapping[str, Any]) -> Settings:
        where = "settings"
        nested = {"auth": field_names(AuthEntry), "telemetry": field_names(TelemetryEntry),
                  "metrics": field_names(MetricsEntry), "oauth": field_names(OAuthSettingsEntry)}
        entry, problems, _ = convert_collecting(raw, SettingsEntry, nested=nested)
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
        if entry.store is not UNSET and entry.store is not None:
            if is_store_url(entry.store):
                values["store"] = entry.store
            else:  # the value is not shown: a mistyped URL may still hold a password
                self.problem(where, f'field "store": {scheme_of(entry.store)} is not a PostgreSQL URL '
                                    "(postgresql://user@host:port/database); leave it out to keep the "
                                    "state in files")
        if entry.telemetry is not UNSET and entry.telemetry is not None:
            values["telemetry"] = self.telemetry(where, entry.telemetry)
        if entry.metrics is not UNSET:
            values["metrics_public"] = entry.metrics.public
        if entry.oauth is not UNSET and entry.oauth.open_browser is not UNSET:
            values["oauth_open_browser"] = entry.oauth.open_browser
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
        if entry.handshake_timeout is not UNSET:
            try:
                values["handshake_timeout"] = parse_duration(
                    entry.handshake_timeout, field="handshakeTimeout", max_s=HANDSHAKE_MAX_S,
                    min_s=HANDSHAKE_MIN_S,
                )
            except ValueError as err:
                self.problem(where, str(err))
        if entry.drain_timeout is not UNSET:
            try:
                values["drain_timeout"] = parse_duration(
                    entry.drain_timeout, field="drainTimeout", max_s=DRAIN_MAX_S, min_s=DRAIN_MIN_S,
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

    def telemetry(self, where: str, entry: TelemetryEntry) -> TelemetrySettings:
        """``settings.telemetry``: an http(s) endpoint, a known protocol, a ratio in 0..1."""
        field = f"{where}.telemetry"
        values: dict[str, Any] = {}
        if entry.endpoint is not UNSET:
            parts = urlsplit(entry.endpoint)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                self.problem(field, f'field "endpoint": "{entry.endpoint}" is not an http(s) URL '
                                    '(write the collector\'s OTLP address, e.g. "http://127.0.0.1:4318")')
            else:
                values["endpoint"] = entry.endpoint
        if entry.protocol is not UNSET and self.choice(field, "protocol", entry.protocol, PROTOCOLS):
            values["protocol"] = entry.protocol
        if entry.service_name is not UNSET:
            values["service_name"] = entry.service_name
        if entry.sample_ratio is not UNSET:
            if 0.0 <= entry.sample_ratio <= 1.0:
                values["sample_ratio"] = float(entry.sample_ratio)
            else:
                self.problem(field, f'field "sampleRatio": {entry.sample_ratio} is out of range '
                                    "(0 to 1: the share of new traces recorded)")
        if entry.enabled is not UNSET:
            values["enabled"] = entry.enabled
        return TelemetrySettings(**values)

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
        toolsets: dict[str, str] = {}
        if entry.auth_token is not UNSET and entry.auth_token is not None:
            tokens["default"] = self.token(where, "authToken", entry.auth_token)
        if entry.auth_tokens is not UNSET:
            for name, value in entry.auth_tokens.items():
                if not NAME_RE.match(name):
                    self.problem(where, f'field "authTokens": token name "{name}" is invalid: {NAME_RULE}')
                if name == "default" and "default" in tokens:
                    self.problem(where, 'field "authTokens": the name "default" is taken by "authToken"')
                if isinstance(value, TokenEntry):
                    tokens[name] = self.token(where, f"authTokens.{name}.token", value.token)
                    if value.toolset is not UNSET and value.toolset is not None:
                        toolsets[name] = self.token_toolset(where, name, value.toolset)
                else:
                    tokens[name] = self.token(where, f"authTokens.{name}", value)
        auth = None
        if entry.auth is not UNSET and entry.auth is not None:
            auth = self.oauth(where, entry.auth)
        return msgspec.structs.replace(settings, auth_tokens=MappingProxyType(tokens),
                                   token_toolsets=MappingProxyType(toolsets), auth=auth)

    def token_toolset(self, where: str, name: str, value: str) -> str:
        """The toolset a named token is limited to: a toolset name (``${VAR}`` allowed).

        One the file does not declare may be saved in the state directory, which is not
        read here: that is checked when a client presents the token (404 naming the
        toolsets that exist).
        """
        key = f"authTokens.{name}.toolset"
        toolset = self.sub(where, key, value, strict=True)
        if not NAME_RE.match(toolset):
            self.problem(where, f'field "{key}": "{toolset}" is not a toolset name: {NAME_RULE}')
        return toolset

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
