"""The first answers a client gets (issue 25): launch -> ``initialize`` and -> first ``tools/list``.

* first_list: ``mcpvisor serve`` with 1, 9 and 30 upstreams, one of which is slow to
  start (`SLOW_START_S`), spoken to in raw JSON-RPC over its stdio (no SDK client, so
  the client's own start-up is not in the figure). Cold: an empty state directory;
  warm: the same directory again, so the remembered catalog lists every tool at once.
  Beside it, ``direct``: the slowest upstream alone, launch -> its ``tools/list``
  answer — what a client talking to it directly waits. The first answer must not
  depend on it: target ``first_list_s <= 0.3 s`` after the proxy has started
  (``serve_start_s``, the proxy's own launch to its ``initialize`` answer, is reported
  beside it), whatever the upstreams.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import trio

from mcpvisor.bench import procs
from mcpvisor.bench.core import Params, Result, median, rnd
from mcpvisor.bench.drivers import PYTHON, ServerDef, mcpvisor_config

BASE_TOOL_COUNT: Final = 4
"""echo, payload, sleep, work: what each benchmark upstream lists."""

MANAGEMENT_TOOLS: Final = 9
"""What ``exposure: all`` lists besides the servers' tools (the management tools)."""

SIZES: Final = (1, 9, 30)
"""Upstreams per proxy: one, the nine of issue 25's first-hour config, thirty."""

SLOW_START_S: Final = 3.0
"""How long the slowest upstream reads nothing after its launch: far past what the first
answers may take, short enough to keep the scenario quick."""

ANSWER_TIMEOUT_S: Final = 60.0
"""Bound on each awaited answer (a loaded 2-core machine starting 30 Python servers)."""

LIST_POLL_S: Final = 0.01
"""How often the cold run asks again until every tool is listed."""

EXIT_S: Final = 10.0
"""How long the proxy may take to exit once its client left (it stops its servers first)."""


def slow_fleet(n: int) -> list[ServerDef]:
    """``n`` benchmark upstreams, the last one slow to start."""
    return [ServerDef(f"s{i:02d}", start_delay=SLOW_START_S if i == n - 1 else 0.0) for i in range(n)]


class _Lines:
    """Newline-delimited JSON-RPC over a process's pipes: send, and read until an id answers."""

    def __init__(self, proc: trio.Process) -> None:
        self.proc = proc
        self.buf = b""

    async def send(self, *messages: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        await self.proc.stdin.send_all(b"".join(json.dumps(m).encode() + b"\n" for m in messages))

    async def answer(self, rid: int) -> dict[str, Any]:
        assert self.proc.stdout is not None
        with trio.fail_after(ANSWER_TIMEOUT_S):
            while True:
                while b"\n" in self.buf:
                    line, self.buf = self.buf.split(b"\n", 1)
                    if line.strip():
                        message = json.loads(line)
                        if message.get("id") == rid and "method" not in message:
                            return message  # type: ignore[no-any-return]
                chunk = await self.proc.stdout.receive_some(1 << 16)
                if not chunk:
                    raise RuntimeError("the server closed its stdout")
                self.buf += chunk


INITIALIZE: Final = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                     "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                                "clientInfo": {"name": "bench", "version": "1"}}}
INITIALIZED: Final = {"jsonrpc": "2.0", "method": "notifications/initialized"}
TOOLS_LIST: Final = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}


async def first_answers(argv: list[str], env: dict[str, str], log: Path,
                        complete: int | None = None) -> tuple[float, float, int, float | None]:
    """Launch ``argv``; (seconds to the ``initialize`` answer, seconds from asking to the
    first ``tools/list`` answer, tools in it, seconds from launch until a ``tools/list``
    holds ``complete`` tools: None when not asked for). Then the client leaves (stdin
    closed: the proxy remembers what its servers listed) and the process group is stopped."""
    with open(log, "ab") as err:  # noqa: ASYNC230 - a local log file, opened once per launch
        t0 = time.perf_counter()
        proc = await trio.lowlevel.open_process(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                                stderr=err, start_new_session=True)
    try:
        lines = _Lines(proc)
        await lines.send(INITIALIZE)
        await lines.answer(1)
        t_init = time.perf_counter() - t0
        asked = time.perf_counter()
        await lines.send(INITIALIZED, TOOLS_LIST)
        listed = await lines.answer(2)
        t_list = time.perf_counter() - asked
        count = len(listed["result"]["tools"])
        t_complete = None
        if complete is not None:
            rid, seen = 2, count
            with trio.fail_after(ANSWER_TIMEOUT_S):
                # Polling is the measurement: "complete" is when a client's tools/list holds every tool.
                while seen < complete:
                    await trio.sleep(LIST_POLL_S)
                    rid += 1
                    await lines.send({**TOOLS_LIST, "id": rid})
                    seen = len((await lines.answer(rid))["result"]["tools"])
            t_complete = time.perf_counter() - t0
        assert proc.stdin is not None
        await proc.stdin.aclose()
        with trio.move_on_after(EXIT_S):
            await proc.wait()
        return t_init, t_list, count, t_complete
    finally:
        await procs.stop_process(proc)


