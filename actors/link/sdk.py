"""An upstream reached through one of the SDK's client transports (streamable HTTP, SSE, ws).

It sends through the session's own dispatcher (`mcpvisor.actors.sdk_compat`), to send a
request under our own id and hear its progress.

A streamable-HTTP upstream under ``protocol: auto`` that is opened in the handshake era
gets a second, session-less link beside its session (`SdkLink.modern_side`), when the
server also serves 2026-07-28 (it answers ``server/discover`` there). MCP 2026-07-28 lets
a dual-era server serve both eras on one endpoint: ``initialize`` scopes the old
semantics to its HTTP session, and a request carrying the 2026-07-28 ``_meta`` envelope
and no session id is served statelessly in the new era. A 2026-07-28 client's request
then reaches the server in its own era (`mcpvisor.actors.link.base.Link.request`), so
the server's own ``input_required`` rounds, with its own keys, reach that client.
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any, Final

import mcp_types as types
import trio
from mcp.client.session import ClientSession, IncomingMessage, LoggingFnT, MessageHandlerFnT
from mcp.shared.exceptions import MCPError
from mcp_types import CLIENT_CAPABILITIES_META_KEY
from mcp_types.version import LATEST_MODERN_VERSION

from mcpvisor.actors import wire
from mcpvisor.actors.core.catalog import CacheHint
from mcpvisor.actors.errors import UpstreamDied, UpstreamError
from mcpvisor.actors.link.base import Link, LinkEvents, Pending
from mcpvisor.actors.link.listing import ListPage
from mcpvisor.actors.link.modern_side import Announcements, SideEvents, follow, list_tools
from mcpvisor.actors.link.sdk_session import handshake, opened, sdk_client_info, session_callbacks
from mcpvisor.actors.sdk_compat import dispatcher_of, stamp

logger = logging.getLogger(__name__)

MODERN_SIDE_PROBE_S: Final = 10.0
"""Bound on opening the session-less 2026-07-28 side of a dual-era HTTP upstream (its
``server/discover``); the SDK's own discover probe waits as long. It runs beside the
link, never delaying its start; a 2026-07-28 client's request made meanwhile waits for it."""


class SdkLink(Link):
    """An upstream reached through an SDK client transport (streamable HTTP, SSE, ws)."""

    announcements: Announcements | None = None
    """With a `modern_side`: the server's list changes heard on both links, passed on once."""

    def list_changed(self, kind: str) -> None:
        """The server announced on this link that its ``kind`` list changed."""
        if self.announcements is not None:
            self.announcements.heard(kind, side=False)
        else:
            self.events.list_changed(kind)

    async def _abandon(self, pending: Pending) -> None:
        """The SDK dispatcher already sends the courtesy cancel when its request is abandoned."""

    async def list_page(self, kind: str, cursor: str | None) -> ListPage:
        """A list page through the session's own listing: it keeps what it needs of a tool
        list (each tool's ``Mcp-Param-*`` mapping and output schema) for later calls.

        Raises:
            UpstreamError: the server refused.
            UpstreamDied: the connection closed.
        """
        session = self.session
        assert session is not None
        params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
        result: Any
        try:
            if kind == "tools":
                result = await session.list_tools(params=params)
                page: list[Any] = result.tools
            elif kind == "resources":
                result = await session.list_resources(params=params)
                page = result.resources
            elif kind == "templates":
                result = await session.list_resource_templates(params=params)
                page = result.resource_templates
            else:
                result = await session.list_prompts(params=params)
                page = result.prompts
        except MCPError as exc:
            if exc.error.code == wire.CONNECTION_CLOSED:
                raise UpstreamDied(self.server, exc.error.message) from None
            raise UpstreamError(exc.error.code, exc.error.message, exc.error.data) from None
        items = tuple(x.model_dump(by_alias=True, mode="json", exclude_none=True) for x in page)
        return ListPage(items, result.next_cursor, hint_of(result))

    async def notify(self, method: str, params: Mapping[str, Any] | None) -> None:
        assert self.session is not None
        data: dict[str, Any] = {"method": method, "params": dict(params) if params else {}}
        opts: dict[str, Any] = {}
        stamp(self.session, data, opts)
        await dispatcher_of(self.session).notify(method, data.get("params") or None, opts)  # type: ignore[arg-type]

    async def _send_and_wait(self, pending: Pending, params: dict[str, Any]) -> wire.Envelope:
        assert self.session is not None
        session = self.session
        done = pending.done
        assert done is not None, "a call through the SDK always has its event (only stdio has a fast path)"
        data: dict[str, Any] = {"method": pending.method, "params": params}
        opts: dict[str, Any] = {"request_id": pending.proxy_id, "cancel_on_abandon": True}
        # The SDK's stamp writes the capabilities the session was built with; what this
        # upstream may ask is what the client behind this request declared (fitted by
        # `_prepare`), so that client's own capabilities go out, as over stdio.
        fitted = (params.get("_meta") or {}).get(CLIENT_CAPABILITIES_META_KEY)
        stamp(session, data, opts)
        if fitted is not None:
            data["params"]["_meta"][CLIENT_CAPABILITIES_META_KEY] = fitted
        progress_wanted = pending.origin is not None and pending.origin.progress_token is not None
        if progress_wanted:
            async def on_progress(progress: float, total: float | None, message: str | None) -> None:
                p: dict[str, Any] = {"progress": progress}
                if total is not None:
                    p["total"] = total
                if message is not None:
                    p["message"] = message
                await self._progress(pending.proxy_id, p)
            opts["on_progress"] = on_progress
            data["params"].get("_meta", {}).pop("progressToken", None)

        async def run() -> None:
            try:
                result = await dispatcher_of(session).send_raw_request(
                    pending.method, data.get("params") or None, opts  # type: ignore[arg-type]
                )
                pending.envelope = wire.Envelope(result=wire.encode(result))  # type: ignore[arg-type]
            except MCPError as exc:
                if exc.error.code == wire.CONNECTION_CLOSED:
                    pending.failure = UpstreamDied(self.server, exc.error.message)
                else:
                    pending.envelope = wire.Envelope(error=wire.encode(
                        {"code": exc.error.code, "message": exc.error.message, "data": exc.error.data}))  # type: ignore[arg-type]
            except Exception as exc:  # a transport error (httpx2, ws) ends this connection
                self.close(f"{type(exc).__name__}: {exc}")
            done.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(run)
            try:
                return await self._wait(pending)
            finally:
                nursery.cancel_scope.cancel()


