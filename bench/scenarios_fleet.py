"""Scenarios about many upstreams and the proxy's own behaviour: start-up, memory, tool-list
size, list_changed delivery after an equip, and recovery from a killed upstream.

* startup: launch -> first successful, complete ``tools/list``, with 1 and with N
  upstreams; direct with N means N clients connecting at once (what a client with N
  servers configured does), so "overlap, not add up" is visible in every row;
* rss: the proxy process alone (children excluded) with 3 and with N upstreams, after its
  first list and some calls;
* tools_list_size: bytes of the ``tools/list`` result with N upstreams of 10 tools each —
  direct (all N lists added up), everything exposed, the menu, and a small toolset;
* list_changed: ``equip-toolset`` call -> the client's receipt of
  ``notifications/tools/list_changed`` (mcpvisor's management tools; ``settings.exposure = "menu"``);
* recovery: SIGKILL the upstream under the proxy -> first successful call after its restart.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

import trio

from mcpvisor.bench import procs
from mcpvisor.bench.core import Params, Result, aggregate, mb, median, rnd
from mcpvisor.bench.drivers import (
    DIRECT,
    ServerDef,
    Session,
    Subject,
    mcpvisor_subject,
    open_session,
    resolve_tool,
)
from mcpvisor.bench.scenarios_calls import beats_peers, call_ok
from mcpvisor.bench.stalls import WATCH

BASE_TOOL_COUNT: Final = 4
"""echo, payload, sleep, work: what each default benchmark upstream lists."""
BYTES_PER_TOKEN: Final = 4
"""The usual rule of thumb for English text and JSON with common tokenizers; approximate."""
LIST_POLL_S: Final = 0.01
RSS_CALLS_PER_SERVER: Final = 5
RSS_TARGETS_MB: Final = {3: 60.0, 20: 80.0}
"""Issue 29: the proxy's RSS at most 60 MB with 3 upstreams, at most 80 MB with 20 (a fleet of
another size is held to the bound of the nearest size above it, or 20's)."""
MENU_TOOLS: Final = ("list-available-tools", "build-toolset", "equip-toolset", "unequip-toolset")
"""What the menu must list (plus enter-configuration-mode once a toolset is equipped)."""
LIST_CHANGED_TIMEOUT_S: Final = 10.0
RECOVERY_RETRY_S: Final = 0.005
TOOLSET_NAME: Final = "bench-toolset"


def fleet(n: int, tools: int = 0, bare: bool = False) -> list[ServerDef]:
    return [ServerDef(f"s{i:02d}", tools, bare) for i in range(n)]


async def unstalled_since(t0: float) -> float:
    """Seconds since ``t0``, less the time the machine spent paused (bench/stalls.py)."""
    t1 = time.perf_counter()
    await WATCH.settle()
    return t1 - t0 - WATCH.overlap(t0, t1)


@contextmanager
def _limit(seconds: float, what: str) -> Iterator[None]:
    """`trio.fail_after` that says what did not happen in time (a bare TooSlowError says nothing)."""
    try:
        with trio.fail_after(seconds):
            yield
    except trio.TooSlowError:
        raise RuntimeError(f"{what} within {seconds:g} s") from None


# --- startup ------------------------------------------------------------------------------------
async def time_to_list(subject: Subject, servers: Sequence[ServerDef], workdir: Path, expect: int,
                       limit_s: float) -> float:
    """Seconds from launch to a ``tools/list`` listing at least ``expect`` tools (polled until it does)."""
    t0 = time.perf_counter()
    async with open_session(subject, servers, workdir, list_first=False) as session:
        with _limit(limit_s, f"{subject.name} did not list all {expect} tools"):
            # Polling is the measurement: "ready" is when a client's tools/list is complete.
            while len(await session.refresh_tools()) < expect:  # noqa: ASYNC110
                await trio.sleep(LIST_POLL_S)
        return await unstalled_since(t0)


async def direct_fleet_time(servers: Sequence[ServerDef], workdir: Path) -> float:
    """N clients connecting to N upstreams at once: seconds until the last has listed its tools."""
    t0 = time.perf_counter()
    done: list[float] = []

    async def one(server: ServerDef) -> None:
        async with open_session(DIRECT, [server], workdir, list_first=True):
            done.append(time.perf_counter())

    async with trio.open_nursery() as nursery:
        for s in servers:
            nursery.start_soon(one, s)
    await WATCH.settle()
    return max(done) - t0 - WATCH.overlap(t0, max(done))


