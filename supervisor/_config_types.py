"""The resolved config records and the tables behind them (re-exported by `mcpvisor.config`).

Owns the immutable records (`Config`, `Settings`, `ToolsetDecl`, `ToolRef`; `ServerSpec` and
`ExposedTool` come from `mcpvisor.actors.core.spec`, the record the actors read, and `CompoundDecl`
from `mcpvisor.actors.core.compound`), `ConfigError`, the supervision knob table with its bounds
(docs/design.md "Behaviour under failure"; the defaults are the core's), and which fields each
transport takes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final

import msgspec

from mcpvisor._config_schema import KNOB_KEYS, ServerEntry, field_names
from mcpvisor.actors.core import policy_config
from mcpvisor.actors.core.spec import (
    DEFAULT_HEALTH_CHECK_INTERVAL_S,
    DEFAULT_HEALTH_CHECK_TIMEOUT_S,
    DEFAULT_MAX_CALL_TIME_S,
    DEFAULT_MAX_MISSED_PINGS,
    DEFAULT_RELIST_INTERVAL_S,
    DEFAULT_RESTART_WAIT_S,
    DEFAULT_SHUTDOWN_GRACE_S,
    DEFAULT_STARTUP_TIMEOUT_S,
    DEFAULT_TIMEOUT_S,
    ServerSpec,
    repr_without,
    rich_without,
)
from mcpvisor.actors.core.vocabulary import DEFAULT_DISCOVERY_BUDGET

if TYPE_CHECKING:  # the module pulls in jsonschema: a CLI that never loads a config need not
    from mcpvisor.actors.core.compound import CompoundDecl

DEFAULT_HOST: Final = "127.0.0.1"
"""Loopback only by default: without a token the HTTP/WS fronts are open to this machine only."""
DEFAULT_PORT: Final = 8848

PROTOCOLS: Final = ("auto", "legacy", "2026-07-28")
NAMESPACINGS: Final = ("prefix", "auto", "none")
PIN_SCHEMAS: Final = ("warn", "refuse")
SCOPES: Final = ("shared", "session")
MAX_POOL: Final = 64
"""Warm instances kept per session-scoped server at most: each is a running process, and a
harness on one machine runs a few dozen episodes at a time, not hundreds."""
LOG_LEVELS: Final = ("debug", "info", "warning", "error")

DOTENV_NAME: Final = ".env"

MAX_NAME_LEN: Final = 64
"""Server and toolset names: short enough to prefix tool names that clients cap at 64."""
NAME_RE: Final = re.compile(rf"[A-Za-z0-9_-]{{1,{MAX_NAME_LEN}}}\Z")
NAME_RULE: Final = (
    f'use 1-{MAX_NAME_LEN} characters from A-Z, a-z, 0-9, "_" and "-" '
    '(no dots: a dot separates server and tool in "server.tool")'
)

MINUTE: Final = 60.0
HOUR: Final = 3600.0
DAY: Final = 86400.0
MIN_TIMEOUT_S: Final = 0.001
"""Timeouts must be positive; nobody means one under a millisecond."""
MAX_COUNT: Final = 1000
"""Upper plausibility bound for the counting knobs (missed pings, circuit failures)."""
STARTUP_WAIT_MAX_S: Final = 10 * MINUTE
MIN_MESSAGE_BYTES: Final = 1024
MAX_MESSAGE_BYTES: Final = 1 << 30
"""`maxMessageBytes` bounds: below 1 KiB not even a tools/list fits; above 1 GiB is unbounded memory."""

DEFAULT_MAX_SESSIONS: Final = 1000
"""`settings.maxSessions` (issue 12): the SDK's 10,000 let one client hold ~420 MB of
sessions (42 KB each, measured); 1,000 is still far more than the clients of one proxy."""
MAX_SESSIONS_HIGH: Final = 100_000
DEFAULT_SESSION_IDLE_S: Final = 10 * MINUTE
"""`settings.sessionIdleTimeout` (issue 12): an abandoned session is reaped after this
(the SDK's default is 30 minutes)."""
SESSION_IDLE_MIN_S: Final = 1.0
DEFAULT_HANDSHAKE_S: Final = 10.0
"""`settings.handshakeTimeout` (issue 23): a websocket handshake, a TLS handshake or an HTTP
request's headers must arrive within this of the connection opening. The libraries' 60 s let
300 half-open handshakes hold every descriptor of a 256-fd proxy; 10 s is still far beyond
what a client on any network needs."""
HANDSHAKE_MIN_S: Final = 0.1
DEFAULT_DRAIN_S: Final = 30.0
"""`settings.drainTimeout` (issue 30): after SIGTERM, how long the HTTP front's requests in
flight may take to finish with their own answer before they get the shutdown error. The
stop takes up to about 8 s more (the last answers written, the front closed, each
upstream's stop sequence), so a pod's ``terminationGracePeriodSeconds`` should be about
40 s for the default."""
DRAIN_MIN_S: Final = 0.1
DRAIN_MAX_S: Final = HOUR
STORE_ENV: Final = "MCPVISOR_STORE"
"""The PostgreSQL store's URL (`mcpvisor.pgstore`); wins over ``settings.store``."""
STORE_SCHEMES: Final = ("postgresql", "postgres")
REPLICA_ENV: Final = "MCPVISOR_REPLICA"
"""This replica's name (``serve --replica NAME`` wins): the prefix of its HTTP session ids."""
REPLICA_RE: Final = re.compile(r"[A-Za-z0-9_-]{1,63}\Z")
REPLICA_RULE: Final = (
    'use 1-63 characters (a Kubernetes pod name fits) from A-Z, a-z, 0-9, "_" and "-" '
    "(no dots: a dot ends the replica name in a session id, where a balancer reads it)"
)
HANDSHAKE_MAX_S: Final = 10 * MINUTE
SESSION_IDLE_MAX_S: Final = DAY
DISCOVERY_BUDGET_MIN: Final = 512
"""Below this not even the servers-and-counts summary of a few servers fits."""
DISCOVERY_BUDGET_MAX: Final = 1 << 20
"""1 MiB: far beyond what any model context takes in one tool description."""
MIN_TOKEN_CHARS: Final = 16
"""A shared token shorter than this is refused: it could be guessed over the network
(`openssl rand -hex 32` makes a good one)."""



class Knob(msgspec.Struct, frozen=True):
    """One supervision knob: attribute, config key, default and bounds (docs/design.md defaults)."""

    attr: str
    key: str
    default: float
    low: float
    high: float
    count: bool = False


# The defaults are the core's (the spec's and the restart policy's): each written once.
KNOBS: Final = (
    Knob("timeout", "timeout", DEFAULT_TIMEOUT_S, MIN_TIMEOUT_S, HOUR),
    Knob("max_call_time", "maxCallTime", DEFAULT_MAX_CALL_TIME_S, MIN_TIMEOUT_S, DAY),
    Knob("startup_timeout", "startupTimeout", DEFAULT_STARTUP_TIMEOUT_S, MIN_TIMEOUT_S, 10 * MINUTE),
    # 0 disables pings
    Knob("health_check_interval", "healthCheckInterval", DEFAULT_HEALTH_CHECK_INTERVAL_S, 0.0, HOUR),
    Knob("health_check_timeout", "healthCheckTimeout", DEFAULT_HEALTH_CHECK_TIMEOUT_S, MIN_TIMEOUT_S,
         5 * MINUTE),
    Knob("max_missed_pings", "maxMissedPings", DEFAULT_MAX_MISSED_PINGS, 1, MAX_COUNT, count=True),
    Knob("restart_delay", "restartDelay", policy_config.DEFAULT_RESTART_DELAY_S, 0.0, 5 * MINUTE),
    Knob("restart_delay_max", "restartDelayMax", policy_config.DEFAULT_RESTART_DELAY_MAX_S, 0.0, HOUR),
    Knob("restart_reset_after", "restartResetAfter", policy_config.DEFAULT_RESTART_RESET_AFTER_S, 0.0, DAY),
    Knob("circuit_failures", "circuitFailures", policy_config.DEFAULT_CIRCUIT_FAILURES, 1, MAX_COUNT,
         count=True),
    # 0 would start trials back to back
    Knob("circuit_open_for", "circuitOpenFor", policy_config.DEFAULT_CIRCUIT_OPEN_FOR_S, MIN_TIMEOUT_S, HOUR),
    Knob("circuit_open_max", "circuitOpenMax", policy_config.DEFAULT_CIRCUIT_OPEN_MAX_S, MIN_TIMEOUT_S, DAY),
    Knob("restart_wait", "restartWait", DEFAULT_RESTART_WAIT_S, 0.0, 10 * MINUTE),
    Knob("shutdown_grace", "shutdownGrace", DEFAULT_SHUTDOWN_GRACE_S, 0.0, 5 * MINUTE),
    Knob("restart_intensity", "restartIntensity", policy_config.DEFAULT_INTENSITY, 1, MAX_COUNT, count=True),
    Knob("restart_period", "restartPeriod", policy_config.DEFAULT_PERIOD_S, MIN_TIMEOUT_S, HOUR),
    # Default: the health-check interval (ServerSpec.relist_every); 0 turns re-listing off.
    Knob("relist_interval", "relistInterval", DEFAULT_RELIST_INTERVAL_S, 0.0, HOUR),
)
assert tuple(k.key for k in KNOBS) == KNOB_KEYS, "knob table and schema disagree"
assert all(getattr(ServerSpec(name="-", transport="stdio"), k.attr) == k.default
           for k in KNOBS if k.attr != "relist_interval"), "knob table and ServerSpec disagree on a default"
KNOB_PAIRS: Final = (("restartDelay", "restartDelayMax"), ("circuitOpenFor", "circuitOpenMax"))
"""(first, cap): the first backoff delay / open period may not exceed its cap."""

MAX_PORT: Final = 65535
"""The highest TCP port (``oauth.callbackPort``)."""

TRANSPORT_FIELDS: Final = ("command", "args", "env", "cwd", "url", "headers", "image", "dockerArgs", "oauth")
APPLIES: Final = {
    "stdio": frozenset({"command", "args", "env", "cwd"}),
    "http": frozenset({"url", "headers", "oauth"}),
    "sse": frozenset({"url", "headers", "oauth"}),
    "ws": frozenset({"url", "headers"}),
    "stdio-docker": frozenset({"image", "dockerArgs", "args", "env"}),
}
REQUIRED: Final = {"stdio": "command", "http": "url", "sse": "url", "ws": "url", "stdio-docker": "image"}
URL_SCHEMES: Final = {"http": ("http", "https"), "sse": ("http", "https"), "ws": ("ws", "wss")}

FOREIGN: Final = {
    "disabled": 'comes from Cline/Roo; treated as the opposite of "enabled"',
    "disabledTools": 'is treated like "hiddenTools"',
    "alwaysAllow": "is another client's approval list; ignored",
    "autoApprove": "is another client's approval list; ignored",
    "headersHelper": "is Claude Code's header command; ignored (no headers come from it)",
}
"""Keys other clients write into server entries: tolerated with a warning."""
SERVER_KEYS: Final = tuple(k for k in field_names(ServerEntry) if k not in FOREIGN)
TOP_KEYS: Final = ("$schema", "mcpServers", "toolsets", "settings", "tools")


class ToolRef(msgspec.Struct, frozen=True):
    """A toolset member: exactly one of `namespaced_name` (`server.tool`) or `ref_id` is set."""

    namespaced_name: str | None
    ref_id: str | None
    alias: str | None


class ToolsetDecl(msgspec.Struct, frozen=True):
    """A toolset declared in the config file (read-only at run time)."""

    name: str
    tools: tuple[ToolRef, ...]
    description: str | None


def is_store_url(value: str) -> bool:
    """Whether ``value`` is a PostgreSQL URL (``postgresql://`` or ``postgres://``).

    Here rather than in `mcpvisor.pgstore` so that checking a config (and starting a
    files-only ``serve``) does not import the store's package."""
    scheme, sep, _ = value.partition("://")
    return bool(sep) and scheme.lower() in STORE_SCHEMES


def scheme_of(value: str) -> str:
    """What a bad store value is shown as: its scheme only (the rest may hold a password,
    however mistyped)."""
    scheme, sep, _ = value.partition("://")
    return f"a {scheme[:20]!r} URL" if sep and scheme.isascii() and scheme.isalnum() else "not a URL"


def _empty() -> Mapping[str, Any]:
    return MappingProxyType({})


class OAuthSettings(msgspec.Struct, frozen=True, kw_only=True):
    """`settings.auth`: accept OAuth 2.1 access tokens (JWTs) from this issuer."""

    issuer: str
    audience: tuple[str, ...]
    required_scopes: tuple[str, ...] = ()
    jwks_uri: str | None = None
    """Where the issuer's keys are; None: found from its authorization server metadata."""


class TelemetrySettings(msgspec.Struct, frozen=True, kw_only=True):
    """`settings.telemetry`: OpenTelemetry traces (`mcpvisor.actors.telemetry`); each value
    is the default of its ``OTEL_*`` variable, which wins when set."""

    endpoint: str | None = None
    """The collector's OTLP base URL (``OTEL_EXPORTER_OTLP_ENDPOINT``); None: only the variable."""
    protocol: str | None = None
    service_name: str | None = None
    sample_ratio: float | None = None
    enabled: bool = True


class Settings(msgspec.Struct, frozen=True, kw_only=True):
    """The `settings` object, resolved.

    `server_defaults` holds the supervision knobs given under `settings`, already parsed
    and keyed by `ServerSpec` attribute name (`health_check_interval`, ...), so
    `msgspec.structs.replace(spec, **settings.server_defaults)` applies them. Its repr
    leaves out the shared tokens and the store's URL (its password): `repr_without`.
    """

    exposure: str = "menu"
    namespacing: str = "prefix"
    env_mode: str = "enable"
    startup_wait: float = 10.0
    max_message_bytes: int = 16 * 1024 * 1024
    pin_schemas: str = "warn"
    fast_path: bool = True
    state_dir: str | None = None
    log_level: str = "info"
    server_defaults: Mapping[str, Any] = msgspec.field(default_factory=_empty)
    auth_tokens: Mapping[str, str] = msgspec.field(default_factory=_empty)
    """Shared bearer tokens by name: `authTokens`, and `authToken` under the name "default"."""
    token_toolsets: Mapping[str, str] = msgspec.field(default_factory=_empty)
    """The toolset each toolset-bound token (``authTokens: {"ci": {"token", "toolset"}}``)
    is limited to, by token name; a token not here sees what the proxy exposes."""
    auth: OAuthSettings | None = None
    allowed_hosts: tuple[str, ...] = ()
    allowed_origins: tuple[str, ...] = ()
    max_sessions: int = DEFAULT_MAX_SESSIONS
    session_idle_timeout: float = DEFAULT_SESSION_IDLE_S
    handshake_timeout: float = DEFAULT_HANDSHAKE_S
    drain_timeout: float = DEFAULT_DRAIN_S
    """``settings.drainTimeout``: the HTTP front's drain on SIGTERM (`DEFAULT_DRAIN_S`)."""
    discovery_budget: int = DEFAULT_DISCOVERY_BUDGET
    journal: str | None = None
    """The SQLite file every call is recorded in (`mcpvisor.journal`); None: no journal.
    With a PostgreSQL `store` the calls go to the store's table instead (any value turns it on)."""
    store: str | None = None
    """``settings.store`` (``$MCPVISOR_STORE`` wins, `mcpvisor.settings.with_env_overrides`):
    a ``postgresql://`` URL puts the state, tokens and journal in PostgreSQL
    (`mcpvisor.pgstore`); None: files and SQLite in the state directory."""
    oauth_open_browser: bool = True
    """``settings.oauth.openBrowser``: a login the running proxy needs opens the browser
    itself (False: it only says ``run mcpvisor mcp login NAME``)."""
    journal_payloads: bool = False
    """Record full arguments and results in the journal (otherwise sizes and digests only)."""
    telemetry: TelemetrySettings | None = None
    """OpenTelemetry traces (``settings.telemetry``); None: only the ``OTEL_*`` variables decide."""
    metrics_public: bool = False
    """``settings.metrics.public``: ``/metrics`` asks no token on a loopback bind (a local
    Prometheus scrapes it); elsewhere, or off, it is guarded as ``/api`` is."""

    def __repr__(self) -> str:
        return repr_without(self, _SETTINGS_SECRETS)

    def __rich_repr__(self) -> list[tuple[str, Any]]:
        return rich_without(self, _SETTINGS_SECRETS)


_SETTINGS_SECRETS: Final = frozenset({"auth_tokens", "store"})
"""The `Settings` fields its repr leaves out: the shared tokens, the store's URL."""


class Config(msgspec.Struct, frozen=True, kw_only=True):
    """A whole config file, resolved. `servers` keeps file order and includes disabled ones."""

    path: Path | None = None
    servers: Mapping[str, ServerSpec] = msgspec.field(default_factory=_empty)
    toolsets: Mapping[str, ToolsetDecl] = msgspec.field(default_factory=_empty)
    settings: Settings = msgspec.field(default_factory=Settings)
    compound_tools: Mapping[str, CompoundDecl] = msgspec.field(default_factory=_empty)
    """The top-level ``tools`` section: compound tools by name, in file order."""
    warnings: tuple[str, ...] = ()
    raw: Mapping[str, Any] = msgspec.field(default_factory=_empty)

    def enabled_servers(self) -> list[ServerSpec]:
        """The servers to run, in file order."""
        return [s for s in self.servers.values() if s.enabled]


class ConfigError(Exception):
    """The config file cannot be used. `str(err)` is one problem per line.

    Attributes:
        path: the file, if the config came from one.
        problems: every problem found, each naming the file, the server and the field.
    """

    def __init__(self, problems: list[str] | str, path: Path | None = None) -> None:
        self.problems: list[str] = [problems] if isinstance(problems, str) else list(problems)
        self.path = path
        super().__init__("\n".join(self.problems))

    def __str__(self) -> str:
        return "\n".join(self.problems)


def replica_name(env: Mapping[str, str], flag: str | None = None) -> str | None:
    """This replica's name: ``flag`` (``serve --replica``), else ``$MCPVISOR_REPLICA``; None
    when neither is set (an empty value counts as unset).

    Raises:
        ConfigError: the name breaks `REPLICA_RULE` (it names where the name came from).
    """
    source, value = ("--replica", flag) if flag else (f"${REPLICA_ENV}", env.get(REPLICA_ENV, ""))
    value = (value or "").strip()
    if not value:
        return None
    if not REPLICA_RE.match(value):
        raise ConfigError(f"{source}: {value[:40]!r} is not a replica name; {REPLICA_RULE}")
    return value
