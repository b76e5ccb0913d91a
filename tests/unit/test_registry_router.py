"""Toolset changes through the router actor: serialized, announced once, atomic, persisted.

A real `Router` (its mailbox and loop), a real `StateStore` in a temporary directory and
the real `Menu`, with upstreams simulated by the registration messages their actors send
(no subprocess). The publish hook counts announcements: the router calls it once per
applied change that altered what clients see (the front turns each call into one
``list_changed`` per client).

These tests use the real clock (state writes run in worker threads, which a virtual
clock would jump past); each is bounded by `fail_after`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mcpvisor._atomic import LockTimeout
from mcpvisor.actors.core.catalog import Snapshot, UpstreamLists
from mcpvisor.actors.core.model import SavedState
from mcpvisor.actors.core.registration import UpstreamDown, UpstreamListed, UpstreamUp
from mcpvisor.actors.core.registry import Changes, RegistryCore
from mcpvisor.actors.core.toolsets import ENTER_CONFIG, PENDING, ToolsetError, ToolsetExposure
from mcpvisor.actors.router import Router
from mcpvisor.config import ToolRef, ToolsetDecl, declared_toolset
from mcpvisor.menu import DEFINITIONS, Menu
from mcpvisor.state import StateStore

BOUND_S: Final = 120.0
"""Per-test bound. Everything is in-process, but each state write fsyncs the file and its
directory, which takes seconds on a loaded machine (measured: up to 6 s at load 16)."""


def tool(name: str, kind: str = "string") -> dict[str, Any]:
    return {"name": name, "description": f"The {name} tool.",
            "inputSchema": {"type": "object", "properties": {"x": {"type": kind}}}}


@dataclass
class Harness:
    core: RegistryCore
    exposure: ToolsetExposure
    router: Router
    menu: Menu
    store: StateStore
    published: list[tuple[Snapshot, Changes]] = field(default_factory=list)
    statuses: list[Any] = field(default_factory=list)
    upstreams: dict[str, Any] = field(default_factory=dict)

    def status(self) -> list[Any]:
        return list(self.statuses)

    def names(self) -> list[str]:
        return self.core.snapshot.exposed_names()

    async def up(self, server: str, *names: str, kind: str = "string") -> None:
        await self.router.submit(UpstreamUp(server, UpstreamLists(tools=tuple(tool(n, kind) for n in names))))

    async def call(self, tool_name: str, **arguments: Any) -> dict[str, Any]:
        return await self.menu.call(tool_name, arguments)


@asynccontextmanager
async def open_harness(directory: Path, *, mode: str = "menu", servers: Sequence[str] = ("a", "b"),
                       pin: str = "warn", declared: Mapping[str, Sequence[str]] | None = None,
                       namespacing: str = "prefix") -> AsyncIterator[Harness]:
    """A router + menu over ``directory`` (the state dir), restored from it as at start-up."""
    store = StateStore(directory)
    decls = {name: declared_toolset(ToolsetDecl(name, tuple(ToolRef(t, None, None) for t in tools), None))
             for name, tools in (declared or {}).items()}
    exposure = ToolsetExposure(mode, definitions=DEFINITIONS, declared=decls, pin_schemas=pin)
    exposure.restore(await trio.to_thread.run_sync(store.load))
    core = RegistryCore(list(servers), namespacing=namespacing, exposure=exposure)
    published: list[tuple[Snapshot, Changes]] = []
    router = Router(core, lambda snap, changes: published.append((snap, changes)))
    h = Harness(core, exposure, router, None, store, published)  # type: ignore[arg-type]
    h.menu = Menu(h)
    h.router = router
    exposure.server_state = h.menu.server_state
    async with trio.open_nursery() as nursery:
        await nursery.start(router.run)
        yield h
        nursery.cancel_scope.cancel()


async def test_twenty_concurrent_equips_queue_and_each_change_is_announced_once(tmp_path: Path) -> None:
    """R3/R1: 20 concurrent equip/unequip requests all succeed (no "in progress" errors),
    apply one at a time, and the router announces exactly the steps that changed what
    clients see; the state file ends agreeing with the router."""
    with trio.fail_after(BOUND_S):
        async with open_harness(tmp_path / "state") as h:
            await h.up("a", "echo", "add")
            await h.up("b", "echo")
            await h.menu.build("x", [{"namespacedName": "a.echo"}])
            await h.menu.build("y", [{"namespacedName": "a.add"}, {"namespacedName": "b.echo"}])
            h.published.clear()
            before = tuple(h.names())
            seen: list[tuple[str | None, tuple[str, ...]]] = []
            original = h.router._handle

            def handle(message: object) -> None:
                original(message)
                ex = h.exposure
                seen.append((ex.equipped.name if ex.equipped else None, tuple(h.names())))

            h.router._handle = handle  # type: ignore[method-assign]
            results: list[Any] = []

            async def one(i: int) -> None:
                if i % 5 == 4:
                    try:
                        results.append(await h.menu.unequip())
                    except ToolsetError as exc:
                        if exc.code != "nothing_equipped":
                            raise  # the only refusal allowed here; any other fails the test
                        results.append(exc)
                else:
                    results.append(await h.menu.equip("x" if i % 2 else "y"))

            async with trio.open_nursery() as nursery:
                for i in range(20):
                    nursery.start_soon(one, i)
            assert len(results) == 20
            assert len(seen) == 20 - sum(isinstance(r, ToolsetError) for r in results)
            changed, previous = 0, before
            for _, names in seen:  # in mailbox order
                changed += names != previous
                previous = names
            assert len(h.published) == changed
            assert all(c.tools for _, c in h.published)
            final = (await trio.to_thread.run_sync(h.store.load)).equipped
            assert final == (h.exposure.equipped.name if h.exposure.equipped else None)
            assert h.published[-1][0].tools_list == h.core.snapshot.tools_list


async def test_equip_twice_announces_once_and_unequip_of_nothing_announces_nothing(tmp_path: Path) -> None:
    """R1 and R2 through the actor."""
    with trio.fail_after(BOUND_S):
        async with open_harness(tmp_path / "state") as h:
            await h.up("a", "echo")
            await h.menu.build("x", [{"namespacedName": "a.echo"}])
            h.published.clear()
            await h.menu.equip("x")
            await h.menu.equip("x")
            assert len(h.published) == 1
            await h.menu.unequip()
            assert len(h.published) == 2
            with pytest.raises(ToolsetError) as err:
                await h.menu.unequip()
            assert err.value.code == "nothing_equipped"
            assert err.value.data["toolsets"] == ["x"]
            assert len(h.published) == 2


async def test_an_equip_that_cannot_be_saved_changes_nothing(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Atomicity: the state file is written before the router applies; when the write
    fails (another process holds the lock) clients see no change and nothing is announced."""
    with trio.fail_after(BOUND_S):
        async with open_harness(tmp_path / "state") as h:
            await h.up("a", "echo")
            await h.menu.build("x", [{"namespacedName": "a.echo"}])
            before = h.core.snapshot
            h.published.clear()

            def locked_out(fn: Any) -> Any:
                raise LockTimeout(h.store.path, h.store.path.with_suffix(".lock"), 10.0)

            monkeypatch.setattr(h.store, "update", locked_out)
            result = await h.call("equip-toolset", name="x")
            assert result["isError"]
            assert result["structuredContent"]["error"] == "state_not_saved"
            assert "Nothing changed" in result["content"][0]["text"]
            assert h.core.snapshot is before
            assert not h.published
            assert h.exposure.equipped is None