async def run_startup(subjects: Sequence[Subject], params: Params, workdir: Path) -> Result:
    n = params.fleet
    result = Result("startup", f"Launch to first complete tools/list, 1 and {n} upstreams (stdio)",
                    ["startup_1_s", "ratio_1", "startup_N_s", "ratio_N", "overlap"])
    result.params.update(rounds=params.startup_rounds, upstreams=[1, n])
    result.notes.append(f"direct with {n} = {n} SDK clients connecting to {n} upstreams at once; "
                        f"overlap = {n} upstreams / 1 upstream for the same subject")
    per_round: dict[str, list[dict[str, float]]] = {s.name: [] for s in subjects}
    one, many = fleet(1), fleet(n)
    alive = list(subjects)
    for r in range(params.startup_rounds):
        order = alive if r % 2 == 0 else list(reversed(alive))
        for subject in order:
            try:
                if subject.kind == "direct":
                    t1 = await time_to_list(subject, one, workdir, BASE_TOOL_COUNT, params.fleet_timeout_s)
                    tn = await direct_fleet_time(many, workdir)
                else:
                    t1 = await time_to_list(subject, one, workdir, BASE_TOOL_COUNT, params.fleet_timeout_s)
                    tn = await time_to_list(subject, many, workdir, BASE_TOOL_COUNT * n,
                                            params.fleet_timeout_s)
            except Exception as exc:
                result.skip(subject.name, f"{exc}")
                alive.remove(subject)
                per_round.pop(subject.name, None)
                continue
            per_round[subject.name].append({"startup_1_s": t1, "startup_N_s": tn, "overlap": tn / t1})
    table = aggregate(per_round, ["startup_1_s", "startup_N_s", "overlap"],
                      {"ratio_1": "startup_1_s", "ratio_N": "startup_N_s"})
    for subject in subjects:
        if subject.name in table:
            result.rows.append({"subject": subject.name, "kind": subject.kind, "transport": "stdio",
                                **table[subject.name]})
    result.target("mcpvisor", "overlap", "<=", 1.2, f"{n} upstreams ready within 1.2x the time of one")
    beats_peers(result, "ratio_N", lower_is_better=True)
    return result


# --- RSS and tools/list size --------------------------------------------------------------------
def list_bytes(tools: Sequence[Any]) -> int:
    """Bytes of a ``tools/list`` result as compact JSON (the tools as received, unset fields left out)."""
    import json

    payload = [t.model_dump(by_alias=True, mode="json", exclude_unset=True) for t in tools]
    return len(json.dumps({"tools": payload}, separators=(",", ":"), ensure_ascii=False).encode())


