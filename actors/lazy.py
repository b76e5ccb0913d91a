"""Loading lazy servers: one start however many ask, three failed loads and no more.

Owns `LazyLoader`, the trio shell over `mcpvisor.actors.core.discovery.LazyBook` (which the
router holds). Every way a lazy server starts goes through `LazyLoader.load`:
``load_mcp``, and a first use in any exposure (a call of a tool named like the
server's, an equip of a toolset naming it, a resource read nobody else serves).

* Coalescing: concurrent loads of one server share one start (the first caller starts
  it, the others wait on the same outcome).
* Budget: a load that fails (the start fails: exit status and stderr tail, start-up
  timeout, HTTP status) is recorded in the book and the server goes back to ``idle``,
  so it is not retried behind the caller's back; after
  `mcpvisor.actors.core.discovery.MAX_LOAD_FAILURES` it is no longer offered and every load
  fails at once with the last error.
* Announcing: a successful load reaches clients as the upstream's own `UpstreamUp`
  (one ``list_changed`` per kind of list that changed); marking it loaded in the book
  changes nothing clients see, so it announces nothing more. Giving a server up
  changes discovery's catalog: one ``list_changed``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

import msgspec
import trio

from mcpvisor.actors.core.discovery import MAX_LOAD_FAILURES, LazyBook, LazyServer
from mcpvisor.actors.errors import ProxyError
from mcpvisor.actors.messages import Reply
from mcpvisor.actors.upstream.status import State

if TYPE_CHECKING:
    from mcpvisor.actors.core.registry import Changes, RegistryCore
    from mcpvisor.actors.router import Router
    from mcpvisor.actors.upstream import Upstream

logger = logging.getLogger(__name__)

LOAD_MARGIN_S: Final = 5.0
"""Beyond a server's own ``startupTimeout`` (which ends a slow start as a failure), the
longest a load waits for the actor to report: the actor records the failure in
microseconds, so reaching this means the actor is gone (shutting down)."""

FAILED_STATES: Final = frozenset({State.BACKING_OFF, State.CIRCUIT_OPEN, State.DISABLED, State.STOPPED,
                                  State.MISCONFIGURED})
"""States a starting server reaches when its start failed (or it was switched off)."""


class LoadFailed(Exception):
    """A lazy server could not be loaded; ``str()`` says why (the last error)."""

    def __init__(self, server: str, message: str, *, failures: int, given_up: bool) -> None:
        super().__init__(message)
        self.server = server
        self.failures = failures
        self.given_up = given_up


class Loaded(msgspec.Struct, frozen=True):
    """A load's success: whether this call started the server or found it running."""

    server: str
    started: bool
    tool_count: int


class _BookCall:
    """A change of the `LazyBook`, run inside the router (`Router.ask`); rebuilt once after."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.fn = fn
        self.reply: Reply[Any] = Reply()

    def run(self, core: RegistryCore) -> tuple[Any, Changes]:
        return self.fn(), core.rebuild()


class LazyLoader:
    """Loads lazy servers for every exposure; see the module docstring."""

    def __init__(self, router: Router, upstreams: Callable[[], Mapping[str, Upstream]],
                 book: LazyBook) -> None:
        self.router = router
        self._upstreams = upstreams
        self.book = book
        self._inflight: dict[str, Reply[Loaded]] = {}

    def is_lazy(self, name: str) -> bool:
        return name in self.book.servers

    def not_loaded(self) -> list[LazyServer]:
        """Lazy servers a load could still start (config order)."""
        return self.book.offered(self.router.core)


    async def load(self, name: str) -> Loaded:
        """Start lazy server ``name`` (or join the start already under way) and wait until
        it is ready and its lists are in the catalog.

        Idempotent: a server already loaded answers at once. Cancelling the caller does not
        cancel the start (other callers may be waiting on it); the outcome is recorded.

        Raises:
            LoadFailed: not a lazy server, given up after `MAX_LOAD_FAILURES`, or this start
                failed (the message carries the error).
        """
        record = self.book.get(name)
        up = self._upstreams().get(name)
        if record is None or up is None:
            raise LoadFailed(name, f"{name!r} is not a lazy server of this proxy", failures=0, given_up=False)
        if up.state is State.READY and name in self.router.core.lists:
            if not record.loaded:
                await self.router.ask(_BookCall(lambda: self.book.loaded(name)))
            return Loaded(name, False, len(up.lists.tools))
        if record.loaded:  # loaded earlier and restarting now: wait as any call would
            try:
                await up.wait_link()
            except ProxyError as exc:
                raise LoadFailed(name, str(exc), failures=record.failures, given_up=False) from None
            return Loaded(name, False, len(up.lists.tools))
        if record.given_up:
            raise self._failure(record)
        reply = self._inflight.get(name)
        if reply is None:
            reply = Reply()
            self._inflight[name] = reply
            # The start belongs to every waiter, not to this caller's cancel scope: run it
            # shielded, bounded by the server's own start-up timeout plus margins (docs/style.md rule 16).
            bound = up.spec.startup_timeout + 3 * LOAD_MARGIN_S
            try:
                with trio.CancelScope(shield=True, deadline=trio.current_time() + bound):
                    try:
                        reply.set(await self._start(name, up))
                    except LoadFailed as exc:
                        reply.fail(exc)
                reply.fail(LoadFailed(name, f"{name}: the load was interrupted (is the proxy shutting down?)",
                                      failures=record.failures, given_up=False))
            finally:
                self._inflight.pop(name, None)
        return await reply.wait()

    def _failure(self, record: LazyServer) -> LoadFailed:
        if record.given_up:
            message = (f"{record.name} failed to load {record.failures} times and is no longer offered; "
                       f"last error: {record.last_error}")
        else:
            message = (f"{record.name} failed to load ({record.failures} of {MAX_LOAD_FAILURES} tries): "
                       f"{record.last_error}")
        return LoadFailed(record.name, message, failures=record.failures, given_up=record.given_up)

    async def _start(self, name: str, up: Upstream) -> Loaded:
        logger.info("%s: loading (lazy server, first use)", name)
        up.load()
        error: str | None = None
        with trio.move_on_after(up.spec.startup_timeout + LOAD_MARGIN_S):
            while True:
                state = up.state
                if state is State.READY and name in self.router.core.lists:
                    break
                if state in FAILED_STATES:
                    error = up.last_error or up.reason or state.value
                    break
                await up.wait_changed()
        if error is None and not (up.state is State.READY and name in self.router.core.lists):
            error = f"did not report ready within {up.spec.startup_timeout + LOAD_MARGIN_S:g}s"
        if error is None:
            await self.router.ask(_BookCall(lambda: self.book.loaded(name)))
            return Loaded(name, True, len(up.lists.tools))
        # Back to idle: a lazy server is started when asked, never retried behind the caller.
        up.unload()
        with trio.move_on_after(LOAD_MARGIN_S):
            while up.state not in (State.IDLE, State.DISABLED, State.STOPPED, State.MISCONFIGURED):
                await up.wait_changed()
        record = await self.router.ask(_BookCall(lambda: self.book.failed(name, error)))
        assert record is not None
        logger.warning("%s: load failed (%d of %d): %s", name, record.failures, MAX_LOAD_FAILURES, error)
        raise self._failure(record)
