"""A small supervision tree around fake upstreams: a real router and registry core, a
recording event bus, one real `Upstream` actor per fake server. No process, no socket:
everything runs under `autojump_clock`.

    async with open_harness({"ok": FakeUpstream(), "bad": NeverStartsUpstream()}) as h:
        await h.wait_state("bad", "circuit_open")
        assert h.tool_announcements() == 1
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Final

import trio

from mcpvisor.actors.core.catalog import tool_hints
from mcpvisor.actors.core.registry import Changes, RegistryCore
from mcpvisor.actors.messages import Event, EventBus, StateChanged
from mcpvisor.actors.router import Router
from mcpvisor.actors.upstream import Hooks, Upstream
from mcpvisor.config import ServerSpec
from tests.fakes.links import FakeUpstream

MAX_MESSAGE: Final = 16 * 1024 * 1024

VIRTUAL_BOUND_S: Final = 4 * 3600.0
"""Default virtual-time bound of a harness block (the longest test sleeps an hour)."""


def fake_spec(name: str, **knobs: Any) -> ServerSpec:
    knobs.setdefault("command", "fake-server")
    return ServerSpec(name=name, transport="stdio", **knobs)


class RecordingBus(EventBus):
    """An `EventBus` that also keeps every event with the virtual time it was published."""

    def __init__(self) -> None:
        super().__init__()
        self.history: list[tuple[float, Event]] = []
        self.grew = trio.Event()

    def publish(self, event: Event) -> None:
        self.history.append((trio.current_time(), event))
        self.grew.set()
        self.grew = trio.Event()
        super().publish(event)

    def transitions(self, server: str | None = None) -> list[tuple[float, StateChanged]]:
        return [(t, e) for t, e in self.history
                if isinstance(e, StateChanged) and (server is None or e.server == server)]

    def states(self, server: str) -> list[str]:
        return [e.state for _, e in self.transitions(server)]


@dataclass
class Harness:
    core: RegistryCore
    router: Router
    bus: RecordingBus
    fakes: Mapping[str, FakeUpstream]
    upstreams: dict[str, Upstream] = field(default_factory=dict)
    announcements: list[tuple[float, Changes]] = field(default_factory=list)
    _cursor: dict[str, int] = field(default_factory=dict)

    def mark(self) -> int:
        """A point in the announcement log, for `tool_announcements`."""
        return len(self.announcements)

    def tool_announcements(self, after: int = 0) -> int:
        """How many tools/list_changed clients would have received (after mark ``after``)."""
        return sum(1 for _, c in self.announcements[after:] if c.tools)

    def exposed(self, server: str) -> list[str]:
        """The tool names of ``server`` clients see now."""
        return sorted(r.original for r in self.core.snapshot.tools.values() if r.server == server)

    async def call(self, server: str, tool: str,
                   arguments: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Call a tool as the front does (retry-safe when the tool is annotated so)."""
        up = self.upstreams[server]
        listed = next((t for t in up.lists.tools if t.get("name") == tool), None)
        read_only, idempotent = tool_hints(listed) if listed is not None else (False, False)
        return await up.request("tools/call", {"name": tool, "arguments": dict(arguments or {})},
                                retry_safe=read_only or idempotent)

    async def wait_state(self, server: str, state: str, *, reason: str | None = None) -> float:
        """Wait for ``server``'s next transition into ``state`` (with ``reason`` in its reason)
        after the last one this returned, even if it lasted no time; returns when it happened.
        """
        i = self._cursor.get(server, 0)
        while True:
            history = self.bus.history
            while i < len(history):
                t, event = history[i]
                i += 1
                if (isinstance(event, StateChanged) and event.server == server and event.state == state
                        and (reason is None or reason in (event.reason or ""))):
                    self._cursor[server] = i
                    return t
            await self.bus.grew.wait()


@asynccontextmanager
async def open_harness(
    fakes: Mapping[str, FakeUpstream],
    *,
    seed: int = 0,
    knobs: Mapping[str, Any] | None = None,
    per_server: Mapping[str, Mapping[str, Any]] | None = None,
    bound: float = VIRTUAL_BOUND_S,
) -> AsyncIterator[Harness]:
    """Run one actor per fake for the block; leaving it stops them all.

    Args:
        fakes: server name -> fake server.
        seed: the jitter rng's seed.
        knobs: `ServerSpec` fields for every server (``restart_delay=1.0``, ...), and
            ``jitter``, the restart policy's (0 unless given).
        per_server: more fields for one server, over ``knobs``.
        bound: virtual seconds the block may take: a wait that never ends would
            otherwise spin the autojump clock forever (pings keep deadlines coming).
    """
    bus = RecordingBus()
    core = RegistryCore(list(fakes), namespacing="prefix")
    h = Harness(core=core, router=Router(core, lambda snap, ch: None), bus=bus, fakes=fakes)
    h.router = Router(core, lambda snap, changes: h.announcements.append((trio.current_time(), changes)))
    rng = random.Random(seed)
    with trio.fail_after(bound):
        async with _tree(h, fakes, rng, knobs, per_server) as harness:
            yield harness


@asynccontextmanager
async def _tree(h: Harness, fakes: Mapping[str, FakeUpstream], rng: random.Random,
                knobs: Mapping[str, Any] | None, per_server: Mapping[str, Mapping[str, Any]] | None,
                ) -> AsyncIterator[Harness]:
    bus = h.bus
    async with trio.open_nursery() as root:
        await root.start(h.router.run)
        async with trio.open_nursery() as tree:
            for name, fake in fakes.items():
                fields = {**(knobs or {}), **((per_server or {}).get(name, {}))}
                # The policy's jitter has no config key: 0 (the default here) makes backoff times exact.
                jitter = fields.pop("jitter", 0.0)
                up = Upstream(fake_spec(name, **fields), router=h.router, events=bus, hooks=Hooks(),
                              reaper=None, max_message=MAX_MESSAGE, rng=rng, open_link=fake.open_link,
                              jitter=jitter)
                h.upstreams[name] = up
                await tree.start(up.run)
            try:
                yield h
            finally:
                tree.cancel_scope.cancel()
        root.cancel_scope.cancel()
