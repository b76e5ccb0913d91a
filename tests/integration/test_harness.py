"""Harness runs: the call journal, session-scoped servers with a warm pool, many supervisors.

Real supervisors in this process with real stdio fixture servers (the stdlib-only
``flaky.py``, which starts in tens of milliseconds and keeps a per-process ``counter``),
and a real ``mcpvisor serve`` subprocess for the front path and the SIGKILL test. Every
wait is for a state, a reply or a row, bounded by ``trio.fail_after``; the conftest fails
a test that leaves a process behind.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import mcp_types as types
import psutil
import pytest
import trio

from mcpvisor.actors.errors import CallTimeout, UpstreamDied
from mcpvisor.actors.upstream import State
from mcpvisor.journal import summarise
from mcpvisor.journal._writer import outcome_of
from mcpvisor.proxy import Supervisor
from mcpvisor.tree import open_supervisor
from tests.helpers import (
    PY,
    REAL_IO_BOUND_S,
    embedded_connection,
    flaky,
    http_client,
    pipe_transport,
    proxy_client,
    read_record,
    text_of,
    write_config,
)

pytestmark = pytest.mark.timeout(REAL_IO_BOUND_S * 2.5)  # real processes on a loaded 2-core machine


def harness_config(**servers: Any) -> dict[str, Any]:
    return {"mcpServers": servers, "settings": {"exposure": "all", "startupWait": "60s",
                                                "startupTimeout": "120s"}}


def rows(path: Path, where: str = "") -> list[dict[str, Any]]:
    conn = sqlite3.connect(path)
    conn.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in conn.execute(f"SELECT * FROM calls {where} ORDER BY id")]
    finally:
        conn.close()


async def cli(*args: str) -> str:
    """Run ``mcpvisor ARGS`` and return its stdout (it must succeed)."""
    done = await trio.run_process([PY, "-m", "mcpvisor", *args], capture_stdout=True, capture_stderr=True)
    return done.stdout.decode()


def text(result: dict[str, Any]) -> str:
    return str(result["content"][0]["text"])


async def wait_state(up: Any, state: State) -> None:
    while up.state is not state:
        await up.wait_changed()


# --- the journal ------------------------------------------------------------------------------


async def test_the_journal_records_every_call_with_its_run_outcome_sizes_and_digests(tmp_path: Path) -> None:
    """Each call is one row: session, run, server, tool, argument/result sizes and digests,
    outcome (ok, timeout, server down), latency, the server's restarts; payloads are not
    kept unless asked. A regression shows as a missing row, a wrong outcome or a payload
    written without ``journalPayloads``."""
    journal = tmp_path / "runs.db"
    cfg = harness_config(box=flaky(timeout="300ms", restartDelay="10ms"))
    with trio.fail_after(REAL_IO_BOUND_S):
        async with open_supervisor(cfg, state_dir=tmp_path / "state", journal=journal, watch=False) as sup:
            assert await sup.wait_ready() == []
            async with sup.session("episode-1") as ep:
                assert text(await ep.call_tool("box_echo", {"text": "hi"})) == "echo: hi"
                await ep.call_tool("box_echo", {"text": "hi"})
                with pytest.raises(CallTimeout):
                    await ep.call_tool("box_sleep", {"seconds": 5})
            async with sup.session("episode-2", run="batch-a") as ep2:
                with pytest.raises(UpstreamDied):
                    await ep2.call_tool("box_crash", {})
                await wait_state(sup.upstreams["box"], State.READY)
                await ep2.call_tool("box_add", {"a": 1, "b": 2})
    found = rows(journal)
    assert [(r["run"], r["session"], r["tool"], r["outcome"]) for r in found] == [
        ("episode-1", "episode-1", "echo", "ok"),
        ("episode-1", "episode-1", "echo", "ok"),
        ("episode-1", "episode-1", "sleep", "timeout"),
        ("batch-a", "episode-2", "crash", "server_down"),
        ("batch-a", "episode-2", "add", "ok"),
    ]
    first, second = found[0], found[1]
    assert first["arg_digest"] == second["arg_digest"]
    assert first["arg_bytes"] == len(b'{"text":"hi"}')
    assert first["result_bytes"] > 0
    assert first["result_digest"] == second["result_digest"]
    assert first["arguments"] is None
    assert first["result"] is None
    assert found[4]["restarts"] == 1
    assert found[0]["restarts"] == 0
    assert all(r["latency_ms"] >= 0 and r["server"] == "box" for r in found)
    assert found[2]["error"] == "server box timed out: no answer or progress within 0.3s"


async def test_payloads_are_recorded_only_with_journal_payloads(tmp_path: Path) -> None:
    """``settings.journalPayloads: true`` keeps the arguments and the result as JSON text."""
    journal = tmp_path / "runs.db"
    cfg = harness_config(box=flaky())
    cfg["settings"].update(journal=str(journal), journalPayloads=True)
    with trio.fail_after(REAL_IO_BOUND_S):
        async with open_supervisor(cfg, state_dir=tmp_path / "state", watch=False) as sup:
            await sup.call_tool("box_echo", {"text": "kept"})
    [row] = rows(journal)
    assert json.loads(row["arguments"]) == {"text": "kept"}
    assert json.loads(row["result"])["content"][0]["text"] == "echo: kept"
    assert row["session"] is None
    assert row["run"] is None


def test_outcomes_tell_tool_errors_from_protocol_errors() -> None:
    """A result with ``isError`` is a tool error, however the upstream spaced its JSON."""
    assert outcome_of(None, b'{"content":[],"isError":true}') == "tool_error"
    assert outcome_of(None, b'{"content":[],"isError":false}') == "ok"
    assert outcome_of(trio.Cancelled.__new__(trio.Cancelled), None) == "cancelled"


async def test_the_summary_counts_per_tool_and_per_run_and_narrows_to_one_run(tmp_path: Path) -> None:
    """``mcpvisor journal PATH`` (table and ``--format json``) and ``--run LABEL``: calls,
    errors and p50/p99 per tool, calls and failures per run."""
    journal = tmp_path / "runs.db"
    with trio.fail_after(REAL_IO_BOUND_S):
        async with open_supervisor(harness_config(box=flaky()), state_dir=tmp_path / "state", journal=journal,
                                   watch=False) as sup:
            for episode in range(3):
                async with sup.session(f"ep-{episode}") as ep:
                    for _ in range(episode + 1):
                        await ep.call_tool("box_echo", {"text": "x"})
                    if episode == 2:
                        with pytest.raises(UpstreamDied):
                            await ep.call_tool("box_crash", {})
    summary = summarise(journal)
    assert summary["calls"] == 7
    assert summary["outcomes"] == {"ok": 6, "server_down": 1}
    echo = next(t for t in summary["tools"] if t["tool"] == "echo")
    assert echo["calls"] == 6
    assert echo["errors"] == 0
    assert 0 <= echo["p50_ms"] <= echo["p99_ms"]
    assert {r["run"]: (r["calls"], r["failures"]) for r in summary["runs"]} == {
        "ep-0": (1, 0), "ep-1": (2, 0), "ep-2": (4, 1)}
    narrowed = json.loads(await cli("journal", str(journal), "--format", "json", "--run", "ep-2"))
    assert narrowed["calls"] == 4
    assert [r["run"] for r in narrowed["runs"]] == ["ep-2"]
    table = await cli("journal", str(journal))
    assert "echo" in table
    assert "ep-2" in table
    assert "server_down 1" in table
    none = await cli("journal", str(journal), "--run", "no-such-run")
    assert "0 calls, 0 sessions, 0 retries\n" in none  # no dangling "; " without outcomes
    missing = await trio.run_process([PY, "-m", "mcpvisor", "journal", str(tmp_path / "nope.db")],
                                     capture_stdout=True, capture_stderr=True, check=False)
    assert missing.returncode == 1
    assert b"no journal" in missing.stderr


async def test_calls_through_the_stdio_front_are_journalled_with_the_meta_run_label(tmp_path: Path) -> None:
    """``serve --journal``: calls on the fast path and on the SDK path (a session-scoped
    server's first call, while its instance starts) are both recorded, labelled by
    ``_meta["mcpvisor/run"]``, under the one session of the connection."""
    journal = tmp_path / "runs.db"
    config = write_config(tmp_path, {"shared": flaky(), "box": flaky(scope="session")},
                          stateDir=str(tmp_path / "state"))
    with trio.fail_after(REAL_IO_BOUND_S):
        async with proxy_client(config, "--journal", str(journal)) as client:
            meta: Any = {"mcpvisor/run": "ep-9"}
            r1 = await client.call_tool("shared_counter", {}, meta=meta)
            r2 = await client.call_tool("box_counter", {}, meta=meta)
            r3 = await client.call_tool("box_counter", {})
            assert [c.text for r in (r1, r2, r3) for c in r.content if isinstance(c, types.TextContent)] == \
                ["1", "1", "2"]
    found = rows(journal)
    assert [(r["server"], r["run"], r["outcome"]) for r in found] == [
        ("shared", "ep-9", "ok"), ("box", "ep-9", "ok"), ("box", None, "ok")]
    assert all(r["session"] for r in found)
    # One stdio connection is one client session, whichever path (fast or SDK) a call took.
    assert len({r["session"] for r in found}) == 1, found
    assert all(r["arg_bytes"] == 2 for r in found)


def echo_call(request_id: int) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": {
        "name": "shared_echo", "arguments": {"text": "x"}, "_meta": {"mcpvisor/run": "ep-1"}}}


async def test_a_proxy_killed_mid_run_leaves_a_consistent_journal(tmp_path: Path) -> None:
    """SIGKILL a real ``mcpvisor serve --journal`` while calls stream through it: the file
    opens, passes SQLite's integrity check and summarises; it holds the batches committed
    before the kill (the rows seen while it ran) and no more calls than were answered."""
    journal = tmp_path / "runs.db"
    config = write_config(tmp_path, {"shared": flaky()}, stateDir=str(tmp_path / "state"))
    proc = await trio.lowlevel.open_process(
        [PY, "-m", "mcpvisor", "serve", "--config", str(config), "--journal", str(journal)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdin is not None
    assert proc.stdout is not None
    buffer = b""

    async def send(message: dict[str, Any]) -> None:
        assert proc.stdin is not None
        await proc.stdin.send_all(json.dumps(message).encode() + b"\n")

    async def answer(request_id: int) -> dict[str, Any]:
        nonlocal buffer
        assert proc.stdout is not None
        while True:
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                msg = json.loads(line)
                if msg.get("id") == request_id:
                    return dict(msg)
            chunk = await proc.stdout.receive_some(1 << 16)
            assert chunk, "the proxy closed its stdout"
            buffer += chunk

    answered = 0
    seen_while_running = 0
    try:
        with trio.fail_after(REAL_IO_BOUND_S):
            hello = {"protocolVersion": "2025-11-25", "capabilities": {},
                     "clientInfo": {"name": "t", "version": "1"}}
            await send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": hello})
            await answer(0)
            await send({"jsonrpc": "2.0", "method": "notifications/initialized"})
            request_id = 1
            while True:
                # Pipelined calls, so some are in flight (and some unwritten) at the kill.
                for _ in range(20):
                    await send(echo_call(request_id))
                    request_id += 1
                reply = await answer(request_id - 1)
                assert "result" in reply, reply
                answered = request_id - 1
                if journal.exists():
                    seen_while_running = len(rows(journal))
                if seen_while_running >= 200:
                    break
            for _ in range(20):  # and kill it with these on their way through
                await send(echo_call(request_id))
                request_id += 1
    finally:
        proc.send_signal(signal.SIGKILL)
        with trio.move_on_after(REAL_IO_BOUND_S, shield=True):
            await proc.wait()
    assert proc.returncode == -signal.SIGKILL
    conn = sqlite3.connect(journal)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    finally:
        conn.close()
    summary = summarise(journal)
    assert seen_while_running <= summary["calls"] <= answered + 20 + 20
    assert summary["outcomes"] == {"ok": summary["calls"]}
    assert summary["runs"][0]["run"] == "ep-1"


# --- session-scoped servers -------------------------------------------------------------------


async def test_two_concurrent_sessions_have_their_own_process_and_state(tmp_path: Path) -> None:
    """A ``"scope": "session"`` server runs one process per session: two sessions count
    separately and see different pids; a shared server keeps one process for both."""
    cfg = harness_config(box=flaky(scope="session"), shared=flaky())
    with trio.fail_after(REAL_IO_BOUND_S):
        async with open_supervisor(cfg, state_dir=tmp_path / "state", watch=False) as sup:
            assert await sup.wait_ready() == []
            async with sup.session("a") as a, sup.session("b") as b:
                counts: dict[str, list[str]] = {"a": [], "b": []}

                async def calls(view: Any, key: str) -> None:
                    for _ in range(3):
                        counts[key].append(text(await view.call_tool("box_counter", {})))

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(calls, a, "a")
                    nursery.start_soon(calls, b, "b")
                assert counts == {"a": ["1", "2", "3"], "b": ["1", "2", "3"]}
                mine, theirs = a.upstream("box"), b.upstream("box")
                assert mine is not None
                assert theirs is not None
                pids = {mine.status().pid, theirs.status().pid, sup.upstreams["box"].status().pid}
                assert len(pids) == 3
                assert None not in pids
                assert a.upstream("shared") is b.upstream("shared") is sup.upstreams["shared"]
                await a.call_tool("shared_counter", {})
                assert text(await b.call_tool("shared_counter", {})) == "2"


async def test_a_sessions_end_stops_its_instances(tmp_path: Path) -> None:
    """Leaving ``sup.session()`` stops that session's instances (their processes are gone)
    and leaves other sessions' running; also when the block ends by an exception."""
    cfg = harness_config(box=flaky(scope="session"))
    with trio.fail_after(REAL_IO_BOUND_S):
        async with open_supervisor(cfg, state_dir=tmp_path / "state", watch=False) as sup:
            async with sup.session("keeper") as keeper:
                await keeper.call_tool("box_counter", {})
                kept = keeper.upstream("box")
                assert kept is not None
                found: dict[str, Any] = {}
                with pytest.raises(RuntimeError, match="episode failed"):
                    await failing_episode(sup, found)
                up, pid = found["up"], found["pid"]
                assert up.state is State.STOPPED
                assert pid is not None
                assert not psutil.pid_exists(pid)
                assert kept.state is State.READY
                assert text(await keeper.call_tool("box_counter", {})) == "2"
                assert sup.scoped.statistics().sessions == 1


async def failing_episode(sup: Supervisor, found: dict[str, Any]) -> None:
    async with sup.session("doomed") as doomed:
        await doomed.call_tool("box_counter", {})
        found["up"] = up = doomed.upstream("box")
        assert up is not None
        found["pid"] = up.status().pid
        raise RuntimeError("episode failed")


async def test_the_warm_pool_is_refilled_and_a_used_instance_is_never_reused(tmp_path: Path) -> None:
    """``"pool": 2`` keeps two started instances: a session takes a ready one (its first
    call finds it already running), a new one starts in its place, and after the session
    ends its instance is stopped, not handed to the next session."""
    cfg = harness_config(box=flaky(scope="session", pool=2))
    with trio.fail_after(REAL_IO_BOUND_S):
        async with open_supervisor(cfg, state_dir=tmp_path / "state", watch=False) as sup:
            pool = sup.scoped._pools["box"]
            assert len(pool) == 2
            for up in list(pool):
                await wait_state(up, State.READY)
            warm = {up.status().pid for up in pool}
            async with sup.session("first") as first:
                taken = first.upstream("box")
                assert taken is not None
                assert taken.status().pid in warm
                assert taken.starts == 1
                assert text(await first.call_tool("box_counter", {})) == "1"
                assert len(pool) == 2
                assert taken not in pool
            assert taken.state is State.STOPPED
            async with sup.session("second") as second:
                assert text(await second.call_tool("box_counter", {})) == "1"  # fresh state
                assert second.upstream("box") is not taken
            assert sup.scoped.statistics().started == 4  # 2 warm + 2 refills


async def test_a_session_equips_its_own_toolset(tmp_path: Path) -> None:
    """``session.equip`` narrows that session's tools only; the proxy's view is unchanged."""
    cfg = harness_config(box=flaky(scope="session"))
    cfg["toolsets"] = {"small": ["box.echo"]}
    cfg["settings"]["namespacing"] = "prefix"
    with trio.fail_after(REAL_IO_BOUND_S):
        async with open_supervisor(cfg, state_dir=tmp_path / "state", watch=False) as sup:
            await sup.wait_ready()
            async with sup.session("a") as a, sup.session("b") as b:
                names = await a.equip("small")
                assert len(names) == 1
                assert [t["name"] for t in a.tools()] == names
                assert text(await a.call_tool(names[0], {"text": "z"})) == "echo: z"
                assert len(b.tools()) == len(sup.tools()) > 1


# --- many supervisors -------------------------------------------------------------------------


async def test_a_hundred_supervisors_run_at_once_and_leave_nothing_behind(tmp_path: Path) -> None:
    """100 ``open_supervisor`` blocks in one trio program, each with its own config, state
    dir and journal: each works on its own, and after they end (normally, by an exception,
    or cancelled) no task, file descriptor or process is left and every journal is whole."""
    me = psutil.Process()
    fds_before = me.num_fds()
    tasks_before = trio.lowlevel.current_statistics().tasks_living
    done: list[int] = []

    async def one(i: int) -> None:
        base = tmp_path / f"sup{i}"
        cfg = harness_config(box=flaky(lazy=i % 10 != 0, scope="session" if i % 20 == 0 else "shared"))
        async with open_supervisor(cfg, state_dir=base / "state", journal=base / "journal.db",
                                   watch=False) as sup:
            assert isinstance(sup, Supervisor)
            assert sup.settings.journal is None
            if i % 10 == 0:  # a tenth run a real process and call it
                async with sup.session(f"run-{i}") as s:
                    assert text(await s.call_tool("box_echo", {"text": str(i)})) == f"echo: {i}"
            if i % 7 == 3:
                raise KeyError(i)
            if i % 7 == 5:
                trio.lowlevel.current_task().parent_nursery.cancel_scope.cancel()  # type: ignore[union-attr]
                await trio.sleep_forever()
        done.append(i)

    async def guarded(i: int) -> None:
        with trio.CancelScope():
            async with trio.open_nursery() as nursery:
                nursery.start_soon(one, i)

    with trio.fail_after(REAL_IO_BOUND_S):
        async with trio.open_nursery() as nursery:
            for i in range(100):
                nursery.start_soon(_swallow_key_error, guarded, i)
    assert len(done) == 100 - len([i for i in range(100) if i % 7 in (3, 5)])
    assert trio.lowlevel.current_statistics().tasks_living == tasks_before
    assert me.num_fds() <= fds_before
    assert me.children() == []
    for i in range(0, 100, 10):
        summary = summarise(tmp_path / f"sup{i}" / "journal.db")
        assert summary["calls"] == 1
        assert summary["runs"][0]["run"] == f"run-{i}"


async def _swallow_key_error(fn: Any, i: int) -> None:
    try:
        await fn(i)
    except* KeyError:
        pass


async def test_the_cli_lists_the_journal_command() -> None:
    """``mcpvisor --help`` names the journal command."""
    with trio.fail_after(REAL_IO_BOUND_S):
        assert "journal" in await cli("--help")


async def test_each_http_client_session_gets_its_own_instance_stopped_when_it_leaves(tmp_path: Path) -> None:
    """Through the HTTP front, each handshake-era client session has its own instance of a
    session-scoped server (separate state), closing the session stops its instance, and
    the ``Mcpvisor-Run`` header labels a client's calls in the journal."""
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    from mcpvisor import serve_http

    cfg = harness_config(box=flaky(scope="session"))
    journal = tmp_path / "runs.db"
    with trio.fail_after(REAL_IO_BOUND_S):
        async with open_supervisor(cfg, state_dir=tmp_path / "state", journal=journal, watch=False) as sup, \
                trio.open_nursery() as nursery:
            url = await nursery.start(serve_http, sup, "127.0.0.1", 0)
            labelled = http_client(headers={"Mcpvisor-Run": "ep-http"})
            async with Client(url, mode="legacy", cache=None) as one, labelled:
                async with Client(streamable_http_client(url, http_client=labelled), mode="legacy",
                                  cache=None) as two:
                    for client in (one, two, one):
                        await client.call_tool("box_counter", {})
                    assert sup.scoped.statistics().in_sessions == {"box": 2}
                    ones, twos = (held["box"] for held in sup.scoped._held.values())  # in first-call order
                    counted = [c.text for c in (await two.call_tool("box_counter", {})).content
                               if isinstance(c, types.TextContent)]
                    assert counted == ["2"]  # two's own process: one's calls did not count there
                    assert ones.status().pid != twos.status().pid
                await wait_state(twos, State.STOPPED)  # two's session ended with its connection
                assert ones.state is State.READY
            await wait_state(ones, State.STOPPED)
            assert sup.scoped.statistics().sessions == 0
            nursery.cancel_scope.cancel()
    runs = [r["run"] for r in rows(journal)]
    assert runs == [None, "ep-http", None, "ep-http"]  # the header labels two's calls


@pytest.mark.parametrize("pool", [0, 2], ids=["started-on-first-call", "warm-pool"])
async def test_each_stdio_connection_has_its_own_instance_on_the_fast_path_too(tmp_path: Path,
                                                                               pool: int) -> None:
    """Two clients connected at once through the stdio front each count 1, 2, 3 on a
    session-scoped server: each connection's calls reach one process of its own, whether
    its instance is started by its first call (which waits for it, still the fast way) or
    taken from a warm pool; every call goes the fast way. A client leaving stops its
    instance's process and leaves the other's running. A regression shows as counts
    shared between the clients or restarting at 1, as calls taking the SDK path, or as a
    process outliving its client."""
    from mcp import Client

    record = tmp_path / "calls.jsonl"
    cfg = harness_config(box=flaky("--record", str(record), scope="session", pool=pool))
    slow_calls = 0  # with no pool too: the first call waits for its instance on the fast path

    @asynccontextmanager
    async def connect(sup: Supervisor) -> AsyncIterator[tuple[Client, Any]]:
        async with embedded_connection(sup) as (send, receive, front), \
                Client(pipe_transport(receive, send), mode="legacy", cache=None) as client:
            yield client, front

    with trio.fail_after(REAL_IO_BOUND_S):
        async with open_supervisor(cfg, state_dir=tmp_path / "state", watch=False) as sup:
            assert await sup.wait_ready() == []
            for warm in list(sup.scoped._pools.get("box", ())):
                await wait_state(warm, State.READY)
            async with connect(sup) as (one, front_one):
                async with connect(sup) as (two, front_two):
                    counts: dict[str, list[str]] = {"one": [], "two": []}

                    async def calls(client: Client, key: str) -> None:
                        for _ in range(3):
                            counts[key].append(text_of(await client.call_tool("box_counter", {})))

                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(calls, one, "one")
                        nursery.start_soon(calls, two, "two")
                    assert counts == {"one": ["1", "2", "3"], "two": ["1", "2", "3"]}
                    assert front_one.statistics().sdk_tool_calls == slow_calls
                    assert front_two.statistics().sdk_tool_calls == slow_calls
                    ones = sup.scoped.instances(front_one.session)["box"]
                    twos = sup.scoped.instances(front_two.session)["box"]
                    one_pid, two_pid = ones.status().pid, twos.status().pid
                    assert one_pid is not None
                    assert two_pid is not None
                    assert len({one_pid, two_pid, sup.upstreams["box"].status().pid}) == 3
                    by_pid: dict[int, int] = {}
                    for event in read_record(record):
                        if event["event"] == "call":
                            by_pid[event["pid"]] = by_pid.get(event["pid"], 0) + 1
                    assert by_pid == {one_pid: 3, two_pid: 3}  # both paths reached the same process
                await wait_state(twos, State.STOPPED)  # two left: its instance stopped with it
                assert not psutil.pid_exists(two_pid)
                assert ones.state is State.READY
                assert text_of(await one.call_tool("box_counter", {})) == "4"
            await wait_state(ones, State.STOPPED)
            assert not psutil.pid_exists(one_pid)
            assert sup.scoped.statistics().sessions == 0


REPO_DIR = Path(__file__).resolve().parents[2]


async def test_the_bench_harness_run_reports_first_calls_and_leaves_no_process(tmp_path: Path) -> None:
    """`mcpvisor.bench.harness_run` (what ``python -m mcpvisor.bench --only harness`` runs): every episode
    gets a fresh instance (pool plus refills), and it reports 0 processes left."""
    with trio.fail_after(REAL_IO_BOUND_S):
        argv = ["--workdir", str(tmp_path), "--episodes", "6", "--pool", "2", "--concurrency", "2"]
        done = await trio.run_process([PY, "-m", "mcpvisor.bench.harness_run", *argv], capture_stdout=True,
                                      capture_stderr=True, cwd=str(REPO_DIR))
    report = json.loads(done.stdout)
    assert report["processes_left"] == 0
    assert report["instances_started"] == 6 + 2  # one per episode, and the pool kept full
    assert 0 < report["first_call_p50_ms"] <= report["first_call_p99_ms"]
    assert summarise(tmp_path / "journal.db")["calls"] == 6 * 7


async def test_the_example_harness_prints_the_journal_summary(tmp_path: Path) -> None:
    """``bench/harness_example.py`` (the README's example) runs its episodes and prints
    the summary: one session and four calls per episode, none failed."""
    with trio.fail_after(REAL_IO_BOUND_S):
        done = await trio.run_process([PY, str(REPO_DIR / "bench" / "harness_example.py"), "--episodes", "3",
                                       "--journal", str(tmp_path / "runs.db")], capture_stdout=True,
                                      capture_stderr=True, cwd=str(tmp_path))
    out = done.stdout.decode()
    assert "12 calls, 3 sessions, 0 retries; ok 12" in out
    assert "episode-2" in out
