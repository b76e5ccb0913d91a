"""An upstream actor's OAuth login: when a server needs one, and the login a running proxy runs.

`UpstreamLogin` is a part of `mcpvisor.actors.upstream.actor.Upstream` (a base class, as
`mcpvisor.actors.upstream.tasks.LinkTasks` is): where the server's tokens live, a link
saying a login is needed, the authorization URL of a start allowed to ask a person (the
browser, or whoever asked with `UpstreamLogin.start_login`), and ``needs_login`` held
between lives (not a failure: no backoff, no breaker) until tokens are stored.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Final

import trio

from mcpvisor.actors.core.lifecycle import Event, shown
from mcpvisor.actors.link.logins import LOGIN_WAIT_S, login_message, open_browser
from mcpvisor.actors.upstream.status import State

if TYPE_CHECKING:
    from mcpvisor.actors.core.policy import RestartPolicy
    from mcpvisor.actors.core.spec import ServerSpec
    from mcpvisor.actors.link.oauth_store import TokenStore
    from mcpvisor.actors.upstream.status import Hooks

logger = logging.getLogger(__name__)

LOGIN_URL_WAIT_S: Final = 30.0
"""How long `Upstream.start_login` waits for the flow to reach its authorization URL
(discovery and registration: a few requests to the authorization server)."""
LOGIN_POLL_S: Final = 2.0
"""How often a server that needs a login looks whether a login (``mcpvisor mcp login``, in
another process) stored tokens: one stat of its token file."""


class UpstreamLogin:
    """The login handling of an upstream actor (mixed into `Upstream`)."""

    name: str
    spec: ServerSpec
    hooks: Hooks
    policy: RestartPolicy
    state: State
    last_error: str | None
    first_attempt_done: trio.Event
    _startup: trio.CancelScope | None

    if TYPE_CHECKING:  # the lifecycle primitives, defined by `Upstream`
        def _poke(self, *, end_life: bool = False) -> None: ...
        def _feed(self, event: Event, reason: str | None, *, retry_at: float | None = None) -> None: ...
        async def _sleep_until(self, deadline: float) -> None: ...
        def _interrupted(self) -> bool: ...

    def _init_login(self) -> None:
        """The login state of a new actor (no login needed, none asked for)."""
        self.login_interactive = False
        """The next start may open the browser for a login (``settings.oauth.openBrowser``)."""
        self._login_needed = False
        self._browser_tried = False
        """The proxy opened the browser for this need already (once until the server is
        ready again: a broken authorization server must not open a tab per restart)."""
        self._login_asked: trio.Event | None = None
        """Set by `start_login`: the next start logs in; it is set once the URL is known."""
        self.login_url: str | None = None
        self._login_running = False
        """A start waits for the browser's redirect: calls wait (bounded) rather than fail."""
        self._life_stamp: int | None = None
        """The token store's stamp when the current life began (`note_life_start`)."""

    def note_life_start(self) -> None:
        """A life begins: remember the token stamp, so tokens another process stores while
        this life fails for want of them still wake the ``needs_login`` that follows."""
        store = self.token_store()
        self._life_stamp = store.stamp() if store is not None else None

    def token_store(self) -> TokenStore | None:
        """Where this server's OAuth tokens live; None: it logs in to nothing (stdio, ws,
        or a static ``Authorization`` header in its config)."""
        spec = self.spec
        if spec.transport not in ("http", "sse"):
            return None
        if spec.oauth is None and any(k.lower() == "authorization" for k in spec.headers):
            return None
        return self.hooks.token_store(self.name)

    def login_needed(self) -> None:
        """The server wants a login no stored token can give: end this life (not a failure)."""
        if not self._login_needed:
            self._login_needed = True
            if self.state is State.READY:
                self._poke(end_life=True)

    async def show_login(self, url: str) -> None:
        """The authorization URL of a start allowed to ask a person: say so, lift the start's
        time limit to the login's, open the browser (or hand the URL to whoever asked for
        the login with `start_login`)."""
        self._login_running = True
        self.login_url = url
        if self._startup is not None:
            self._startup.deadline = trio.current_time() + LOGIN_WAIT_S + self.spec.startup_timeout
        if self.state is not State.READY:  # a step-up while ready keeps serving other calls
            self._feed(Event.NEED_LOGIN, "waiting for the login in the browser")
        logger.warning("%s: log in at %s", self.name, url)
        asked = self._login_asked
        if asked is not None:
            self._login_asked = None
            asked.set()
            return
        if not await open_browser(url):
            logger.warning("%s: no browser to open; open the URL above to log in", self.name)

    async def start_login(self) -> str:
        """Start the login of a server that needs one and return its authorization URL
        (the dashboard's "Log in": the person opens it; the server starts once they
        have logged in). The flow goes on in the server's next start, bounded by
        `LOGIN_WAIT_S`.

        Raises:
            ValueError: the server needs no login now (its state says why), or the flow
                did not reach an authorization URL within `LOGIN_URL_WAIT_S`.
        """
        if self.state is not State.NEEDS_LOGIN or self.token_store() is None:
            raise ValueError(f"server {self.name} is {shown(self.state)}: it needs no login now")
        if self._login_running and self.login_url is not None:
            return self.login_url  # a login is under way: the same URL
        asked = self._login_asked = trio.Event()
        self.login_interactive = True
        self._poke()
        with trio.move_on_after(LOGIN_URL_WAIT_S):
            await asked.wait()
            assert self.login_url is not None
            return self.login_url
        raise ValueError(f"server {self.name}: the login did not reach its authorization URL within "
                         f"{LOGIN_URL_WAIT_S:g}s ({self.last_error or 'no error'})")

    async def _hold_for_login(self) -> None:
        """``needs_login``: not a failure (no backoff, no breaker, the tools stay listed).
        Returns to start again at once when the proxy may open the browser itself (once per
        need), else when a login stores tokens or a restart, stop or disable is asked for."""
        self._login_needed = False
        self._login_running = False
        self.policy.on_stopped(trio.current_time())
        self.last_error = login_message(self.name)
        self._feed(Event.NEED_LOGIN, self.last_error)
        self.first_attempt_done.set()
        if self.hooks.open_browser() and not self._browser_tried:
            self._browser_tried = True
            self.login_interactive = True
            return
        store = self.token_store()
        stamp = store.stamp() if store is not None else 0
        if store is not None and self._life_stamp is not None and stamp != self._life_stamp:
            return  # tokens were stored while the life that needed them ran: try them now
        while not self._interrupted() and self._login_asked is None:
            await self._sleep_until(trio.current_time() + LOGIN_POLL_S)
            if store is not None and store.stamp() != stamp:
                return