async def test_pending_tools_appear_with_one_announcement_when_their_server_comes_up(tmp_path: Path) -> None:
    """A toolset naming a server that is not up: equip exposes the rest and says which are
    pending and why; the server coming up adds them with exactly one announcement."""
    with trio.fail_after(BOUND_S):
        async with open_harness(tmp_path / "state", declared={"dev": ["a.echo", "b.add"]}) as h:
            await h.up("a", "echo")
            await h.router.submit(UpstreamDown("b", withdraw=True, reason="exit status 3"))
            report = await h.menu.equip("dev")
            assert [t["state"] for t in report["tools"]] == ["exposed", PENDING]
            assert report["tools"][1]["detail"] == "server b is down: exit status 3"
            assert h.names() == [ENTER_CONFIG, "a_echo"]
            h.published.clear()
            await h.up("b", "add")
            assert len(h.published) == 1
            assert h.names() == [ENTER_CONFIG, "a_echo", "b_add"]
            await h.router.submit(UpstreamListed("b", "tools", (tool("other"),)))
            report = h.menu.active_report()
            assert report["tools"][1]["state"] == "missing"
            assert h.names() == [ENTER_CONFIG, "a_echo"]


async def test_the_equipped_toolset_and_notes_survive_a_restart_in_normal_mode(tmp_path: Path) -> None:
    """Persistence: a router restored over the same state directory starts in normal mode
    with the same toolset equipped and the same notes in its descriptions; the mode itself
    is not persisted."""
    state = tmp_path / "state"
    with trio.fail_after(BOUND_S):
        async with open_harness(state) as h:
            await h.up("a", "echo", "add")
            await h.menu.build("x", [{"namespacedName": "a.echo"},
                                     {"namespacedName": "a.add", "alias": "plus"}], auto_equip=True)
            await h.menu.set_configuration_mode(True)
            await h.menu.annotate({"namespacedName": "a.echo"}, [{"name": "tip", "note": "Say hi."}])
            assert h.exposure.configuring
        async with open_harness(state) as again:
            assert not again.exposure.configuring
            assert again.exposure.equipped is not None
            assert again.exposure.equipped.name == "x"
            await again.up("a", "echo", "add")
            assert again.names() == [ENTER_CONFIG, "a_echo", "plus"]
            desc = again.core.snapshot.tools["a_echo"].wire["description"]
            assert desc.endswith("Note: tip: Say hi.")