async def run_first_list(params: Params, workdir: Path, sizes: Sequence[int] = SIZES) -> Result:
    result = Result("first_list", "Launch to the first answers with 1, 9, 30 upstreams, one slow to start "
                    "(stdio, raw JSON-RPC)",
                    ["serve_start_s", "first_list_s", "listed", "tools", "complete_s", "slowest_direct_s"])
    result.params.update(rounds=params.startup_rounds, upstreams=list(sizes), slow_start_s=SLOW_START_S)
    result.notes.append("serve_start_s = launch -> initialize answer (the proxy's own start); first_list_s = "
                        "tools/list asked -> answered; listed = tools in that first answer (cold: those up "
                        "by then plus the management tools; warm: remembered ones too)")
    result.notes.append("complete_s (cold) = launch -> a tools/list holding every tool (polled); the cold "
                        "run then ends, and the warm run starts over the same state directory")
    result.notes.append(f"direct = the slowest upstream alone (it reads nothing for {SLOW_START_S:g} s), "
                        "launch -> its tools/list answer")
    slowest = slow_fleet(1)[0]
    direct: list[float] = []
    for _ in range(params.startup_rounds):
        t_init, t_list, _count, _ = await first_answers([PYTHON, *slowest.argv()], procs.base_env(),
                                                        workdir / "direct-slowest.log")
        direct.append(t_init + t_list)
    result.rows.append({"subject": "direct", "kind": "direct", "transport": "stdio", "upstreams": 1,
                        "slowest_direct_s": rnd(median(direct))})
    for n in sizes:
        servers = slow_fleet(n)
        every = BASE_TOOL_COUNT * n
        cfg = workdir / f"first-list-{n}.json"
        cfg.write_text(json.dumps(mcpvisor_config(servers, {"exposure": "all"}), indent=1))
        figures: dict[str, list[tuple[float, float, int, float | None]]] = {"cold": [], "warm": []}
        for r in range(params.startup_rounds):
            state = workdir / f"first-list-state-{n}-{r}"
            env = procs.base_env({"MCPVISOR_STATE_DIR": str(state)})
            argv = [PYTHON, "-m", "mcpvisor", "serve", "--config", str(cfg)]
            try:
                # cold runs until every tool is listed, so the warm run has it all remembered
                figures["cold"].append(await first_answers(argv, env, workdir / f"first-list-{n}.log",
                                                           complete=every + MANAGEMENT_TOOLS))
                figures["warm"].append(await first_answers(argv, env, workdir / f"first-list-{n}.log"))
            except Exception as exc:
                result.skip(f"mcpvisor, {n} upstreams", f"{type(exc).__name__}: {exc}")
                break
        for phase, runs in figures.items():
            if not runs:
                continue
            done = [r[3] for r in runs if r[3] is not None]
            result.rows.append({
                "subject": f"mcpvisor {phase}, {n}", "kind": "proxy", "transport": "stdio", "upstreams": n,
                "serve_start_s": rnd(median([r[0] for r in runs])),
                "first_list_s": rnd(median([r[1] for r in runs])),
                "listed": int(median([float(r[2]) for r in runs]) or 0), "tools": every + MANAGEMENT_TOOLS,
                "complete_s": rnd(median(done)) if done else None,
                "slowest_direct_s": rnd(median(direct)),
            })
    for row in result.rows:
        if row["subject"].startswith("mcpvisor"):
            value = row.get("first_list_s")
            result.targets.append({"subject": row["subject"], "metric": "first_list_s",
                                   "target": "<= 0.3", "value": value,
                                   "met": None if value is None else value <= 0.3,
                                   "what": "the first tools/list never waits for a slow upstream"})
    return result
