"""The router actor: the single writer of registration state.

Owns the catalog (every server's discovered lists) and the exposure (which of those
tools clients see, under which names), as a synchronous core (`RegistryCore`) behind a
mailbox. Every mutation (a server coming up, going down, changing a list; an equip or
unequip) is a message handled one at a time; after each one the router publishes a
new immutable `Snapshot` and announces exactly the kinds of lists that changed.
Tool calls never pass through here: they read `router.snapshot`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

import trio

from actors.catalog import Candidate, Snapshot, SnapshotBuilder, UpstreamLists
from actors.messages import Reply, UpstreamDown, UpstreamListed, UpstreamState, UpstreamUp

logger = logging.getLogger(__name__)

MAILBOX_SIZE: Final = 64
"""Router mailbox buffer: upstream events arrive in bursts at start-up (20 servers),
and none of its senders should wait on a busy router for long."""


@dataclass(frozen=True, slots=True)
class Changes:
    """Which lists clients must re-fetch after a mutation."""

    tools: bool = False
    resources: bool = False
    prompts: bool = False

    def __bool__(self) -> bool:
        return self.tools or self.resources or self.prompts

    def kinds(self) -> tuple[str, ...]:
        return tuple(k for k in ("tools", "resources", "prompts") if getattr(self, k))


def diff(old: Snapshot, new: Snapshot) -> Changes:
    return Changes(
        tools=old.tools_list != new.tools_list,
        resources=old.resources_list != new.resources_list or old.templates_list != new.templates_list,
        prompts=old.prompts_list != new.prompts_list,
    )


@dataclass(frozen=True, slots=True)
class ServerFilter:
    """A server's config-level tool filter (``exposedTools`` / ``hiddenTools``)."""

    exposed: Mapping[str, str | None] | None = None
    """original -> rename (None keeps the name); None means every tool."""
    hidden: frozenset[str] = frozenset()

    def select(self, server: str, tools: Sequence[Mapping[str, Any]]) -> list[Candidate]:
        out = []
        for tool in tools:
            name = str(tool.get("name", ""))
            if name in self.hidden:
                continue
            if self.exposed is not None:
                if name not in self.exposed:
                    continue
                out.append(Candidate(server, name, tool, rename=self.exposed[name]))
            else:
                out.append(Candidate(server, name, tool))
        return out


class Exposure(Protocol):
    """Decides which tools clients see; the menu/toolset logic plugs in here."""

    def select(self, core: RegistryCore) -> tuple[list[Candidate], list[Mapping[str, Any]]]:
        """(upstream tools to expose, proxy-local tools to list first)."""


class ExposeAll:
    """``settings.exposure = "all"``: every discovered tool (plus the management tools)."""

    def __init__(self, local_tools: Callable[[], list[Mapping[str, Any]]] | None = None) -> None:
        self._local = local_tools

    def select(self, core: RegistryCore) -> tuple[list[Candidate], list[Mapping[str, Any]]]:
        return core.all_candidates(), (self._local() if self._local else [])


