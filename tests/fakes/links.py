"""In-memory upstream servers for the actor's `open_link` seam, named for their behaviour.

A fake server (`FakeUpstream` and its subclasses) is the behaviour shared by every
"process" the actor starts; each start makes a new `FakeLink` (a real `mcpvisor.actors.link.Link`,
so the pending table, the inactivity timeout reset by progress, the hard cap, the
courtesy cancel and fail-at-once-on-close are the production code) with a new fake pid.
Nothing touches the OS, so everything runs under trio's MockClock: the fakes record the
virtual time (`trio.current_time()`) of every start, call, ping and cancel for the tests
to assert on.

    server = CrashOnNthCallUpstream(2)
    up = Upstream(spec, ..., open_link=server.open_link)
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import mcp_types as types
import trio

from mcpvisor.actors import wire
from mcpvisor.actors.errors import UpstreamDied
from mcpvisor.actors.link.base import Link, LinkEvents, Pending
from mcpvisor.actors.link.listing import ListPage
from mcpvisor.actors.link.sdk import hint_of
from mcpvisor.actors.process import describe_exit

_pids = itertools.count(40000)


def tool(name: str, *, read_only: bool = False, idempotent: bool = False) -> types.Tool:
    annotations = None
    if read_only or idempotent:
        annotations = types.ToolAnnotations(read_only_hint=read_only or None,
                                            idempotent_hint=idempotent or None)
    return types.Tool(name=name, description=f"fake {name}", input_schema={"type": "object"},
                      annotations=annotations)


DEFAULT_TOOLS: tuple[types.Tool, ...] = (
    tool("echo", read_only=True),      # retry-safe
    tool("plain_echo"),                # not retry-safe
    tool("sleep"),                     # answers after arguments["seconds"]; not retry-safe
    tool("read_sleep", read_only=True),  # the same, retry-safe
    tool("hang"),                      # never answers
)


def text_result(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": False}


@dataclass
class FakeProc:
    """What the actor reads of a process: its pid and, once it has exited, its status."""

    pid: int
    returncode: int | None = None


@dataclass
class FakeStderr:
    lines: list[str] = field(default_factory=list)

    def tail(self, n: int = 5) -> str:
        return " | ".join(line for line in self.lines[-n:] if line)


@dataclass(frozen=True)
class Seen:
    """One request the fake server received."""

    t: float
    pid: int
    method: str
    params: Mapping[str, Any] | None
    request_id: str


class FakeLink(Link):
    """One incarnation ("process") of a fake server."""

    def __init__(self, name: str, events: LinkEvents, server: FakeUpstream) -> None:
        super().__init__(name, events)
        self.fake = server
        self.proc = FakeProc(next(_pids))
        self.pid = self.proc.pid
        self.stderr = FakeStderr()
        self.capabilities = {"tools": {"listChanged": server.announces_changes}}
        self.protocol_version = "2025-11-25"
        self.tool_calls = 0
        self.hung = False

    async def list_page(self, kind: str, cursor: str | None) -> ListPage:
        """The fake's tools, in one page (its only list), with the hint it is set to send."""
        assert kind == "tools", "a fake server declares tools only"
        self.fake.listings.append(trio.current_time())
        result = types.ListToolsResult(tools=list(self.fake.current_tools()), **self.fake.list_hint)
        items = tuple(t.model_dump(by_alias=True, mode="json", exclude_none=True) for t in result.tools)
        return ListPage(items, None, hint_of(result))

    # --- what the server does ------------------------------------------------------
    def answer(self, request_id: str, result: Mapping[str, Any]) -> None:
        pending = self._pending.get(request_id)
        if pending is not None and pending.done is not None and not pending.done.is_set():
            pending.envelope = wire.Envelope(result=wire.encode(dict(result)))  # type: ignore[arg-type]
            pending.done.set()

    def fail(self, request_id: str, code: int, message: str) -> None:
        pending = self._pending.get(request_id)
        if pending is not None and pending.done is not None and not pending.done.is_set():
            pending.envelope = wire.Envelope(error=wire.encode({"code": code, "message": message}))  # type: ignore[arg-type]
            pending.done.set()

    def crash(self, status: int = 3, stderr: str = "") -> None:
        """The process exits: the link closes as a real StdioLink's does (status + stderr)."""
        if self.close_reason is not None:
            return
        self.proc.returncode = status
        if stderr:
            self.stderr.lines.append(stderr)
        tail = self.stderr.tail()
        reason = describe_exit(status)
        self.close(f"{reason}: {tail}" if tail else reason)

    def later(self, delay: float, fn: Callable[[], Any]) -> None:
        """Run ``fn`` after ``delay`` seconds unless the process is gone by then."""
        assert self.nursery is not None

        async def run() -> None:
            await trio.sleep(delay)
            if self.close_reason is None:
                result = fn()
                if hasattr(result, "__await__"):
                    await result

        self.nursery.start_soon(run)

    async def send_progress(self, request_id: str, progress: float) -> None:
        await self._progress(request_id, {"progressToken": request_id, "progress": progress})

    # --- Link ------------------------------------------------------------------------
    async def notify(self, method: str, params: Mapping[str, Any] | None) -> None:
        if self.close_reason is not None:
            raise UpstreamDied(self.server, self.close_reason)
        if method == "notifications/cancelled" and params is not None:
            cancel = (trio.current_time(), str(params.get("requestId")), params.get("reason"))
            self.fake.cancelled.append(cancel)

    async def _send_and_wait(self, pending: Pending, params: dict[str, Any]) -> wire.Envelope:
        self.fake.seen.append(Seen(trio.current_time(), self.pid, pending.method, params, pending.proxy_id))
        if not self.hung:
            self.fake.handle(self, pending.proxy_id, pending.method, params)
        if (self.close_reason is not None and pending.failure is None and pending.done is not None
                and not pending.done.is_set()):
            raise UpstreamDied(self.server, self.close_reason)
        return await self._wait(pending)


