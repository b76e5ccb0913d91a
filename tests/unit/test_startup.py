"""Start-up pieces on their own: the list-change coalescer (virtual clock), whose name a
request is for (`mcpvisor.actors.core.pending`), and the remembered catalog file."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import trio
import trio.testing

from mcpvisor.actors.core.catalog import CacheHint, Snapshot, UpstreamLists
from mcpvisor.actors.core.pending import owner_of, plan_unrouted
from mcpvisor.actors.core.registry import Changes
from mcpvisor.config import ServerSpec
from mcpvisor.remembered import CatalogFile, CatalogWriter, Remembered, catalog_fingerprint
from mcpvisor.startup import LONGEST_HOLD_S, MAX_HOLD_S, QUIET_S, ListChangeCoalescer

TOOLS = Changes(tools=True)
PROMPTS = Changes(prompts=True)


class Announced:
    def __init__(self) -> None:
        self.calls: list[tuple[float, Changes]] = []

    def __call__(self, snapshot: Snapshot, changes: Changes) -> None:
        self.calls.append((trio.current_time(), changes))


async def test_thirty_servers_coming_up_are_announced_a_few_times(
        autojump_clock: trio.testing.MockClock) -> None:
    """Thirty servers coming up 100 ms apart during start-up: clients are told a few times,
    not thirty (a regression shows as one announcement per server); the first servers up
    are announced within MAX_HOLD_S, and no change is held longer than LONGEST_HOLD_S."""
    announced = Announced()
    coalescer = ListChangeCoalescer(announced)
    async with trio.open_nursery() as nursery:
        await nursery.start(coalescer.run)
        start = trio.current_time()
        for i in range(30):
            coalescer.offer(Snapshot(version=i), PROMPTS if i == 7 else TOOLS)
            await trio.sleep(0.1)
        await trio.sleep(QUIET_S + 0.01)
        coalescer.end()
    assert coalescer.offered == 30
    assert 2 <= len(announced.calls) <= 4, announced.calls
    assert all(changes.tools for _, changes in announced.calls)
    assert any(changes.prompts for _, changes in announced.calls)  # nothing offered is lost
    assert announced.calls[0][0] - start <= MAX_HOLD_S + 0.11
    held_from = start
    for at, _ in announced.calls:
        assert at - held_from <= LONGEST_HOLD_S + 0.11
        held_from = at


async def test_a_burst_is_announced_once_after_the_quiet_window(
        autojump_clock: trio.testing.MockClock) -> None:
    """Three changes 50 ms apart, then quiet: one announcement, QUIET_S after the last."""
    announced = Announced()
    coalescer = ListChangeCoalescer(announced)
    async with trio.open_nursery() as nursery:
        await nursery.start(coalescer.run)
        start = trio.current_time()
        for _ in range(3):
            coalescer.offer(Snapshot(), TOOLS)
            await trio.sleep(0.05)
        await trio.sleep(5)
        assert [round(at - start, 3) for at, _ in announced.calls] == [round(0.1 + QUIET_S, 3)]
        nursery.cancel_scope.cancel()


async def test_the_end_of_start_up_announces_what_is_held_and_then_passes_through(
        autojump_clock: trio.testing.MockClock) -> None:
    """When start-up ends, what is held is announced at once; after it every change is
    announced as it happens (an equip must not wait for a window)."""
    announced = Announced()
    coalescer = ListChangeCoalescer(announced)
    async with trio.open_nursery() as nursery:
        await nursery.start(coalescer.run)
        coalescer.offer(Snapshot(), TOOLS)
        coalescer.end()
        assert len(announced.calls) == 1
        coalescer.offer(Snapshot(), PROMPTS)
        assert [c for _, c in announced.calls] == [TOOLS, PROMPTS]
        assert not coalescer.holding
    # run returned by itself once start-up ended


def test_a_name_belongs_to_the_longest_server_prefix() -> None:
    servers = ["git", "git-hub", "time"]
    assert owner_of("git_hub_search", servers, "prefix") == "git-hub"
    assert owner_of("git_status", servers, "prefix") == "git"
    assert owner_of("time_now", servers, "auto") == "time"
    assert owner_of("fetch_url", servers, "prefix") is None
    assert owner_of("git_", servers, "prefix") is None
    assert owner_of("git_status", servers, "none") is None  # bare names carry no server


@pytest.mark.parametrize(("state", "plan"), [
    ("starting", "wait"), ("backing_off", "wait"), ("half_open", "wait"), ("ready", "unknown"),
    ("idle", "lazy"), ("circuit_open", "down"), ("disabled", "down"), ("stopped", "down"),
    ("misconfigured", "down"), ("needs_login", "down"),
])
def test_a_starting_server_is_waited_for_and_a_down_one_refused(state: str, plan: str) -> None:
    assert plan_unrouted(state) == plan


def spec(**fields: object) -> ServerSpec:
    base: dict[str, object] = {"name": "git", "transport": "stdio", "command": "uvx",
                               "args": ("mcp-server-git",)}
    base.update(fields)
    return ServerSpec(**base)  # type: ignore[arg-type]


LISTS = UpstreamLists(tools=({"name": "status", "inputSchema": {"type": "object"}},),
                      prompts=({"name": "p"},))


def test_the_fingerprint_follows_what_the_server_is_not_how_it_is_shown() -> None:
    """Changing command, args, env or url makes remembered lists unusable; a description,
    a timeout or a tool filter does not (they apply on top of the lists)."""
    base = catalog_fingerprint(spec())
    assert catalog_fingerprint(spec(description="d", timeout=5.0, hidden_tools=frozenset({"x"}))) == base
    for changed in (spec(command="npx"), spec(args=("mcp-server-git", "-r", ".")), spec(env={"A": "1"}),
                    spec(env={"A": "2"}), spec(transport="http", url="http://127.0.0.1:1/mcp")):
        assert catalog_fingerprint(changed) != base
    assert catalog_fingerprint(spec(env={"A": "1"})) != catalog_fingerprint(spec(env={"A": "2"}))


def test_the_catalog_round_trips_and_keeps_no_env_value(tmp_path: Path) -> None:
    file = CatalogFile(tmp_path)
    secret = spec(env={"GITHUB_TOKEN": "ghp_s3cr3t"})
    entry = Remembered(catalog_fingerprint(secret), "2026-11-24T10:00:00Z", "legacy", LISTS)
    assert file.remember("git", entry) is True
    assert file.remember("git", entry) is False  # the same lists again: no write
    assert file.load() == {"git": entry}
    assert "ghp_s3cr3t" not in (tmp_path / "catalog.json").read_text()


def test_two_proxies_writing_the_same_catalog_keep_each_others_servers(tmp_path: Path) -> None:
    """Two writers (two proxies on one state directory) each remembering their own
    servers at once: every server's entry is there at the end, the file is whole JSON."""
    def write(prefix: str) -> None:
        file = CatalogFile(tmp_path)
        for i in range(20):
            file.remember(f"{prefix}{i}", Remembered(f"{i:016x}", "2026-11-24T10:00:00Z", None, LISTS))

    threads = [threading.Thread(target=write, args=(p,)) for p in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    names = set(CatalogFile(tmp_path).load())
    assert names == {f"{p}{i}" for p in "ab" for i in range(20)}
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_a_catalog_that_cannot_be_read_is_replaced(tmp_path: Path) -> None:
    (tmp_path / "catalog.json").write_text("{not json")
    file = CatalogFile(tmp_path)
    assert file.load() == {}
    file.remember("git", Remembered("f" * 16, "2026-11-24T10:00:00Z", None, LISTS))
    assert set(json.loads((tmp_path / "catalog.json").read_text())["servers"]) == {"git"}


async def test_the_writer_writes_the_newest_lists_of_each_server(tmp_path: Path) -> None:
    writer = CatalogWriter(CatalogFile(tmp_path))
    newer = LISTS.replace("tools", [{"name": "log", "inputSchema": {"type": "object"}}])
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            await nursery.start(writer.run)
            writer.seen(spec(), LISTS, "legacy")
            writer.seen(spec(), newer, "legacy")  # before the writer ran: only the newest is written
            await writer.wait_idle()
            assert writer.writes == 1
            writer.seen(spec(), newer, "legacy")  # the same lists again: nothing to write
            await writer.wait_idle()
            nursery.cancel_scope.cancel()
    assert writer.writes == 1
    entry = writer.file.load()["git"]
    assert (entry.fingerprint, entry.era, entry.lists) == (catalog_fingerprint(spec()), "legacy", newer)


async def test_a_private_list_is_not_remembered_and_a_ttl_bounds_the_entry(tmp_path: Path) -> None:
    """2026-07-28 caching directives: a list marked ``cacheScope: private`` never reaches
    the shared catalog file (only its era does), and an entry is listed from memory only
    until the shortest ``ttlMs`` of its lists runs out."""
    writer = CatalogWriter(CatalogFile(tmp_path))
    private = {"tools": CacheHint(60_000, "private"), "prompts": CacheHint(60_000, "public")}
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            await nursery.start(writer.run)
            writer.seen(spec(), LISTS, "2026-07-28", private)
            await writer.wait_idle()
            nursery.cancel_scope.cancel()
    raw = json.loads((tmp_path / "catalog.json").read_text())["servers"]["git"]
    assert raw["tools"] == []
    assert "status" not in json.dumps(raw)
    assert raw["prompts"] == [{"name": "p"}]
    entry = writer.file.load()["git"]
    assert (entry.era, entry.withheld, entry.listable()) == ("2026-07-28", ("tools",), False)

    seen = datetime(2026, 11, 24, 10, 0, 0, tzinfo=UTC)
    hints = {"tools": CacheHint(90_000, "public"), "prompts": CacheHint(30_000, "public")}
    public = Remembered.of("f" * 16, "2026-07-28", LISTS, hints, seen)
    assert public.lists == LISTS
    assert public.listable(seen + timedelta(seconds=29))
    assert not public.listable(seen + timedelta(seconds=31))  # the prompts' 30 s ran out first
    assert Remembered.from_json(public.to_json()) == public
    handshake = Remembered.of("f" * 16, "legacy", LISTS, None, seen)
    assert handshake.fresh_until is None
    assert handshake.listable(seen + timedelta(days=365))
