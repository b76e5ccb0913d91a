"""`ServerSpec`: one configured server, the record every actor reads.

Sans-IO like the rest of the core: frozen msgspec Structs, no trio. The config loader
(`mcpvisor.config`) validates a file and builds these records; the actors only read them,
typed, so a misspelt field is a type error rather than a silent ``getattr`` default.

Owns:

* `ServerSpec` and the records it holds (`ExposedTool`);
* the default of each per-server knob that is not a restart-policy number (those come
  from `mcpvisor.actors.core.policy_config`, so each default is written once);
* `server_filter`: which of a server's tools the registry exposes, and under which names.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final

import msgspec

from mcpvisor.actors.core import policy_config
from mcpvisor.actors.core.vocabulary import DEFAULT_MAX_CALL_TIME_S, DEFAULT_TIMEOUT_S

if TYPE_CHECKING:
    from mcpvisor.actors.core.registry import ServerFilter

__all__ = [
    "DEFAULT_HEALTH_CHECK_INTERVAL_S",
    "DEFAULT_HEALTH_CHECK_TIMEOUT_S",
    "DEFAULT_MAX_CALL_TIME_S",
    "DEFAULT_MAX_MISSED_PINGS",
    "DEFAULT_RELIST_INTERVAL_S",
    "DEFAULT_RESTART_WAIT_S",
    "DEFAULT_SHUTDOWN_GRACE_S",
    "DEFAULT_STARTUP_TIMEOUT_S",
    "DEFAULT_TIMEOUT_S",
    "GRANTS",
    "TOKEN_AUTH_METHODS",
    "ExposedTool",
    "OAuthSpec",
    "ServerSpec",
    "server_filter",
]

DEFAULT_STARTUP_TIMEOUT_S: Final = 30.0
"""``startupTimeout``: spawn, handshake and the first listing must end within this."""
DEFAULT_HEALTH_CHECK_INTERVAL_S: Final = 30.0
"""``healthCheckInterval``: seconds between pings of a handshake-era server (0: none)."""
DEFAULT_HEALTH_CHECK_TIMEOUT_S: Final = 5.0
"""``healthCheckTimeout``: a ping unanswered this long is missed."""
DEFAULT_MAX_MISSED_PINGS: Final = 3
"""``maxMissedPings``: missed pings in a row that mark the server hung."""
DEFAULT_RESTART_WAIT_S: Final = 10.0
"""``restartWait``: how long a call waits for a restarting server."""
DEFAULT_SHUTDOWN_GRACE_S: Final = 2.0
"""``shutdownGrace``: each step of stopping a child (stdin closed, SIGTERM) waits this."""
DEFAULT_RELIST_INTERVAL_S: Final = DEFAULT_HEALTH_CHECK_INTERVAL_S
"""``relistInterval`` as the knob table shows it; unset, a spec re-lists at its own
``healthCheckInterval`` (`ServerSpec.relist_every`)."""


class ExposedTool(msgspec.Struct, frozen=True):
    """An `exposedTools` entry: the upstream's tool name and, if renamed, the new one."""

    original: str
    exposed: str | None


GRANTS: Final = ("authorization_code", "client_credentials")
"""``oauth.grant``: a person logs in in a browser, or the client's own credentials (machine to machine)."""
TOKEN_AUTH_METHODS: Final = ("client_secret_basic", "client_secret_post", "none", "private_key_jwt")
"""``oauth.tokenEndpointAuthMethod``: how the client authenticates at the token endpoint (RFC 7591 names)."""


_OAUTH_SECRETS: Final = frozenset({"client_secret"})


def repr_without(record: msgspec.Struct, secrets: frozenset[str]) -> str:
    """``record``'s repr as a Struct's own, but for the fields named in ``secrets``, left out
    (a token or a password must never reach a log line or an error through a repr)."""
    shown = ", ".join(f"{name}={getattr(record, name)!r}" for name in record.__struct_fields__
                      if name not in secrets)
    return f"{type(record).__name__}({shown})"


def rich_without(record: msgspec.Struct, secrets: frozenset[str]) -> list[tuple[str, Any]]:
    """``record``'s fields for rich's pretty printer (a Struct's own ``__rich_repr__`` would
    bypass `repr_without`), but for those named in ``secrets``."""
    return [(name, getattr(record, name)) for name in record.__struct_fields__ if name not in secrets]


class OAuthSpec(msgspec.Struct, frozen=True, kw_only=True):
    """A server's ``oauth`` entry: how mcpvisor logs in to it as an OAuth 2.1 client.

    Every field is optional for ``authorization_code``: without a client id the client is
    registered dynamically (RFC 7591) or named by ``client_metadata_url`` where the
    authorization server supports that. ``client_credentials`` needs ``client_id`` and a
    ``client_secret`` or a ``private_key_file``.
    """

    client_id: str | None = None
    client_secret: str | None = None
    """Never in the repr (`repr_without`)."""
    client_metadata_url: str | None = None
    callback_port: int | None = None
    """The loopback redirect listener's port (a pre-registered client's redirect URI names
    one); None: a free port."""
    scopes: tuple[str, ...] = ()
    """Scopes asked for; empty: those the server's challenge or metadata names."""
    grant: str = "authorization_code"
    token_endpoint_auth_method: str | None = None
    private_key_file: str | None = None
    """A PEM private key signing the ``private_key_jwt`` client assertion."""

    def __repr__(self) -> str:
        return repr_without(self, _OAUTH_SECRETS)

    def __rich_repr__(self) -> list[tuple[str, Any]]:
        return rich_without(self, _OAUTH_SECRETS)


