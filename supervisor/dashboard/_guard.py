"""Who may read the dashboard and who may change the config through it.

On top of the front's own rules (`mcpvisor.actors.fronts.auth`: Host and Origin, the configured tokens
that guard every request once set), the dashboard and ``/api`` add one: a request that
changes something (POST, PUT, DELETE) always needs a token, even on loopback with none
configured. That token is `ensure_token`'s, kept in the state directory (mode 0600);
``mcpvisor serve`` prints it as a login URL. ``GET /login?token=...`` puts it in a cookie
(HttpOnly, SameSite=Strict, Secure under TLS) and redirects to ``/``, so the page never
holds it in a URL it links to or in script-readable storage.

Order of the checks: Host (421), Origin (403), then the token (401), so a page from a
foreign origin learns nothing about the token.
"""

from __future__ import annotations

import contextlib
import hmac
import os
import secrets
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from mcpvisor.actors.fronts.auth import HostRules, Verifier, bearer_token, guarding

if TYPE_CHECKING:
    from mcp.server.auth.provider import AccessToken

TOKEN_FILE: Final = "dashboard-token"
"""The dashboard's token in the state directory."""

TOKEN_BYTES: Final = 32
"""256 bits, as `openssl rand -hex 32` (what HOW_TO_SET_A_TOKEN suggests) makes."""

COOKIE: Final = "mcpvisor_dashboard"
COOKIE_MAX_AGE_S: Final = 7 * 24 * 3600
"""A login lasts a week in the browser; a new token (delete the file) ends every one."""

WRITE_METHODS: Final = frozenset({"POST", "PUT", "DELETE", "PATCH"})


def ensure_token(state_dir: Path) -> str:
    """The dashboard token in ``state_dir``, created (0600) when missing.

    A file group or others may read is made private again (it held a secret before we
    looked: the token is replaced, so a copy someone read is worthless).
    """
    state_dir.mkdir(parents=True, exist_ok=True)
    path = state_dir / TOKEN_FILE
    with contextlib.suppress(OSError, UnicodeDecodeError):
        mode = path.stat().st_mode
        token = path.read_text(encoding="utf-8").strip()
        if token and not mode & (stat.S_IRWXG | stat.S_IRWXO):
            return token
        path.unlink()
    token = secrets.token_hex(TOKEN_BYTES)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(token + "\n")
    return token


def cookie_value(headers: Mapping[str, str]) -> str | None:
    """Our cookie's value from a ``cookie`` header, or None."""
    for part in headers.get("cookie", "").split(";"):
        name, _, value = part.strip().partition("=")
        if name == COOKIE and value:
            return value
    return None


def set_cookie(token: str, *, secure: bool) -> str:
    """The ``Set-Cookie`` value that logs a browser in."""
    return (f"{COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict; Max-Age={COOKIE_MAX_AGE_S}"
            + ("; Secure" if secure else ""))


@dataclass(frozen=True)
class Refused:
    status: int
    error: str


@dataclass(frozen=True)
class DashboardGuard:
    """The admission rules of the dashboard, ``/api`` and ``/api/events``.

    Attributes:
        rules: the front's Host/Origin rules.
        token: the state directory's dashboard token.
        verifier: the front's verifier of configured tokens (None, or no token configured
            now: reading is open on loopback, as ``/mcp`` is; asked at every request, so a
            token added by a hot reload guards reading at once).
        tls: the front serves https (the cookie is then ``Secure``).
        bound: (token name, toolset) of a configured token limited to one toolset
            (`mcpvisor.actors.fronts.views.ToolsetViews.bound`). Such a token is refused
            here (403): the fronts serve it that toolset's view only, and every page and
            route of the dashboard shows or changes every server.
    """

    rules: HostRules
    token: str
    verifier: Verifier | None = None
    tls: bool = False
    bound: Callable[[AccessToken | None], tuple[str, str] | None] | None = None

    async def accepts(self, presented: str | None) -> bool:
        """Whether ``presented`` is the dashboard token or a configured one."""
        if not presented:
            return False
        if hmac.compare_digest(presented.encode(), self.token.encode()):
            return True
        return self.verifier is not None and await self.verifier.verify_token(presented) is not None

    async def check(self, method: str, headers: Mapping[str, str], *, login: bool = False) -> Refused | None:
        """None to let the request in, else why not.

        Args:
            method: the HTTP method (``GET`` for a websocket handshake).
            headers: request headers, names lowercased.
            login: the login route, which checks the token it is given itself.
        """
        if not self.rules.host_ok(headers.get("host")):
            return Refused(421, "Invalid Host header")
        if not self.rules.origin_ok(headers.get("origin")):
            return Refused(403, "Invalid Origin header: use this page only from the proxy's own address")
        presented = bearer_token(headers.get("authorization")) or cookie_value(headers)
        needs_token = not login and (method in WRITE_METHODS or guarding(self.verifier))
        if needs_token and not await self.accepts(presented):
            return Refused(401, "a token is required: open the login URL `mcpvisor serve` printed, "
                                "or send `Authorization: Bearer TOKEN`")
        if not login:
            return await self._limited(presented)
        return None

    async def _limited(self, presented: str | None) -> Refused | None:
        """The refusal of a configured token bound to a toolset (see ``bound``), else None."""
        if self.bound is None or self.verifier is None or not presented:
            return None
        if hmac.compare_digest(presented.encode(), self.token.encode()):
            return None
        limit = self.bound(await self.verifier.verify_token(presented))
        if limit is None:
            return None
        name, toolset = limit
        return Refused(403, f"the token {name!r} is limited to the toolset {toolset!r}: use "
                            f"/mcp/toolset/{toolset}; the dashboard and its API show every server")
