"""Every translation between the two protocol eras, in one place.

MCP has two eras this proxy speaks on both sides: the handshake era (``initialize``,
2025-11-25 and before) and 2026-07-28 (no handshake; each request carries its protocol
version, clientInfo and capabilities in ``_meta``, and every result says its
``resultType``). A client of either era may reach an upstream of either era, so:

* a request loses the client's own envelope keys (`ENVELOPE_KEYS`) and, for a 2026-07-28
  upstream, gains the proxy's (`mcpvisor.actors.link.base.Link.envelope_meta`);
* a result is fitted to the client's era (`strip_upstream_stamps` on decoded results,
  `adapt_raw_result` on the fast path's raw bytes): the upstream's serverInfo stamp is
  dropped (the front stamps its own), ``resultType`` is there for a 2026-07-28 client and
  gone for a handshake-era one;
* a result the proxy builds itself is marked final (`complete`);
* ``input_required`` for a handshake-era client is driven by
  `mcpvisor.actors.link.input_required.drive_input_required`; a handshake-era upstream's
  questions for a 2026-07-28 client become ``input_required`` legs (`mcpvisor.actors.bridge`);
* logging: a handshake-era client sets a level per connection (``logging/setLevel``), a
  2026-07-28 one per request (``_meta``); `verbose_of` and `log_wanted` compare them;
* capabilities: a 2026-07-28 upstream is told the client's own sampling, elicitation and
  roots capabilities (`fit_capabilities`), since what it may ask is what that client can
  answer (through ``input_required`` legs or server-to-client requests alike).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from msgspec import Raw

from mcpvisor.actors import wire
from mcpvisor.actors.wire import (
    CLIENT_CAPABILITIES_META_KEY,
    CLIENT_INFO_META_KEY,
    LOG_LEVEL_META_KEY,
    PROTOCOL_VERSION_META_KEY,
    SERVER_INFO_META_KEY,
)

__all__ = [
    "ENVELOPE_KEYS",
    "HANDSHAKE_PROTOCOL_VERSIONS",
    "LATEST_HANDSHAKE_VERSION",
    "LATEST_MODERN_VERSION",
    "LOG_LEVELS",
    "MODERN_PROTOCOL_VERSIONS",
    "RELAYED_CAPABILITIES",
    "adapt_raw_result",
    "complete",
    "fit_capabilities",
    "is_modern_version",
    "log_wanted",
    "strip_upstream_stamps",
    "verbose_of",
]

# The protocol versions of each era, the same as the SDK's (``mcp_types.version``; a unit
# test holds them equal), written out so that the byte paths that tell the eras apart do
# not load the SDK's types (~190 ms and most of its memory) to read two tuples.
HANDSHAKE_PROTOCOL_VERSIONS: Final[tuple[str, ...]] = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
"""The versions an ``initialize`` handshake negotiates, oldest first."""
MODERN_PROTOCOL_VERSIONS: Final[tuple[str, ...]] = ("2026-07-28",)
"""The versions whose requests each carry their envelope in ``_meta`` (no handshake)."""
LATEST_HANDSHAKE_VERSION: Final = HANDSHAKE_PROTOCOL_VERSIONS[-1]
"""What a handshake offers, and answers a client that asked for a version it does not know."""
LATEST_MODERN_VERSION: Final = MODERN_PROTOCOL_VERSIONS[-1]
"""What a 2026-07-28-era request is sent as."""

ENVELOPE_KEYS: Final = (PROTOCOL_VERSION_META_KEY, CLIENT_INFO_META_KEY, CLIENT_CAPABILITIES_META_KEY,
                        LOG_LEVEL_META_KEY)
"""The ``_meta`` keys of a 2026-07-28 request's envelope: the client's never reach an
upstream (the proxy sends its own, or none to a handshake-era one)."""

LOG_LEVELS: Final = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
"""MCP's logging levels (RFC 5424 severities), least severe first: the SDK's
``LoggingLevel``, held equal to it by a unit test."""

RELAYED_CAPABILITIES: Final = ("sampling", "elicitation", "roots")
"""The client capabilities an upstream's questions need: the proxy relays each question to
the client whose request caused it, so the client's declaration is the one that counts."""