def hint_of(result: Any) -> CacheHint | None:
    """The caching directives of one list page. Only what the server sent counts: the
    SDK's models default ``ttlMs`` to 0 and ``cacheScope`` to private for a result that
    carries neither (a handshake-era server)."""
    sent: set[str] = getattr(result, "model_fields_set", set())
    if "ttl_ms" not in sent and "cache_scope" not in sent:
        return None
    return CacheHint(int(result.ttl_ms), str(result.cache_scope))


def _message_handler(link: SdkLink) -> MessageHandlerFnT:
    async def handle(message: IncomingMessage) -> None:
        if isinstance(message, Exception):
            logger.warning("%s: transport error: %s", link.server, message)
            return
        root = getattr(message, "root", message)
        match root:
            case types.ToolListChangedNotification():
                link.list_changed("tools")
            case types.ResourceListChangedNotification():
                link.list_changed("resources")
            case types.PromptListChangedNotification():
                link.list_changed("prompts")
            case types.ResourceUpdatedNotification():
                link.events.resource_updated(str(root.params.uri))
            case _:
                pass

    return handle


def _logging_callback(link: SdkLink) -> LoggingFnT:
    async def handle(params: types.LoggingMessageNotificationParams) -> None:
        body = params.model_dump(by_alias=True, mode="json", exclude_none=True)
        link.events.log_message(body)
        await link.log_to_callers(body)

    return handle


@asynccontextmanager
async def open_sdk_link(
    server: str,
    transport: Any,
    *,
    events: LinkEvents,
    protocol: str,
    modern_transport: Callable[[], Any] | None = None,
) -> AsyncIterator[SdkLink]:
    """Connect through an SDK client transport (an async context manager of streams).

    ``modern_transport`` (a streamable-HTTP server under ``protocol: auto``) builds a
    second transport to the same endpoint: when the link opens in the handshake era, the
    server is asked ``server/discover`` on it, in the background, and a server that answers
    gets `SdkLink.modern_side` for as long as the link lives.
    """
    link = SdkLink(server, events)
    async with transport as streams, trio.open_nursery() as nursery:
        read, write = streams[0], streams[1]
        link.nursery = nursery
        session = ClientSession(read, write, client_info=sdk_client_info(),
                                message_handler=_message_handler(link),
                                logging_callback=_logging_callback(link), **session_callbacks(link))
        try:
            async with session:
                await handshake(session, protocol)
                link.session = session
                link.adopt(opened(session))
                await link.apply_log_level()
                if modern_transport is not None and not link.modern:
                    link.side_probed = trio.Event()
                    nursery.start_soon(_keep_modern_side, link, link.side_probed, modern_transport)
                yield link
        finally:
            link.close(link.close_reason or "stopped by mcpvisor")
            nursery.cancel_scope.cancel()


async def _keep_modern_side(link: SdkLink, probed: trio.Event, modern_transport: Callable[[], Any]) -> None:
    """Open ``link``'s session-less 2026-07-28 side and keep it while ``link`` lives.

    A server that does not answer ``server/discover`` there (a handshake-only server: an
    error, an HTTP 400 for the missing session, or silence until `MODERN_SIDE_PROBE_S`)
    keeps its calls on the session, as before; so does one whose side breaks later.
    """
    events = SideEvents(link.events)
    try:
        with trio.CancelScope(deadline=trio.current_time() + MODERN_SIDE_PROBE_S) as probe:
            async with open_sdk_link(link.server, modern_transport(), events=events,
                                     protocol=LATEST_MODERN_VERSION) as side, trio.open_nursery() as nursery:
                if side.capabilities is not None and side.capabilities.get("tools") is not None:
                    await list_tools(side)
                probe.deadline = math.inf
                logger.debug("%s: serves %s beside its session: 2026-07-28 clients' requests go there",
                             link.server, side.protocol_version)
                nursery.start_soon(follow, side, events)
                link.modern_side, link.announcements = side, events.announcements
                probed.set()
                try:
                    await side.closed.wait()
                finally:
                    link.modern_side = link.announcements = None
                    nursery.cancel_scope.cancel()
        if probe.cancelled_caught:
            logger.debug("%s: no answer to server/discover within %gs; 2026-07-28 clients stay bridged",
                         link.server, MODERN_SIDE_PROBE_S)
    except Exception as exc:  # any refusal or transport error: the server stays handshake-only to us
        # The error's type and code only: a transport error's text may carry the URL's query.
        code = f" {exc.error.code}" if isinstance(exc, MCPError) else ""
        logger.debug("%s: no 2026-07-28 side (%s%s); 2026-07-28 clients stay bridged",
                     link.server, type(exc).__name__, code)
    finally:
        probed.set()