class RegistryCore:
    """Sans-IO registration state: apply a message, get the changes; read `snapshot`."""

    def __init__(
        self,
        order: Sequence[str],
        *,
        namespacing: str = "prefix",
        filters: Mapping[str, ServerFilter] | None = None,
        exposure: Exposure | None = None,
    ) -> None:
        self.order = list(order)
        self.filters = dict(filters or {})
        self.lists: dict[str, UpstreamLists] = {}
        self.states: dict[str, tuple[str, str | None]] = {}
        self.exposure: Exposure = exposure or ExposeAll()
        self._builder = SnapshotBuilder(namespacing=namespacing)
        self.snapshot = Snapshot()
        self.rebuild()

    # --- reads ---------------------------------------------------------------------
    @property
    def namespacing(self) -> str:
        """``settings.namespacing`` the names are built with (prefix, auto, none)."""
        return self._builder.namespacing

    def available(self) -> list[str]:
        """Servers whose lists are in the catalog, in config order."""
        return [s for s in self.order if s in self.lists]

    def all_candidates(self) -> list[Candidate]:
        out: list[Candidate] = []
        for server in self.available():
            out.extend(self.filters.get(server, ServerFilter()).select(server, self.lists[server].tools))
        return out

    def find_tool(self, server: str, original: str) -> Mapping[str, Any] | None:
        ul = self.lists.get(server)
        if ul is None:
            return None
        for tool in ul.tools:
            if tool.get("name") == original:
                return tool
        return None

    # --- writes ----------------------------------------------------------------------
    def rebuild(self) -> Changes:
        candidates, local = self.exposure.select(self)
        old = self.snapshot
        self.snapshot = self._builder.build(self.order, {s: self.lists[s] for s in self.available()},
                                            candidates, local)
        for problem in self.snapshot.problems:
            if problem not in old.problems:
                logger.warning("%s", problem)
        return diff(old, self.snapshot)

    def apply(self, message: object) -> Changes:
        """Apply one registration message; returns what clients must re-fetch."""
        match message:
            case UpstreamUp(server=server, lists=lists):
                self.lists[server] = lists
                self.states[server] = ("ready", None)
            case UpstreamListed(server=server, kind=kind, items=items):
                if server not in self.lists:
                    return Changes()
                self.lists[server] = self.lists[server].replace(kind, items)
            case UpstreamDown(server=server, withdraw=withdraw, reason=reason):
                if withdraw:
                    self.lists.pop(server, None)
                self.states[server] = ("down", reason)
            case UpstreamState(server=server, state=state, reason=reason):
                self.states[server] = (state, reason)
                return Changes()
            case _:
                raise TypeError(f"router core cannot apply {type(message).__name__}")
        return self.rebuild()

    def reconfigure(self, order: Sequence[str], filters: Mapping[str, ServerFilter], namespacing: str) -> Changes:
        """Apply a new config (hot reload): server order, filters, naming."""
        self.order = list(order)
        self.filters = dict(filters)
        for server in list(self.lists):
            if server not in self.order:
                del self.lists[server]
        self._builder.namespacing = namespacing
        return self.rebuild()


class Call(Protocol):
    """A mutation that runs inside the router and answers through its Reply."""

    reply: Reply[Any]

    def run(self, core: RegistryCore) -> tuple[Any, Changes]: ...


class _Apply:
    """Wraps a registration message so its sender can wait for it to be applied."""

    def __init__(self, message: object) -> None:
        self.message = message
        self.reply: Reply[None] = Reply()

    def run(self, core: RegistryCore) -> tuple[None, Changes]:
        return None, core.apply(self.message)


class Router:
    """The actor shell around `RegistryCore`.

    ``publish(snapshot, changes)`` is called after every mutation that changed what
    clients see; it must not block (the broadcaster queues per client).
    """

    def __init__(self, core: RegistryCore, publish: Callable[[Snapshot, Changes], None]) -> None:
        self.core = core
        self._publish = publish
        self._send, self._receive = trio.open_memory_channel[object](MAILBOX_SIZE)
        self.applied = 0

    @property
    def snapshot(self) -> Snapshot:
        return self.core.snapshot

    async def send(self, message: object) -> None:
        """Queue a message (waits only while the mailbox is full)."""
        await self._send.send(message)

    async def submit(self, message: object) -> None:
        """Queue a registration message and wait until it has been applied and announced."""
        await self.ask(_Apply(message))

    async def ask(self, call: Call) -> Any:
        """Run ``call`` inside the router, in mailbox order, and return its answer."""
        await self._send.send(call)
        return await call.reply.wait()

    def statistics(self) -> trio.MemoryChannelStatistics:
        return self._send.statistics()

    async def run(self, *, task_status: trio.TaskStatus[Router] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started(self)
        async with self._receive:
            async for message in self._receive:
                self._handle(message)

    def _handle(self, message: object) -> None:
        reply = getattr(message, "reply", None)
        try:
            if isinstance(reply, Reply):
                answer, changes = message.run(self.core)  # type: ignore[attr-defined]
            else:
                answer, changes = None, self.core.apply(message)
        except Exception as exc:
            if isinstance(reply, Reply):
                reply.fail(exc)
                return
            logger.exception("router could not apply %r", message)
            return
        self.applied += 1
        if changes:
            self._publish(self.core.snapshot, changes)
        if isinstance(reply, Reply):
            reply.set(answer)

    def close(self) -> None:
        self._send.close()
