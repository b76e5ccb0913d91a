"""The ``discovery`` rows of ``tools_list_size`` (issue 16, "Measured"), on mcpvisor alone.

N benchmark upstreams, every one ``"lazy": true`` with a ``description``, behind
``mcpvisor serve`` with ``settings.exposure = "discovery"`` (stdio, fast path on):

* ``mcpvisor-discovery``: bytes (and tokens) of ``tools/list`` at start: discover_tool,
  use_tool, load_mcp; the catalog is the ``<mcp_servers>`` block of N servers;
* ``mcpvisor-discovery-loaded``: the same after one ``load_mcp``;
* ``mcpvisor-discover_tool``: the size of discover_tool's description alone then;
* ``load_ms``: ``load_mcp`` sent -> the loaded server's first successful ``use_tool``
  answered (a different server each round, since a load lasts the proxy's life);
* ``use_tool_ratio``: the median latency of ``use_tool`` against a direct ``tools/call`` of
  the same tool in the same session (discovery keeps every route callable), alternating
  one of each in turn; ``use_tool_extra_us`` is the difference of the medians.

Targets (reported, never asserted): start-up ``tools/list`` under 3 KB whatever N; use_tool
adds under 0.1 ms to a direct proxied call.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from mcpvisor.bench.core import Params, Result, median, rnd
from mcpvisor.bench.drivers import Launch, ServerDef, Subject, mcp_servers, open_session
from mcpvisor.bench.scenarios_fleet import BYTES_PER_TOKEN, fleet, size_row

USE_WARMUP: Final = 30
"""Warm-up pairs, as the latency scenario's 30 warm-up calls."""
USE_PAIRS_QUICK: Final = 300
USE_PAIRS_FULL: Final = 1000
"""Timed pairs (direct call, use_tool call), as the latency scenario's call counts."""
START_BUDGET_BYTES: Final = 3 * 1024
"""The issue's target for the start-up tools/list."""
USE_EXTRA_US: Final = 100.0
"""The issue's target: use_tool adds under 0.1 ms to a direct proxied call."""
ARGS: Final = {"query": "x"}


def _launch(servers: Sequence[ServerDef], workdir: Path, transport: str, port: int, tag: str) -> Launch:
    from mcpvisor.bench import procs
    from mcpvisor.bench.drivers import PYTHON

    entries = mcp_servers(servers)
    for name, entry in entries.items():
        entry.update(lazy=True, description=f"Benchmark toolbox {name}: search, fetch and friends")
    cfg = workdir / f"mcpvisor-discovery-{tag}.json"
    cfg.write_text(json.dumps({"mcpServers": entries,
                               "settings": {"exposure": "discovery", "startupWait": "60s"}}, indent=1))
    state = workdir / f"state-{tag}"
    state.mkdir(exist_ok=True)
    extra = {"MCPVISOR_STATE_DIR": str(state)}
    if os.environ.get("PYTHONPATH"):  # a worktree's code, when the bench is run with PYTHONPATH set
        extra["PYTHONPATH"] = os.environ["PYTHONPATH"]
    env = procs.base_env(extra, tag=tag)
    return Launch([PYTHON, "-m", "mcpvisor", "serve", "--config", str(cfg)], env, cwd=str(workdir))


SUBJECT: Final = Subject("mcpvisor-discovery", "proxy", _launch,
                         note="exposure discovery, every upstream lazy")


def _description_bytes(tools: Sequence[Any]) -> int:
    for t in tools:
        if t.name == "discover_tool":
            return len((t.description or "").encode())
    return 0


async def _paired(call: Any, tool: str, pairs: int) -> tuple[list[float], list[float]]:
    """Seconds of ``pairs`` direct calls of ``tool`` and as many use_tool calls of it, one of
    each in turn (which goes first alternates), after `USE_WARMUP` of each: a machine that
    slows down slows both alike."""
    use_args = {"tool_name": tool, "arguments": ARGS}
    direct: list[float] = []
    use: list[float] = []
    clock = time.perf_counter
    for i in range(USE_WARMUP + pairs):
        order = ((tool, ARGS, direct), ("use_tool", use_args, use))
        for name, args, spans in (order if i % 2 == 0 else order[::-1]):
            t0 = clock()
            result = await call(name, args)
            spent = clock() - t0
            if result.is_error:
                raise RuntimeError(f"{name} failed: {result.content!r:.200}")
            if i >= USE_WARMUP:
                spans.append(spent)
    return direct, use


