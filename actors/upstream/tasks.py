"""What an upstream actor runs beside a live link: listing, re-listing, pings, the listen stream.

`LinkTasks` is a part of `mcpvisor.actors.upstream.actor.Upstream` (its base class): the tasks
`serve` runs for the life of one link (the re-lister after a list_changed, the
handshake-era pinger, the 2026-07-28 ``subscriptions/listen`` stream, the re-listing on
a cadence of lists the server cannot announce), and the listing of everything a server
offers.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

import trio

from mcpvisor.actors import wire
from mcpvisor.actors.core.catalog import CacheHint, UpstreamLists
from mcpvisor.actors.core.registration import UpstreamListed
from mcpvisor.actors.core.spec import ServerSpec
from mcpvisor.actors.errors import CallTimeout, ProxyError, UpstreamDied, UpstreamError
from mcpvisor.actors.upstream.failures import WRITE_FAILED, exit_text

if TYPE_CHECKING:
    from mcpvisor.actors.link import Link
    from mcpvisor.actors.upstream.status import Hooks, RouterPort

logger = logging.getLogger(__name__)

LIST_KINDS: Final = ("tools", "resources", "templates", "prompts")

_CAPABILITY_KINDS: Final = {
    "tools": ("tools",), "resources": ("resources", "templates"), "prompts": ("prompts",),
}
"""Server capability -> the lists whose changes its ``listChanged`` announces."""

RELIST_TIMEOUT_S: Final = 30.0
"""Bound on re-listing after a list_changed notification."""

MAX_LIST_PAGES: Final = 1000
"""Pages of one list followed before giving up on a server whose cursors never end
(1000 pages of the usual 50-100 items is far past any real catalog)."""

MIN_TTL_RELIST_S: Final = 1.0
"""Floor on the re-listing a list's ``ttlMs`` asks for: a server that says its list goes
stale every few milliseconds is re-listed at most once a second, not in a busy loop."""

EXIT_STATUS_WAIT_S: Final = 1.0
"""After a failed write, how long to wait for the exit status to explain it."""


def era_of(link: Link) -> str:
    """The era to open the server in next time, as the era memory and the remembered catalog
    keep it: ``legacy`` for a link opened with the handshake, else its 2026-07-28-era version.
    A dual-era HTTP server under ``auto`` is ``legacy`` here although it is reached in both
    eras: its 2026-07-28 side is found anew in each life, so it is no era to open in (what
    it speaks is `spoken_versions`)."""
    return "legacy" if not link.modern else str(link.protocol_version)


def spoken_versions(link: Link) -> tuple[str, ...]:
    """Every protocol version the proxy reaches the server in, for the status views: the
    link's, then, for a dual-era HTTP server under ``auto``, its session-less 2026-07-28
    side's while 2026-07-28 clients' calls go there (not once the server refused one for
    want of its back-channel: they stay on the session then)."""
    versions = [link.protocol_version] if link.protocol_version else []
    side = link.modern_side
    if (side is not None and side.close_reason is None and not link.back_channel_needed
            and side.protocol_version and side.protocol_version not in versions):
        versions.append(side.protocol_version)
    return tuple(versions)


class LinkTasks:
    """The listing and per-link tasks of an upstream actor (mixed into `Upstream`)."""

    name: str
    spec: ServerSpec
    router: RouterPort
    hooks: Hooks
    lists: UpstreamLists
    _dirty: set[str]
    _dirty_event: trio.Event
    _listen_uris: set[str]
    _listen_changed: trio.Event
    hints: dict[str, CacheHint]
    """Each list's caching directives as the server last sent them (2026-07-28 servers;
    none for a handshake-era one)."""
    _fresh_until: dict[str, float]
    """When each list with a positive ``ttlMs`` goes stale (trio time)."""
    _fresh_changed: trio.Event

    def mark_dirty(self, kind: str) -> None:
        """A list of ``kind`` changed upstream: re-list it (resources bring their templates)."""
        self._dirty.add(kind)
        if kind == "resources":
            self._dirty.add("templates")
        self._dirty_event.set()

    def recheck(self, kind: str) -> None:
        """Re-list ``kind`` now, telling clients only of a real change: an announcement
        that may repeat one already heard (`mcpvisor.actors.link.modern_side.Announcements`)."""
        now = trio.current_time()
        for each in (kind, "templates") if kind == "resources" else (kind,):
            self._fresh_until[each] = now
        self._fresh_changed.set()
        self._fresh_changed = trio.Event()

    def listen_to(self, uri: str, wanted: bool) -> None:
        """Follow (or stop following) updates of ``uri`` on a 2026-07-28 upstream, where
        ``resources/subscribe`` is gone and updates ride the ``subscriptions/listen`` stream."""
        if wanted == (uri in self._listen_uris):
            return
        if wanted:
            self._listen_uris.add(uri)
        else:
            self._listen_uris.discard(uri)
        self._listen_changed.set()

    async def serve(self, link: Link) -> str:
        """Run health pings and re-listing until the link ends; return why it ended."""
        quiet = Unannounced(unannounced_kinds(link))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._relister, link)
            nursery.start_soon(self._relist_when_stale, link)
            if self.spec.relist_every > 0:
                nursery.start_soon(self._poll_quiet_lists, link, quiet)
            if link.modern:
                nursery.start_soon(self._listen, link, quiet)
            if not link.modern and self.spec.health_check_interval > 0:
                nursery.start_soon(self._pinger, link)
            await link.closed.wait()
            nursery.cancel_scope.cancel()
        reason = link.close_reason or "connection closed"
        proc = getattr(link, "proc", None)
        if reason.startswith(WRITE_FAILED) and proc is not None:
            # A write hit a closed pipe: the process is exiting; its status is the reason.
            with trio.move_on_after(EXIT_STATUS_WAIT_S):
                await proc.wait()
            reason = exit_text(link) or reason
        return reason

    async def _pinger(self, link: Link) -> None:
        """Handshake-era liveness: ``maxMissedPings`` unanswered pings in a row = hung.

        MCP ping: "with no answer in time, the sender MAY treat the connection as stale";
        the link is closed, which fails its pending calls at once and restarts the server.
        """
        spec = self.spec
        missed = 0
        while True:
            await trio.sleep(spec.health_check_interval)
            try:
                await link.request("ping", None, timeout=spec.health_check_timeout,
                                   max_time=spec.health_check_timeout)
                missed = 0
            except CallTimeout:
                missed += 1
                logger.warning("%s: ping %d/%d unanswered", self.name, missed, spec.max_missed_pings)
                if missed >= spec.max_missed_pings:
                    link.close(f"hung: {missed} pings unanswered within {spec.health_check_timeout:g}s")
                    return
            except ProxyError:
                return  # the link is closing anyway, or the server does not do ping

    async def _listen(self, link: Link, quiet: Unannounced) -> None:
        """2026-07-28 upstreams send list changes only on a ``subscriptions/listen`` stream
        (SEP-2575): hold one open for the life of the link, reopened when the set of
        followed resources changes. Its notifications arrive through the link's reader.
        A server that has no such stream cannot announce anything: every list is then
        re-listed on the `spec.relist_every` cadence instead."""
        while True:
            changed = self._listen_changed = trio.Event()
            wanted: dict[str, Any] = {"toolsListChanged": True, "promptsListChanged": True,
                                      "resourcesListChanged": True}
            if self._listen_uris:
                wanted["resourceSubscriptions"] = sorted(self._listen_uris)
            async with trio.open_nursery() as nursery:
                async def reopen_on_change(changed: trio.Event, scope: trio.CancelScope) -> None:
                    await changed.wait()
                    scope.cancel()

                nursery.start_soon(reopen_on_change, changed, nursery.cancel_scope)
                try:
                    await link.request("subscriptions/listen", {"notifications": wanted},
                                       timeout=math.inf, max_time=math.inf)
                except ProxyError as exc:
                    if isinstance(exc, UpstreamDied):
                        return
                    logger.info("%s: no subscriptions/listen stream (%s); its lists are re-listed every %gs",
                                self.name, exc, self.spec.relist_every)
                    quiet.add(LIST_KINDS)
                    return
                nursery.cancel_scope.cancel()
            if not changed.is_set():
                await changed.wait()  # the server ended the stream on purpose: wait for a reason to reopen

    async def _poll_quiet_lists(self, link: Link, quiet: Unannounced) -> None:
        """Re-list, every `spec.relist_every` seconds, the lists the server cannot announce
        changes of (`unannounced_kinds`, or all of them once a 2026-07-28 server turns
        out to have no listen stream), and tell the router only about a list that really
        changed, so clients hear ``list_changed`` only then."""
        await quiet.wanted.wait()
        while True:
            await trio.sleep(self.spec.relist_every)
            for kind in [k for k in LIST_KINDS if k in quiet.kinds]:
                await self._relist(link, kind, polled=True)

    async def _relist_when_stale(self, link: Link) -> None:
        """Re-list each list whose ``ttlMs`` ran out, so what clients (and the remembered
        catalog) are served from the proxy's copy is never older than the server allows.
        Only a real change is announced. A ttl of 0 ("immediately stale") schedules
        nothing: re-listing before every client's list would make each list wait on every
        server, so such a list stays as fresh as the server's list-change announcements
        (or the `spec.relist_every` cadence for a server that cannot announce) keep it."""
        while True:
            changed = self._fresh_changed
            if not self._fresh_until:
                await changed.wait()
                continue
            kind = min(self._fresh_until, key=self._fresh_until.__getitem__)
            with trio.move_on_at(self._fresh_until[kind]):
                await changed.wait()
                continue  # a list was listed anew meanwhile: its new ttl may come first
            self._fresh_until.pop(kind, None)
            await self._relist(link, kind, polled=True)
            hint = self.hints.get(kind)
            if kind not in self._fresh_until and hint is not None:
                self._note_hint(kind, hint)  # the re-list failed: try again when the ttl runs out again

    def _note_hint(self, kind: str, hint: CacheHint | None) -> None:
        """Keep ``kind``'s caching directives from its latest listing and when it goes stale."""
        if hint is None:
            self.hints.pop(kind, None)
        else:
            self.hints[kind] = hint
        if hint is not None and hint.ttl_ms > 0:
            self._fresh_until[kind] = trio.current_time() + max(hint.ttl_ms / 1000, MIN_TTL_RELIST_S)
        else:
            self._fresh_until.pop(kind, None)
        self._fresh_changed.set()
        self._fresh_changed = trio.Event()

    async def _relister(self, link: Link) -> None:
        while True:
            await self._dirty_event.wait()
            self._dirty_event = trio.Event()
            kinds = [k for k in LIST_KINDS if k in self._dirty]
            self._dirty.clear()
            for kind in kinds:
                await self._relist(link, kind, polled=False)

    async def _relist(self, link: Link, kind: str, *, polled: bool) -> None:
        """List ``kind`` again and hand it to the router. A failure is logged and skipped
        (the next change or poll tries again). ``polled``: a cadence re-list nobody asked
        for, so its failure is only a debug line and an unchanged list is not sent."""
        try:
            with trio.fail_after(RELIST_TIMEOUT_S):
                items = await self._list(link, kind)
        except (ProxyError, trio.TooSlowError) as exc:
            logger.log(logging.DEBUG if polled else logging.WARNING, "%s: could not re-list %s: %s",
                       self.name, kind, exc)
            return
        if polled and items == getattr(self.lists, kind):
            return
        self.lists = self.lists.replace(kind, items)
        # Templates are re-listed beside resources: the resources message carries the
        # server's announcement, so clients hear one resources list_changed, not two.
        announced = not polled and kind != "templates"
        await self.router.send(UpstreamListed(self.name, kind, items, announced=announced))
        self.hooks.lists_seen(self.spec, self.lists, era_of(link), dict(self.hints))

    async def list_all(self, link: Link) -> UpstreamLists:
        """Every list the server offers, asked for together: a server with tools, resources
        and prompts is ready after the slowest of its lists, not after the four of them one
        after another (a restart's or a start's last round trips)."""
        offered = [kind for kind in LIST_KINDS if _offers(link, kind)]
        found: dict[str, tuple[dict[str, Any], ...]] = {}

        async def list_one(kind: str) -> None:
            found[kind] = await self._list(link, kind)

        if len(offered) == 1:
            await list_one(offered[0])
        elif offered:
            async with trio.open_nursery() as nursery:
                for kind in offered:
                    nursery.start_soon(list_one, kind)
        lists = UpstreamLists()
        for kind in offered:
            lists = lists.replace(kind, found[kind])
        return lists

    async def _list(self, link: Link, kind: str) -> tuple[dict[str, Any], ...]:
        if not _offers(link, kind):
            return ()
        items: list[dict[str, Any]] = []
        hint: CacheHint | None = None
        cursor: str | None = None
        for _page in range(MAX_LIST_PAGES):
            try:
                page = await link.list_page(kind, cursor)
            except UpstreamError as exc:
                if exc.code == wire.METHOD_NOT_FOUND:
                    self._note_hint(kind, None)
                    return ()
                raise
            items.extend(page.items)
            if page.hint is not None:
                hint = page.hint.join(hint)
            cursor = page.next_cursor
            if not cursor:
                break
        self._note_hint(kind, hint)
        return tuple(items)


def _offers(link: Link, kind: str) -> bool:
    """Whether the server's capabilities offer the list ``kind``."""
    caps = link.capabilities
    if caps is None:
        return False
    return caps.get("resources" if kind == "templates" else kind) is not None


class Unannounced:
    """The lists of one link whose changes the server cannot announce (grows, never shrinks)."""

    def __init__(self, kinds: set[str]) -> None:
        self.kinds = set(kinds)
        self.wanted = trio.Event()
        """Set once there is something to re-list."""
        if self.kinds:
            self.wanted.set()

    def add(self, kinds: tuple[str, ...]) -> None:
        self.kinds.update(kinds)
        if self.kinds:
            self.wanted.set()


def unannounced_kinds(link: Link) -> set[str]:
    """The lists a server offers without ``listChanged`` (2026-07-28 servers derive it from
    whether they serve ``subscriptions/listen``): only re-listing sees those change."""
    caps = link.capabilities
    if caps is None:
        return set()
    kinds: set[str] = set()
    for capability, lists in _CAPABILITY_KINDS.items():
        cap = caps.get(capability)
        if cap is not None and not (isinstance(cap, Mapping) and cap.get("listChanged")):
            kinds.update(lists)
    return kinds