async def test_two_proxies_sharing_a_state_directory_lose_nothing(tmp_path: Path) -> None:
    """Two proxies build toolsets concurrently in one state directory: both are saved
    (each write is a locked read-modify-write), and each can equip the other's."""
    state = tmp_path / "state"
    with trio.fail_after(BOUND_S):
        async with open_harness(state) as one, open_harness(state) as two:
            for h in (one, two):
                await h.up("a", "echo", "add")
            async with trio.open_nursery() as nursery:
                for i in range(5):
                    nursery.start_soon(one.menu.build, f"one{i}", [{"namespacedName": "a.echo"}])
                    nursery.start_soon(two.menu.build, f"two{i}", [{"namespacedName": "a.add"}])
            saved = await trio.to_thread.run_sync(one.store.load)
            assert sorted(saved.toolsets) == sorted([f"one{i}" for i in range(5)]
                                                    + [f"two{i}" for i in range(5)])
            report = await one.menu.equip("two3")
            assert report["equipped"] == "two3"
            assert one.names() == [ENTER_CONFIG, "a_add"]


async def test_refuse_pins_refuse_the_equip_and_say_what_changed(tmp_path: Path) -> None:
    """pinSchemas 'refuse': equipping a toolset whose tool changed schema fails atomically,
    naming the tool and the change; 'warn' equips and reports it."""
    for pin in ("refuse", "warn"):
        with trio.fail_after(BOUND_S):
            async with open_harness(tmp_path / pin, pin=pin) as h:
                await h.up("a", "echo")
                await h.menu.build("x", [{"namespacedName": "a.echo"}])
                await h.up("a", "echo", kind="number")
                result = await h.call("equip-toolset", name="x")
                if pin == "refuse":
                    assert result["isError"]
                    data = result["structuredContent"]
                    assert data["error"] == "schema_changed"
                    assert data["changed"] == [{
                        "namespacedName": "a.echo",
                        "changes": ["input parameter 'x' changed (type string -> number)"]}]
                    assert h.exposure.equipped is None
                else:
                    assert not result.get("isError")
                    (entry,) = result["structuredContent"]["tools"]
                    assert entry["state"] == "schema_changed"
                    assert "a.echo" in result["content"][0]["text"]
                    assert "type string -> number" in result["content"][0]["text"]
                    active = await h.call("get-active-toolset")
                    assert active["structuredContent"]["tools"][0]["changes"] == entry["changes"]


async def test_a_lazy_server_named_by_an_equipped_toolset_is_started(tmp_path: Path) -> None:
    """Equip loads the idle (lazy) servers its pending tools need."""

    @dataclasses.dataclass
    class Lazy:
        state: Any = dataclasses.field(default_factory=lambda: type("S", (), {"value": "idle"})())
        reason: str | None = "lazy: starts on first use"
        last_error: str | None = None
        retry_at: float | None = None
        loaded: int = 0

        def load(self) -> None:
            self.loaded += 1

    with trio.fail_after(BOUND_S):
        async with open_harness(tmp_path / "state", declared={"dev": ["b.add"]}) as h:
            h.upstreams["b"] = lazy = Lazy()
            report = await h.menu.equip("dev")
            assert report["tools"][0]["detail"] == "server b is idle: lazy: starts on first use"
            assert lazy.loaded == 1