async def run_discovery(params: Params, workdir: Path, size: Result) -> None:
    """Add the discovery rows (and their targets) to ``size``."""
    n = params.fleet
    servers = fleet(n, params.fleet_tools, bare=True)
    rounds = max(1, params.menu_rounds)
    try:
        async with open_session(SUBJECT, servers, workdir) as session:
            client = session.client
            start = await session.refresh_tools()
            size.rows.append(size_row("mcpvisor-discovery", "proxy", start,
                                      note=f"exposure discovery, {n} lazy upstreams, none loaded"))
            load_ms: list[float] = []
            for i in range(min(rounds, n)):
                server = servers[i].name
                t0 = time.perf_counter()
                loaded = await client.call_tool("load_mcp", {"mcp_name": server})
                if loaded.is_error:
                    raise RuntimeError(f"load_mcp {server}: {loaded.content!r:.300}")
                first = {"tool_name": f"{server}_tool_0", "arguments": ARGS}
                used = await client.call_tool("use_tool", first)
                if used.is_error:
                    raise RuntimeError(f"use_tool {server}_tool_0: {used.content!r:.300}")
                load_ms.append((time.perf_counter() - t0) * 1e3)
                if i == 0:
                    after = await session.refresh_tools()
                    size.rows.append(size_row("mcpvisor-discovery-loaded", "proxy", after,
                                              note=f"after one load_mcp ({params.fleet_tools} tools in the "
                                                   "catalog)"))
                    desc = _description_bytes(after)
                    size.rows.append({"subject": "mcpvisor-discover_tool", "kind": "proxy",
                                      "transport": "stdio",
                                      "tools": 1, "bytes": desc, "tokens": desc // BYTES_PER_TOKEN,
                                      "note": "discover_tool's description alone, after one load_mcp"})
            tool = f"{servers[0].name}_tool_0"
            from mcpvisor.actors.sdk_compat import tool_output_schemas

            # Discovery does not list the tool, so the SDK client would re-list tools/list before
            # each direct call to find an output schema (mcp/client/session.py validate_tool_result):
            # tell it the tool has none (it has none), so the direct call costs what a listed one does.
            tool_output_schemas(client.session).setdefault(tool, None)
            pairs = USE_PAIRS_QUICK if params.quick else USE_PAIRS_FULL
            direct_s, use_s = await _paired(client.call_tool, tool, pairs)
            d, u = median(direct_s) or 0.0, median(use_s) or 0.0
            row = size.row("mcpvisor-discovery")
            assert row is not None
            row.update(load_ms=rnd(median(load_ms)), direct_call_ms=rnd(d * 1e3, 4),
                       use_tool_ms=rnd(u * 1e3, 4),
                       use_tool_ratio=rnd(u / d if d else None), use_tool_extra_us=rnd((u - d) * 1e6, 1))
            for column in ("load_ms", "use_tool_ratio", "use_tool_extra_us"):
                if column not in size.columns:
                    size.columns.append(column)
            size.notes.append(f"discovery: load_ms = load_mcp sent -> the loaded server's first use_tool "
                              f"answered (median of {len(load_ms)} servers); use_tool vs a direct tools/call "
                              "of "
                              f"the same tool in the same session, {pairs} pairs, one of each in turn "
                              "(medians)")
    except Exception as exc:
        size.skip("mcpvisor-discovery", f"{exc}")
        return
    base = size.row("direct")
    for r in size.rows:
        if base and "ratio_bytes" not in r:
            r["ratio_bytes"] = rnd(r["bytes"] / base["bytes"])
    size.target("mcpvisor-discovery", "bytes", "<=", START_BUDGET_BYTES,
                "start-up tools/list under 3 KB in discovery exposure, whatever the number of servers")
    size.target("mcpvisor-discovery", "use_tool_extra_us", "<=", USE_EXTRA_US,
                "use_tool adds under 0.1 ms to a direct proxied call")