def _empty() -> Mapping[str, Any]:
    return MappingProxyType({})


class ServerSpec(msgspec.Struct, frozen=True, kw_only=True):
    """One configured server, fully resolved: interpolated, durations in float seconds.

    Keyword-only; every field but `name` and `transport` has a default, so tests can
    build one directly. Mappings are read-only views.
    """

    name: str
    transport: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = msgspec.field(default_factory=_empty)
    cwd: str | None = None
    url: str | None = None
    headers: Mapping[str, str] = msgspec.field(default_factory=_empty)
    image: str | None = None
    docker_args: tuple[str, ...] = ()
    enabled: bool = True
    lazy: bool = False
    scope: str = "shared"
    """``shared``: one instance for every client; ``session``: one per client session
    (`mcpvisor.sessions`)."""
    pool: int = 0
    """Session scope only: instances kept started and unused, so a session's first call
    does not wait for a start."""
    description: str | None = None
    protocol: str = "auto"
    exposed_tools: tuple[ExposedTool, ...] | None = None
    hidden_tools: frozenset[str] = frozenset()
    timeout: float = DEFAULT_TIMEOUT_S
    max_call_time: float = DEFAULT_MAX_CALL_TIME_S
    startup_timeout: float = DEFAULT_STARTUP_TIMEOUT_S
    health_check_interval: float = DEFAULT_HEALTH_CHECK_INTERVAL_S
    health_check_timeout: float = DEFAULT_HEALTH_CHECK_TIMEOUT_S
    max_missed_pings: int = DEFAULT_MAX_MISSED_PINGS
    restart_delay: float = policy_config.DEFAULT_RESTART_DELAY_S
    restart_delay_max: float = policy_config.DEFAULT_RESTART_DELAY_MAX_S
    restart_reset_after: float = policy_config.DEFAULT_RESTART_RESET_AFTER_S
    circuit_failures: int = policy_config.DEFAULT_CIRCUIT_FAILURES
    circuit_open_for: float = policy_config.DEFAULT_CIRCUIT_OPEN_FOR_S
    circuit_open_max: float = policy_config.DEFAULT_CIRCUIT_OPEN_MAX_S
    restart_wait: float = DEFAULT_RESTART_WAIT_S
    shutdown_grace: float = DEFAULT_SHUTDOWN_GRACE_S
    restart_intensity: int = policy_config.DEFAULT_INTENSITY
    restart_period: float = policy_config.DEFAULT_PERIOD_S
    oauth: OAuthSpec | None = None
    """``oauth``: log in to this (http or sse) server as an OAuth client with these settings.
    A server answering 401 with no such entry is logged in to with the defaults."""
    relist_interval: float | None = None
    """``relistInterval``: how often a server that cannot announce list changes is
    re-listed; None: `health_check_interval`."""
    raw: Mapping[str, Any] = msgspec.field(default_factory=_empty)
    misconfigured: str | None = None
    """Why this entry cannot be used (an unset ``${VAR}``, an invalid field), when the config
    was loaded with ``isolate_servers``: the server is shown ``misconfigured`` with this
    reason and never started, while the other servers run. None: the entry is usable."""

    @property
    def relist_every(self) -> float:
        """Seconds between re-listings of a server that cannot announce changes (0: never)."""
        return self.health_check_interval if self.relist_interval is None else self.relist_interval

    def fingerprint(self) -> str:
        """A stable 16-hex-digit hash of everything that needs a restart when it changes.

        Covers every field except `name`, `description`, `raw` and `enabled`; a hot reload
        restarts a server whose fingerprint changed and leaves the others running.
        """
        import hashlib  # here: only a reload compares fingerprints; checking a config does not

        payload = {name: _plain(getattr(self, name))
                   for name in self.__struct_fields__ if name not in _UNHASHED}
        blob = json.dumps(payload, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


_UNHASHED: Final = frozenset({"name", "description", "raw", "enabled"})


def _plain(value: Any) -> Any:
    """A JSON-able, order-stable form of a ServerSpec field value."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, frozenset):
        return sorted(value)
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, ExposedTool):
        return [value.original, value.exposed]
    if isinstance(value, OAuthSpec):
        return {name: _plain(getattr(value, name)) for name in value.__struct_fields__}
    return value


def server_filter(spec: ServerSpec) -> ServerFilter:
    """Which of a server's tools are exposed, and under which names (``exposedTools``,
    ``hiddenTools``), as the registry applies it."""
    # Imported here: the registry brings the catalog and compound tools with it (~7 ms),
    # which a command that only checks or edits the config never needs.
    from mcpvisor.actors.core.registry import ServerFilter

    exposed = None
    if spec.exposed_tools is not None:
        exposed = {t.original: t.exposed for t in spec.exposed_tools}
    return ServerFilter(exposed=exposed, hidden=frozenset(spec.hidden_tools))
