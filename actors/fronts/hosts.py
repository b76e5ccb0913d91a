"""Host names as the network fronts judge them: loopback, wildcard, the host of a header.

No SDK here: ``serve`` decides whether a bind is safe (`mcpvisor.actors.fronts.auth` builds
the rules and tokens on top) before anything of the SDK is loaded.
"""

from __future__ import annotations

import ipaddress
from typing import Final

__all__ = ["LOOPBACK_NAMES", "WEB_SCHEMES", "host_name", "is_loopback", "is_wildcard"]

LOOPBACK_NAMES: Final = ("127.0.0.1", "localhost", "[::1]")
"""Names a loopback-bound front answers to (the SDK's own DNS-rebinding defaults)."""

WEB_SCHEMES: Final = ("http", "https")
"""Origins a browser sends for a page served from an allowed host."""

def is_loopback(host: str) -> bool:
    """True for ``localhost`` and any loopback IP literal (``127.0.0.0/8``, ``::1``)."""
    name = host.strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def is_wildcard(host: str) -> bool:
    """True for the all-interfaces binds ``0.0.0.0`` and ``::`` (and an empty host)."""
    name = host.strip("[]")
    if not name:
        return True
    try:
        return ipaddress.ip_address(name).is_unspecified
    except ValueError:
        return False


def host_name(value: str) -> str:
    """The host part of a Host header or netloc, lowercased; IPv6 literals keep brackets."""
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        return value[: end + 1] if end >= 0 else value
    if value.count(":") == 1:
        return value.split(":", 1)[0]
    if value.count(":") > 1:  # a bare IPv6 literal, as an address list gives it
        return f"[{value}]"
    return value
