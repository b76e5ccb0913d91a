"""In-process timing of the stdio fast path's routing of one ``tools/call`` (no pipes, no upstream).

Runs `mcpvisor.actors.fronts.fastpath.FastPath.client_request` on a prepared frame against a snapshot
with a plain tool and a compound tool, with a link that only mints ids and drops the
bytes it is given: what is timed is the proxy's own work on a call (envelope, the call's
plan, the rewrite, the registration), not trio's I/O. Prints the best of several runs
(as timeit does: on a shared machine the others are the same work plus interference), in
microseconds per call, for each kind of call::

    python -m mcpvisor.bench.fastpath_route [--calls N] [--runs N]
"""

from __future__ import annotations

import argparse
import gc
import json
import time
from types import SimpleNamespace
from typing import Any, Final

import trio

from mcpvisor.actors import wire
from mcpvisor.actors.core.catalog import Candidate, SnapshotBuilder, UpstreamLists
from mcpvisor.actors.core.compound import CompoundDecl, SubtoolDecl, resolve_compound
from mcpvisor.actors.fronts.fastpath import FastPath
from mcpvisor.actors.harness import ClientSession
from mcpvisor.actors.link.stdio import StdioLink
from mcpvisor.actors.upstream import State

CALLS: Final = 20_000
"""Calls per run: enough that the clock's resolution and the loop are noise."""

RUNS: Final = 7
"""Runs per kind of call; the best is reported."""

_ECHO: Final = {"name": "echo", "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}}


class _Link(StdioLink):
    """A link with no process: mints an id per call and drops what it is sent."""

    def __init__(self) -> None:  # the parent's needs a process; nothing here uses it
        self.close_reason = None
        self.protocol_version = "2025-11-25"
        self._envelope = None
        self._n = 0
        self.writer = SimpleNamespace(try_write=lambda frame: None)  # type: ignore[assignment]

    def reserve_fast(self, sink: Any, timeout: float, max_time: float, now: float | None = None) -> str:
        self._n += 1
        return f"mv-{self._n}"

    async def send_fast(self, frame: bytes) -> None:
        return None


def _backend() -> Any:
    decl = CompoundDecl("kit", None, (SubtoolDecl("s", "echo"),))
    compound = resolve_compound(decl, find_tool=lambda s, t: _ECHO if (s, t) == ("s", "echo") else None,
                                listed=lambda s: True, state_of=lambda s: ("ready", None))
    lists = {"s": UpstreamLists(tools=(_ECHO,))}
    tools = [Candidate("s", "echo", _ECHO), Candidate("", "kit", compound.wire(), compound=compound)]
    snapshot = SnapshotBuilder().build(["s"], lists, tools)
    spec = SimpleNamespace(scope="shared", timeout=10.0, max_call_time=100.0)
    up = SimpleNamespace(spec=spec, state=State.READY, link=_Link(), note_call=lambda: None)
    return SimpleNamespace(router=SimpleNamespace(snapshot=snapshot), upstreams={"s": up},
                           upstream_for=lambda server, session: up)


def _frame(name: str, arguments: dict[str, Any]) -> tuple[wire.Envelope, bytes]:
    line = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                       "params": {"name": name, "arguments": arguments}}).encode()
    return wire.decode_envelope(line), line


async def _time(calls: int, runs: int) -> dict[str, float]:
    async with trio.open_nursery() as nursery:
        writer: Any = SimpleNamespace()  # routing never writes: the calls are planned, not sent
        fast = FastPath(_backend(), writer, nursery, {"name": "mcpvisor"}, ClientSession("bench"))
        fast.ready = True
        kinds = {"plain": _frame("s_echo", {"text": "hi"}),
                 "compound": _frame("kit", {"server": "s", "tool": "echo", "args": {"text": "hi"}})}
        out: dict[str, float] = {}
        for kind, (_, line) in kinds.items():
            samples = []
            for _ in range(runs):
                envs = [wire.decode_envelope(line) for _ in range(calls)]  # client_request rewrites params
                gc.collect()
                start = time.perf_counter()
                for env in envs:
                    assert await fast.client_request(env, line)
                    fast.calls.clear()
                samples.append((time.perf_counter() - start) / calls * 1e6)
            out[kind] = min(samples)
        nursery.cancel_scope.cancel()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=CALLS)
    parser.add_argument("--runs", type=int, default=RUNS)
    args = parser.parse_args()
    result = trio.run(_time, args.calls, args.runs)
    print(json.dumps({k: round(v, 2) for k, v in result.items()} | {"unit": "us per call"}))


if __name__ == "__main__":
    main()
