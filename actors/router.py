"""The router actor: the single writer of registration state.

Owns the catalog (every server's discovered lists) and the exposure (which of those
tools clients see, under which names), as a synchronous core (`mcpvisor.actors.core.registry.RegistryCore`)
behind a mailbox. Every mutation (a server coming up, going down, changing a list; an equip or
unequip) is a message handled one at a time; after each one the router publishes a
new immutable `Snapshot` and announces exactly the kinds of lists that changed.
Tool calls never pass through here: they read `router.snapshot`. A change of the
toolset exposure runs inside it as an `ExposureCall`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Final, Generic, Protocol, TypeVar

import msgspec
import trio

from mcpvisor.actors.core.catalog import Snapshot
from mcpvisor.actors.core.registry import Changes, RegistryCore
from mcpvisor.actors.core.toolsets import ToolsetError, ToolsetExposure
from mcpvisor.actors.messages import Reply

logger = logging.getLogger(__name__)

T = TypeVar("T")

MAILBOX_SIZE: Final = 64
"""Router mailbox buffer: upstream events arrive in bursts at start-up (20 servers),
and none of its senders should wait on a busy router for long."""


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


class ExposureCall(Generic[T]):
    """A change of the router's `ToolsetExposure`, run inside the router (`Router.ask`).

    ``fn(exposure, core)`` runs in mailbox order; the core is rebuilt once after it, so
    the change is announced at most once. If ``fn`` raises, the exposure is put back
    as it was and nothing is announced: the call applies fully or not at all.
    """

    def __init__(self, fn: Callable[[ToolsetExposure, RegistryCore], T]) -> None:
        self.fn = fn
        self.reply: Reply[T] = Reply()

    def run(self, core: RegistryCore) -> tuple[T, Changes]:
        exposure = core.exposure
        if not isinstance(exposure, ToolsetExposure):
            raise ToolsetError("no_toolsets", "this proxy's exposure does not support toolsets")
        saved = exposure.checkpoint()
        try:
            answer = self.fn(exposure, core)
        except BaseException:
            exposure.rollback(saved)
            raise
        # A toolset written or deleted (or its notes) may change a fixed view of it,
        # equipped or not.
        edited = exposure.saved != saved[0] or exposure.annotations != saved[1]
        return answer, msgspec.structs.replace(core.rebuild(), catalog=edited)


class Router:
    """The actor shell around `RegistryCore`.

    ``publish(snapshot, changes)`` is called after every mutation that changed what
    clients see, or that may have changed a fixed view (``changes.catalog``, with no
    list of the proxy's own changed); it must not block (the broadcaster queues per client).
    """

    def __init__(self, core: RegistryCore, publish: Callable[[Snapshot, Changes], None]) -> None:
        self.core = core
        self._publish = publish
        self._send, self._receive = trio.open_memory_channel[object](MAILBOX_SIZE)
        self.applied = 0
        self._changed = trio.Event()

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

    async def wait_changed(self) -> None:
        """Wait until the next mutation that changes what clients see (the snapshot is
        new by then; its announcement may still be held during start-up)."""
        await self._changed.wait()

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
            self._changed.set()
            self._changed = trio.Event()
            self._publish(self.core.snapshot, changes)
        if isinstance(reply, Reply):
            reply.set(answer)

    def close(self) -> None:
        self._send.close()