class FakeUpstream:
    """A healthy server: starts at once, answers every request. Subclasses inject faults.

    Records (virtual times): ``starts``, ``stops``, ``seen`` (every request), ``cancelled``
    (courtesy cancels received: (t, request id, reason)), ``listings`` (``tools/list``s).
    """

    announces_changes = True
    """What its ``tools.listChanged`` capability says."""

    link_class: type[FakeLink] = FakeLink
    """What each start makes (a subclass changes what one "process" declares or lists)."""

    list_hint: Mapping[str, Any] = {}
    """Caching directives its ``tools/list`` carries (``ttl_ms``, ``cache_scope``), as a
    2026-07-28 server sends them; none by default, as in the handshake era."""

    def __init__(self, tools: Sequence[types.Tool] = DEFAULT_TOOLS) -> None:
        self.tools = list(tools)
        self.starts: list[float] = []
        self.stops: list[float] = []
        self.seen: list[Seen] = []
        self.cancelled: list[tuple[float, str, Any]] = []
        self.links: list[FakeLink] = []
        self.listings: list[float] = []

    # --- hooks for subclasses ----------------------------------------------------------
    def current_tools(self) -> Sequence[types.Tool]:
        return self.tools

    async def on_start(self, link: FakeLink) -> None:
        """The handshake; raise or crash the link to fail the start."""

    def handle(self, link: FakeLink, request_id: str, method: str, params: Mapping[str, Any] | None) -> None:
        """Answer (now or later), crash, or leave a request unanswered."""
        if method == "ping":
            link.answer(request_id, {})
            return
        if method != "tools/call":
            link.fail(request_id, wire.METHOD_NOT_FOUND, f"Method not found: {method}")
            return
        link.tool_calls += 1
        self.on_call(link, request_id, params or {})

    def on_call(self, link: FakeLink, request_id: str, params: Mapping[str, Any]) -> None:
        name = params.get("name")
        args = params.get("arguments") or {}
        if name in ("sleep", "read_sleep"):
            link.later(float(args.get("seconds", 1)),
                       lambda: link.answer(request_id, text_result(f"slept in {link.pid}")))
            return
        if name == "hang":
            return
        link.answer(request_id, text_result(f"{name}: {args.get('text', '')} from {link.pid}"))

    # --- harness -----------------------------------------------------------------------
    @property
    def live(self) -> FakeLink | None:
        """The current process, if one is running."""
        if self.links and self.links[-1].close_reason is None:
            return self.links[-1]
        return None

    def kill(self, status: int = -9) -> None:
        """Kill the running process from outside (default: as by SIGKILL)."""
        link = self.live
        if link is not None:
            link.crash(status)

    def calls(self, method: str = "tools/call") -> list[Seen]:
        return [s for s in self.seen if s.method == method]

    @asynccontextmanager
    async def open_link(self, up: Any, *, events: LinkEvents, protocol: str,
                        on_spawn: Callable[[Link], None]) -> AsyncIterator[Link]:
        """The `mcpvisor.actors.upstream.OpenLink` for this fake."""
        link = self.link_class(up.name, events, self)
        self.links.append(link)
        self.starts.append(trio.current_time())
        on_spawn(link)
        try:
            async with trio.open_nursery() as nursery:
                link.nursery = nursery
                try:
                    await self.on_start(link)
                    if link.close_reason is not None:
                        raise UpstreamDied(up.name, link.close_reason)
                    yield link
                finally:
                    link.close(link.close_reason or "stopped by mcpvisor")
                    nursery.cancel_scope.cancel()
        finally:
            if link.proc.returncode is None:
                link.proc.returncode = 0
            self.stops.append(trio.current_time())