def size_row(subject: str, kind: str, tools: Sequence[Any] | int, n_bytes: int | None = None,
             note: str = "") -> dict[str, Any]:
    count = tools if isinstance(tools, int) else len(tools)
    size = n_bytes if n_bytes is not None else list_bytes(tools)  # type: ignore[arg-type]
    row = {"subject": subject, "kind": kind, "transport": "stdio", "tools": count, "bytes": size,
           "tokens": size // BYTES_PER_TOKEN}
    if note:
        row["note"] = note
    return row


async def listed_fleet(session: Session, servers: Sequence[ServerDef], limit_s: float) -> list[Any]:
    """Poll ``tools/list`` until every server's tools are in it (the fleet is up); that list.
    A count alone is not enough: a proxy's own tools can make up for a server not up yet."""
    expect = sum(s.tools for s in servers)

    def complete(tools: Sequence[Any]) -> bool:
        names = [t.name for t in tools]
        return len(tools) >= expect and all(resolve_tool(names, "tool_0", s.name) for s in servers)

    with _limit(limit_s, f"{session.subject.name} did not list all {expect} tools"):
        while not complete(tools := await session.refresh_tools()):  # noqa: ASYNC110
            await trio.sleep(LIST_POLL_S)
    return tools


async def rss_row(session: Session, servers: Sequence[ServerDef]) -> dict[str, Any]:
    """Calls to every upstream, then the proxy's memory: one ``rss`` row (its fleet listed already)."""
    for server in servers:
        tool = session.tool("tool_0", server.name)
        for _ in range(RSS_CALLS_PER_SERVER):
            await call_ok(session, tool, {"query": "x"})
    ups = procs.upstream_processes(session.root) if session.root else []
    subject = session.subject
    return {"subject": f"{subject.name}, {len(servers)}", "kind": subject.kind, "transport": "stdio",
            "upstreams": len(servers), "rss_mb": mb(session.rss()), "peak_rss_mb": mb(session.hwm()),
            "upstream_rss_mb": mb(procs.rss_bytes(ups) / max(1, len(ups)))}


def rss_target(n: int) -> float:
    """The RSS bound (MB) for a proxy with ``n`` upstreams (`RSS_TARGETS_MB`)."""
    return next((bound for size, bound in sorted(RSS_TARGETS_MB.items()) if n <= size), RSS_TARGETS_MB[20])


async def fleet_memory_and_size(subjects: Sequence[Subject], params: Params, workdir: Path,
                                wanted: Sequence[str]) -> list[Result]:
    """RSS with 3 and N upstreams and the tools/list sizes (all exposed, menu, toolset) with N."""
    n = params.fleet
    servers = fleet(n, params.fleet_tools, bare=True)
    small = fleet(min(3, n), params.fleet_tools, bare=True)
    rss = Result("rss", f"Resident memory with {len(small)} and {n} upstreams (the proxy process alone, "
                 "children excluded)", ["upstreams", "rss_mb", "peak_rss_mb", "upstream_rss_mb"])
    size = Result("tools_list_size", f"tools/list size, {n} upstreams x {params.fleet_tools} tools",
                  ["tools", "bytes", "tokens", "ratio_bytes"])
    size.notes.append(f"tokens ~ bytes / {BYTES_PER_TOKEN} (a rule of thumb, not a tokenizer)")
    rss.notes.append(f"measured after the first tools/list and {RSS_CALLS_PER_SERVER} calls per upstream; "
                     "direct = one upstream process, for scale")
    rss.params.update(upstreams=sorted({len(small), n}), tools_per_upstream=params.fleet_tools)
    size.params.update(upstreams=n, tools_per_upstream=params.fleet_tools, toolset=params.toolset_size)

    # direct: a client configured with N servers receives N lists.
    try:
        total_bytes, total_tools, upstream_rss = 0, 0, 0
        for server in servers:
            async with open_session(DIRECT, [server], workdir) as session:
                tools = await session.refresh_tools()
                total_bytes += list_bytes(tools)
                total_tools += len(tools)
                upstream_rss = max(upstream_rss, session.rss())
        size.rows.append(size_row("direct", "direct", total_tools, total_bytes,
                                  f"{n} separate lists added up"))
        rss.rows.append({"subject": "direct", "kind": "direct", "transport": "stdio", "upstreams": 1,
                         "rss_mb": mb(upstream_rss), "note": "one upstream process"})
    except Exception as exc:
        size.error = rss.error = f"direct baseline failed: {exc}"
        return [rss, size]

    for subject in subjects:
        if subject.kind == "direct":
            continue
        try:
            if "rss" in wanted and len(small) < n:  # a fresh proxy with the small fleet
                async with open_session(subject, small, workdir, list_first=False) as session:
                    await listed_fleet(session, small, params.fleet_timeout_s)
                    rss.rows.append(await rss_row(session, small))
            async with open_session(subject, servers, workdir, list_first=False) as session:
                tools = await listed_fleet(session, servers, params.fleet_timeout_s)
                size.rows.append(size_row(subject.name, subject.kind, tools,
                                          note="exposure all" if subject.kind == "proxy" else ""))
                rss.rows.append(await rss_row(session, servers))
        except Exception as exc:
            for r in (rss, size):
                r.skip(subject.name, f"{exc}")

    base = size.row("direct")
    if base:
        for row in size.rows:
            row["ratio_bytes"] = rnd(row["bytes"] / base["bytes"])
    for k in sorted({len(small), n}):
        bound = rss_target(k)
        rss.target(f"mcpvisor, {k}", "rss_mb", "<=", bound,
                   f"proxy RSS with {k} upstreams at most {bound:g} MB")
        beats_peers(rss, "rss_mb", lower_is_better=True, subject=f"mcpvisor, {k}")
    return [r for r in (rss, size) if r.scenario in wanted]


# --- menu: list_changed delay and the menu / toolset sizes -------------------------------------
async def run_menu(params: Params, workdir: Path, size: Result | None, want_changed: bool) -> Result | None:
    """Equip/unequip rounds on mcpvisor in menu exposure; adds the menu and toolset rows to ``size``."""
    n = params.fleet
    servers = fleet(n, params.fleet_tools, bare=True)
    changed = Result("list_changed",
                     "equip-toolset call -> client receives tools/list_changed (mcpvisor, stdio)",
                     ["equip_ms", "enter_ms", "call_ms"])
    changed.params.update(rounds=params.menu_rounds, upstreams=n, toolset=params.toolset_size)
    arrivals: list[float] = []
    wake = trio.Event()

    async def on_message(message: Any) -> None:
        nonlocal wake
        from mcp import types

        root = getattr(message, "root", message)
        if isinstance(root, types.ToolListChangedNotification):
            arrivals.append(time.perf_counter())
            wake.set()

    async def wait_changed(since: float) -> float:
        nonlocal wake
        with trio.fail_after(LIST_CHANGED_TIMEOUT_S):
            while not any(a >= since for a in arrivals):
                wake = trio.Event()
                await wake.wait()
        first = min(a for a in arrivals if a >= since)
        await WATCH.settle()
        return (first - since - WATCH.overlap(since, first)) * 1e3

    subject = mcpvisor_subject("mcpvisor", exposure="menu")
    try:
        async with open_session(subject, servers, workdir, message_handler=on_message) as session:
            # The menu list may be served before the upstreams are in; wait until they all are.
            missing = [t for t in MENU_TOOLS if t not in session.tool_names]
            if missing:
                reason = (f"mcpvisor's management tools are not there yet (missing {', '.join(missing)}; "
                          f"it lists {session.tool_names[:6]})")
                changed.skip("mcpvisor", reason)
                if size is not None:
                    size.skip("mcpvisor-menu", reason)
                return changed if want_changed else None
            menu_tools = await session.refresh_tools()
            if size is not None:
                size.rows.append(size_row("mcpvisor-menu", "proxy", menu_tools,
                                          note="exposure menu, nothing equipped"))
            members = [{"namespacedName": f"{servers[i % n].name}.tool_{i // n}"}
                       for i in range(params.toolset_size)]
            await _wait_catalog(session, servers, params)
            built = await session.client.call_tool("build-toolset", {"name": TOOLSET_NAME, "tools": members})
            if built.is_error:
                raise RuntimeError(f"build-toolset failed: {built.content!r:.300}")
            per_round: dict[str, list[dict[str, float]]] = {"mcpvisor": []}
            for _ in range(params.menu_rounds):
                t0 = time.perf_counter()
                res = await session.client.call_tool("equip-toolset", {"name": TOOLSET_NAME})
                call_ms = (time.perf_counter() - t0) * 1e3
                if res.is_error:
                    raise RuntimeError(f"equip-toolset failed: {res.content!r:.300}")
                equip_ms = await wait_changed(t0)
                await session.refresh_tools()  # what a client does on list_changed
                # Back to the menu for the next round: equipping left configuration mode, so
                # enter it (the client's list changes again: timed too), then unequip (the
                # menu list stays the same, so no list_changed is expected for that one).
                t1 = time.perf_counter()
                res = await session.client.call_tool("enter-configuration-mode", {})
                if res.is_error:
                    raise RuntimeError(f"enter-configuration-mode failed: {res.content!r:.300}")
                enter_ms = await wait_changed(t1)
                await session.refresh_tools()
                res = await session.client.call_tool("unequip-toolset", {})
                if res.is_error:
                    raise RuntimeError(f"unequip-toolset failed: {res.content!r:.300}")
                per_round["mcpvisor"].append({"equip_ms": equip_ms, "enter_ms": enter_ms, "call_ms": call_ms})
            table = aggregate(per_round, ["equip_ms", "enter_ms", "call_ms"], {})
            changed.rows.append({"subject": "mcpvisor", "kind": "proxy", "transport": "stdio",
                                 **table["mcpvisor"]})
            changed.notes.append("delay = from sending the call to the notification's arrival; "
                                 "the call's own duration is call_ms")
            if size is not None:
                t2 = time.perf_counter()
                res = await session.client.call_tool("equip-toolset", {"name": TOOLSET_NAME})
                await wait_changed(t2)
                tools = await session.refresh_tools()
                size.rows.append(size_row("mcpvisor-toolset", "proxy", tools,
                                          note=f"menu exposure, a {params.toolset_size}-tool toolset "
                                          "equipped"))
    except Exception as exc:
        changed.skip("mcpvisor", f"{exc}")
        if size is not None:
            size.skip("mcpvisor-menu", f"{exc}")
    if size is not None:
        base = size.row("direct")
        for row in size.rows:
            if base and "ratio_bytes" not in row:
                row["ratio_bytes"] = rnd(row["bytes"] / base["bytes"])
    return changed if want_changed else None


async def _wait_catalog(session: Session, servers: Sequence[ServerDef], params: Params) -> None:
    """Wait until list-available-tools knows every upstream (they start concurrently)."""
    with trio.move_on_after(60):
        while True:
            res = await session.client.call_tool("list-available-tools", {})
            text = " ".join(getattr(c, "text", "") for c in res.content)
            if all(f"{s.name}." in text for s in servers):
                return
            await trio.sleep(0.05)


# --- recovery -----------------------------------------------------------------------------------
RECOVERY_TARGET_S: Final = 0.5
"""Issue 18: from SIGKILL of a working upstream to the next successful call, on a quiet machine."""

async def run_recovery(subjects: Sequence[Subject], params: Params, workdir: Path) -> Result:
    result = Result("recovery", "SIGKILL the upstream -> first successful call after its restart (stdio)",
                    ["recovery_s", "upstream_ms", "rest_ms", "recovered"])
    result.params.update(rounds=params.recovery_rounds, timeout_s=params.recovery_timeout_s)
    result.notes.append("each round is a fresh proxy whose upstream answered a call before the kill, so "
                        "mcpvisor restarts it at once (a healthy life: no backoff, docs/supervision.md); "
                        "a direct client has nothing to recover with")
    result.notes.append("rounds alternate between the subjects; the upstream's own start (its "
                        "interpreter booting) is most of the time and varies by tens of ms from one "
                        "start to the next, so the median of several rounds is what ranks them; a "
                        "subject that did not recover in a round is not tried again")
    result.notes.append("upstream's own start: the CPU time the new upstream process ran until "
                        "the call succeeded (its interpreter, imports, answers; /proc/PID/schedstat); "
                        "the rest is everything else in the span: the kernel ending the killed "
                        "process, the proxy seeing it and spawning again, its handshake and the call "
                        "through it (medians of the rounds' own differences)")
    proxies = [s for s in subjects if s.kind != "direct"]
    times: dict[str, list[float]] = {s.name: [] for s in proxies}
    own: dict[str, list[float]] = {s.name: [] for s in proxies}
    rest: dict[str, list[float]] = {s.name: [] for s in proxies}
    failures: dict[str, list[str]] = {s.name: [] for s in proxies}
    for _ in range(params.recovery_rounds):
        for subject in proxies:
            if failures[subject.name]:
                continue
            try:
                async with open_session(subject, [ServerDef("b", lean=True)], workdir) as session:
                    outcome = await _kill_and_time(session, params.recovery_timeout_s)
            except Exception as exc:
                failures[subject.name].append(f"{exc!r:.300}")
                continue
            if isinstance(outcome, str):
                failures[subject.name].append(outcome)
                continue
            took, upstream_s = outcome
            times[subject.name].append(took)
            if upstream_s is not None:
                own[subject.name].append(upstream_s)
                rest[subject.name].append(took - upstream_s)
    for subject in proxies:
        got, failed = times[subject.name], failures[subject.name]
        if got or (failed and failed[0].startswith("no successful call")):
            result.rows.append({"subject": subject.name, "kind": subject.kind, "transport": "stdio",
                                "recovery_s": rnd(median(got)) if got else None,
                                "upstream_ms": _median_ms(own[subject.name]),
                                "rest_ms": _median_ms(rest[subject.name]),
                                "recovered": f"{len(got)}/{len(got) + len(failed)}",
                                **({"note": failed[0][:160]} if failed else {})})
        else:
            result.skip(subject.name, failed[0] if failed else "no rounds ran")
    beats_peers(result, "recovery_s", lower_is_better=True)
    beats_peers(result, "rest_ms", lower_is_better=True)
    result.target("mcpvisor", "recovery_s", "<=", RECOVERY_TARGET_S,
                  "SIGKILL -> next successful call (issue 18)")
    return result


def _median_ms(seconds: Sequence[float]) -> float | None:
    middle = median(seconds)
    return rnd(middle * 1000) if middle is not None else None


async def _kill_and_time(session: Session, limit_s: float) -> tuple[float, float | None] | str:
    """Kill the session's upstream; seconds until a call succeeds again and of those the
    seconds the new upstream process ran (None if unknown), or why it did not succeed."""
    tool = await session.wait_tool("echo")
    await call_ok(session, tool, {"text": "before"})
    ups = procs.upstream_processes(session.root) if session.root else []
    if not ups:
        return "could not find the upstream process under the proxy"
    killed = {p.pid for p in ups}
    for p in ups:
        p.send_signal(signal.SIGKILL)
    t0 = time.perf_counter()
    last = ""
    with trio.move_on_after(limit_s):
        while True:
            try:
                with trio.fail_after(limit_s):
                    await call_ok(session, tool, {"text": "after"})
                took = await unstalled_since(t0)
                assert session.root is not None
                new = [p.pid for p in procs.upstream_processes(session.root) if p.pid not in killed]
                return took, (procs.run_time_s(new[0]) if len(new) == 1 else None)
            except Exception as exc:
                last = f"{exc!r:.160}"
                await trio.sleep(RECOVERY_RETRY_S)
    return f"no successful call within {limit_s:g} s after the kill (last error: {last})"