class MemoryStore:
    """A `StateStore` stand-in without the disk (same transaction contract), so Hypothesis
    can run many examples quickly."""

    def __init__(self) -> None:
        import threading

        self.path = Path("/nonexistent/state.json")
        self.state = SavedState(equipped=None, toolsets={}, annotations={})
        self._lock = threading.Lock()

    def load(self) -> SavedState:
        return self.state

    def update(self, fn: Any) -> SavedState:
        with self._lock:
            self.state = fn(self.state)
            return self.state


OPS: Final = ("equip x", "equip y", "unequip", "enter", "exit", "up b", "down b", "b changed")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(st.sampled_from(OPS), min_size=1, max_size=12))
async def test_random_concurrent_operations_end_consistent_and_announced_once(ops: list[str]) -> None:
    """R3/R4 through the actor: random toolset operations and upstream events, all sent at
    once, apply one at a time; every request gets its own answer (no "busy" errors), the
    store and the router agree at the end, what clients see equals a fresh rebuild of the
    final state, and the announcements are exactly the steps that changed the list."""
    with trio.fail_after(BOUND_S):
        store = MemoryStore()
        exposure = ToolsetExposure("menu", definitions=DEFINITIONS)
        core = RegistryCore(["a", "b"], exposure=exposure)
        published: list[tuple[Snapshot, Changes]] = []
        router = Router(core, lambda snap, changes: published.append((snap, changes)))
        h = Harness(core, exposure, router, None, store)  # type: ignore[arg-type]
        h.menu = Menu(h)
        seen: list[tuple[str, ...]] = []
        original = router._handle

        def handle(message: object) -> None:
            original(message)
            seen.append(tuple(core.snapshot.exposed_names()))

        router._handle = handle  # type: ignore[method-assign]
        async with trio.open_nursery() as nursery:
            await nursery.start(router.run)
            await h.up("a", "echo", "add")
            await h.up("b", "echo")
            await h.menu.build("x", [{"namespacedName": "a.echo"}, {"namespacedName": "b.echo"}])
            await h.menu.build("y", [{"namespacedName": "a.add"}])
            published.clear()
            before = tuple(h.names())
            seen.clear()
            answers: list[Any] = []

            async def run(op: str) -> None:
                try:
                    if op.startswith("equip"):
                        answers.append(await h.menu.equip(op.split()[1]))
                    elif op == "unequip":
                        answers.append(await h.menu.unequip())
                    elif op in ("enter", "exit"):
                        answers.append(await h.menu.set_configuration_mode(op == "enter"))
                    elif op == "up b":
                        await h.up("b", "echo")
                        answers.append(None)
                    elif op == "down b":
                        await router.submit(UpstreamDown("b", withdraw=True, reason="gone"))
                        answers.append(None)
                    else:
                        await h.up("b", "echo", "more", kind="number")
                        answers.append(None)
                except ToolsetError as exc:
                    if exc.code != "nothing_equipped":
                        raise  # the only refusal allowed here; any other fails the test
                    answers.append(exc)

            async with trio.open_nursery() as burst:
                for op in ops:
                    burst.start_soon(run, op)
            assert len(answers) == len(ops)
            changed, previous = 0, before
            for names in seen:
                changed += names != previous
                previous = names
            # Announcements of lists clients see (the others only tell fixed views to look).
            assert len([c for _, c in published if c.kinds()]) == changed
            assert (store.state.equipped or None) == (exposure.equipped.name if exposure.equipped else None)
            fresh_ex = ToolsetExposure("menu", definitions=DEFINITIONS)
            fresh_ex.sync(store.state)
            fresh_ex.equipped, fresh_ex.configuring = exposure.equipped, exposure.configuring
            fresh = RegistryCore(["a", "b"], exposure=fresh_ex)
            for server, lists in core.lists.items():
                fresh.apply(UpstreamUp(server, lists))
            assert fresh.snapshot.tools_list == core.snapshot.tools_list
            nursery.cancel_scope.cancel()