_COMPLETE: Final = Raw(b'"complete"')
_SERVER_INFO_BYTES: Final = SERVER_INFO_META_KEY.encode()


def is_modern_version(version: str | None) -> bool:
    """Whether ``version`` is a protocol version of the 2026-07-28 era."""
    return version in MODERN_PROTOCOL_VERSIONS


def verbose_of(*levels: str | None) -> str | None:
    """The most verbose of ``levels`` (unknown and None ignored); None if there is none."""
    known = [level for level in levels if level in LOG_LEVELS]
    return min(known, key=LOG_LEVELS.index) if known else None


def log_wanted(level: object, wanted: str | None) -> bool:
    """Whether a message at ``level`` passes a client's ``wanted`` level (None: it asked for none)."""
    if wanted not in LOG_LEVELS:
        return False
    return level not in LOG_LEVELS or LOG_LEVELS.index(level) >= LOG_LEVELS.index(wanted)


def fit_capabilities(proxy: Mapping[str, Any], client: object) -> dict[str, Any]:
    """The ``clientCapabilities`` a 2026-07-28 upstream is told for one client's request:
    the proxy's own, with sampling, elicitation and roots as the client declared them (a
    client that declared none of them gets none: the upstream then refuses with -32021,
    or leaves the question out, exactly as it would for that client directly)."""
    fitted = {k: v for k, v in proxy.items() if k not in RELAYED_CAPABILITIES}
    if isinstance(client, Mapping):
        for key in RELAYED_CAPABILITIES:
            if client.get(key) is not None:
                fitted[key] = client[key]
    return fitted


def complete(result: dict[str, Any]) -> dict[str, Any]:
    """Mark a result the proxy builds as final (2026-07-28 requires ``resultType``; the
    SDK drops the key for handshake-era clients)."""
    result.setdefault("resultType", "complete")
    return result


def strip_upstream_stamps(result: dict[str, Any], *, modern_front: bool = False) -> dict[str, Any]:
    """Fit an upstream's result to the client's era: the front stamps its own serverInfo,
    a handshake-era client never sees ``resultType``, a 2026-07-28 one always does."""
    if modern_front:
        result.setdefault("resultType", "complete")
    elif result.get("resultType") == "complete":
        del result["resultType"]
    meta = result.get("_meta")
    if isinstance(meta, dict) and SERVER_INFO_META_KEY in meta:
        meta = {k: v for k, v in meta.items() if k != SERVER_INFO_META_KEY}
        if meta:
            result["_meta"] = meta
        else:
            del result["_meta"]
    return result


def adapt_raw_result(result: Raw, line: bytes, *, upstream_modern: bool, front_modern: bool,
                     stamp: Raw) -> Raw:
    """`strip_upstream_stamps` on the fast path's raw bytes, in one pass over the result's
    top-level keys (``line`` is the whole frame, searched before anything is decoded);
    a 2026-07-28 client gets the front's serverInfo ``stamp``."""
    if not front_modern and not upstream_modern:
        return result
    if front_modern and upstream_modern and _SERVER_INFO_BYTES not in line:
        return result
    fields = wire.decode_raw_map(result)
    if front_modern:
        fields.setdefault("resultType", _COMPLETE)
    elif bytes(fields.get("resultType", b"")) == b'"complete"':
        del fields["resultType"]
    meta = wire.decode_raw_map(fields["_meta"]) if "_meta" in fields else {}
    meta.pop(SERVER_INFO_META_KEY, None)
    if front_modern:
        meta[SERVER_INFO_META_KEY] = stamp
    if meta:
        fields["_meta"] = Raw(wire.encode(meta))
    else:
        fields.pop("_meta", None)
    return Raw(wire.encode(fields))