class CrashOnNthCallUpstream(FakeUpstream):
    """Every process exits with status 3 when its ``n``-th tools/call arrives (flaky.py
    ``--crash-on-call N``)."""

    def __init__(self, n: int, **kw: Any) -> None:
        super().__init__(**kw)
        self.n = n

    def on_call(self, link: FakeLink, request_id: str, params: Mapping[str, Any]) -> None:
        if link.tool_calls == self.n:
            link.crash(3, "boom: crashed on purpose")
            return
        super().on_call(link, request_id, params)


class CrashEveryNthCallUpstream(FakeUpstream):
    """Every ``n``-th tools/call across all processes kills the process."""

    def __init__(self, n: int, **kw: Any) -> None:
        super().__init__(**kw)
        self.n = n
        self.total = 0

    def on_call(self, link: FakeLink, request_id: str, params: Mapping[str, Any]) -> None:
        self.total += 1
        if self.total % self.n == 0:
            link.crash(3, "boom")
            return
        super().on_call(link, request_id, params)


class HangingUpstream(FakeUpstream):
    """Answers ``after`` tools/calls, then nothing at all (ping included) while staying alive
    (flaky.py ``--hang-after N``)."""

    def __init__(self, after: int = 0, **kw: Any) -> None:
        super().__init__(**kw)
        self.after = after

    def handle(self, link: FakeLink, request_id: str, method: str, params: Mapping[str, Any] | None) -> None:
        if self.after <= 0:
            link.hung = True
        if link.hung:
            return
        super().handle(link, request_id, method, params)
        if method == "tools/call" and link.tool_calls >= self.after:
            link.hung = True


class NeverStartsUpstream(FakeUpstream):
    """Every start exits with ``status`` before the handshake, saying ``stderr``; after
    `recover` the next start succeeds."""

    def __init__(self, status: int = 1, stderr: str = "fatal: cannot start", **kw: Any) -> None:
        super().__init__(**kw)
        self.status = status
        self.stderr = stderr
        self.broken = True

    def recover(self) -> None:
        self.broken = False

    def break_again(self) -> None:
        self.broken = True

    async def on_start(self, link: FakeLink) -> None:
        if self.broken:
            link.crash(self.status, self.stderr)


class HangsAtStartUpstream(FakeUpstream):
    """Never finishes its handshake (until `recover`): only the start-up timeout ends it."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.broken = True

    async def on_start(self, link: FakeLink) -> None:
        if self.broken:
            await trio.sleep_forever()


class SlowStartUpstream(FakeUpstream):
    """Takes ``delay`` seconds to finish its handshake."""

    def __init__(self, delay: float, **kw: Any) -> None:
        super().__init__(**kw)
        self.delay = delay

    async def on_start(self, link: FakeLink) -> None:
        await trio.sleep(self.delay)


class ProgressForeverUpstream(FakeUpstream):
    """tools/call never answers but sends progress every ``interval`` seconds."""

    def __init__(self, interval: float, **kw: Any) -> None:
        super().__init__(**kw)
        self.interval = interval

    def on_call(self, link: FakeLink, request_id: str, params: Mapping[str, Any]) -> None:
        async def tick(step: int = 1) -> None:
            await link.send_progress(request_id, step)
            link.later(self.interval, lambda: tick(step + 1))

        link.later(self.interval, tick)


class ChangingToolsUpstream(FakeUpstream):
    """Lists ``tool_sets[i]`` on its i-th start (the last one after that)."""

    def __init__(self, tool_sets: Sequence[Sequence[types.Tool]], **kw: Any) -> None:
        super().__init__(**kw)
        self.tool_sets = [list(t) for t in tool_sets]

    def current_tools(self) -> Sequence[types.Tool]:
        return self.tool_sets[min(len(self.starts), len(self.tool_sets)) - 1]


class QuietToolsUpstream(FakeUpstream):
    """Advertises ``tools.listChanged: false`` and never announces anything: change
    ``self.tools`` and only re-listing can see it."""

    announces_changes = False
