"""The bench machinery itself, in a tiny mode: it runs, prints a table and parseable JSON lines
with the expected keys, and ``--compare`` flags an injected regression.

No timing is asserted here (the numbers depend on the machine and its load); only the
shape of the output and the bookkeeping. The run is a subprocess (``python -m mcpvisor.bench``), so
this test also proves the bench leaves no process behind (the conftest fixture checks).
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import psutil
import pytest
import trio

from mcpvisor.bench.core import Result
from mcpvisor.bench.drivers import DIRECT, open_session, resolve_tool
from mcpvisor.bench.http_clients import CLIENTS, ClientPool
from mcpvisor.bench.procs import free_port
from mcpvisor.bench.report import compare
from mcpvisor.bench.scenarios_calls import UPSTREAM, client_pool
from mcpvisor.bench.stalls import StallWatch

REPO = Path(__file__).resolve().parents[2]
RUN_LIMIT_S = 150.0
"""About 10 s on an idle 2-core machine; generous because the machine may be shared."""


async def run_bench(*args: str) -> tuple[int, str, str]:
    env = dict(os.environ)
    with trio.fail_after(RUN_LIMIT_S):
        proc = await trio.run_process([sys.executable, "-m", "mcpvisor.bench", *args], cwd=REPO, env=env,
                                      capture_stdout=True, capture_stderr=True, check=False)
    return proc.returncode, proc.stdout.decode(), proc.stderr.decode()


def json_objects(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


@pytest.mark.timeout(2 * RUN_LIMIT_S + 30)  # each bench call is bounded by RUN_LIMIT_S on a loaded box
async def test_tiny_latency_run_prints_a_table_json_and_compares(tmp_path: Path) -> None:
    """`--only latency --calls 20 --no-peers`: a table, one JSON object for the scenario with a row
    per subject (direct, mcpvisor) carrying p50/p99 and ratios, a results file, and `--compare`
    against a doctored copy of that file reports a regression with exit 1.
    A bench that stopped printing rows, renamed keys or lost the comparison would fail here."""
    out = tmp_path / "run.json"
    code, stdout, stderr = await run_bench("--only", "latency", "--calls", "20", "--rounds", "1",
                                           "--no-peers", "--no-nofast", "--no-metrics", "--out", str(out))
    assert code == 0, stderr[-2000:]
    assert "latency" in stdout  # the rich table: its title
    assert "p50 ms" in stdout  # and a column header
    objs = json_objects(stdout)
    assert [o["scenario"] for o in objs] == ["latency"]
    scenario = objs[0]
    assert {"title", "columns", "rows", "skipped", "targets", "params"} <= scenario.keys()
    assert scenario["error"] is None, scenario["error"]
    subjects = {row["subject"]: row for row in scenario["rows"]}
    assert {"direct", "mcpvisor", "trio-relay"} <= subjects.keys(), scenario
    # The trio relay is the floor row: no peer (no target counts it), set beside mcpvisor's CPU.
    assert subjects["trio-relay"]["kind"] == "floor"
    assert any(n.startswith("CPU per call, ms: mcpvisor ") and "trio-relay" in n for n in scenario["notes"])
    for row in subjects.values():
        assert {"p50_ms", "p99_ms", "ratio_p50", "ratio_p99"} <= row.keys()
        assert row["p50_ms"] > 0
    assert subjects["direct"]["ratio_p50"] == 1.0
    # With one round, what the proxy adds is the difference of the two p50s (up to rounding).
    added = subjects["mcpvisor"]["added_p50_ms"]
    assert added == pytest.approx(subjects["mcpvisor"]["p50_ms"] - subjects["direct"]["p50_ms"], abs=2e-3)
    # The stdio call targets it judges are the speed issue's: p50 ratio, added ms, proxy CPU.
    targets = {(t["metric"], t["target"]) for t in scenario["targets"] if t["subject"] == "mcpvisor"}
    assert targets == {("ratio_p50", "<= 1.5"), ("added_p50_ms", "<= 0.15"), ("cpu_ms_per_call", "<= 0.12")}

    doc = json.loads(out.read_text())
    assert {"cpu", "cores", "python", "mcp", "trio"} <= doc["machine"].keys()
    # Pretend the old run was 3x better: the new run must be flagged as a regression.
    for row in doc["scenarios"][0]["rows"]:
        if row["subject"] == "mcpvisor":
            row["ratio_p50"] = row["ratio_p50"] / 3
    old = tmp_path / "old.json"
    old.write_text(json.dumps(doc))
    # --load re-reads a saved run instead of measuring again: the comparison machinery, fast.
    code, stdout, stderr = await run_bench("--load", str(out), "--compare", str(old), "--json")
    assert code == 1, stderr[-2000:]
    changes = next(o for o in json_objects(stdout) if "compare" in o)["changes"]
    flagged = [c for c in changes if c["regression"]]
    assert any(c["subject"] == "mcpvisor" and c["metric"] == "ratio_p50" for c in flagged), changes


@pytest.mark.timeout(RUN_LIMIT_S + 30)
async def test_tiny_recovery_run_finds_the_lean_upstream_and_times_its_restart() -> None:
    """`--only recovery --rounds 1 --no-peers`: the upstream (started with ``python -S``) is
    found under the proxy, killed, and the next call succeeds on its restart: one mcpvisor
    row, recovered 1/1, a time no longer than the scenario's bound, of which the new upstream
    ran part (its own start) and the rest is the kill, the proxy's restart and the call."""
    code, stdout, stderr = await run_bench("--only", "recovery", "--rounds", "1", "--no-peers", "--quick",
                                           "--json")
    assert code == 0, stderr[-2000:]
    scenario = next(o for o in json_objects(stdout) if o.get("scenario") == "recovery")
    assert scenario["skipped"] == [], scenario
    row = next(r for r in scenario["rows"] if r["subject"] == "mcpvisor")
    assert row["recovered"] == "1/1", row
    assert 0 < row["recovery_s"] < scenario["params"]["timeout_s"]
    # The span splits into the new upstream's own run time and the rest (the proxy's part).
    assert 0 < row["upstream_ms"] < row["recovery_s"] * 1000
    assert row["rest_ms"] == pytest.approx(row["recovery_s"] * 1000 - row["upstream_ms"], abs=1.0)


async def test_the_lean_upstream_answers_as_the_msgspec_one() -> None:
    """``python -S bench/upstream.py`` (the standard library's json, no argparse) answers every
    request of a session byte for byte as the msgspec build does (parsed alike: key order and
    spacing may differ), a parse error and an unknown tool included."""
    requests = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18"}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        {"jsonrpc": "2.0", "id": "s", "method": "tools/call",
         "params": {"name": "echo", "arguments": {"text": "h\u00e9 \u2603 \"q\""}}},
        {"jsonrpc": "2.0", "id": 4, "method": "tools/call",
         "params": {"name": "payload", "arguments": {"size": 7}}},
        {"jsonrpc": "2.0", "id": 5, "method": "tools/call",
         "params": {"name": "tool_1", "arguments": {"k": [1]}}},
        {"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": {"name": "nope", "arguments": {}}},
        {"jsonrpc": "2.0", "id": 7, "method": "server/discover"},
    ]
    data = b"".join(json.dumps(r).encode() + b"\n" for r in requests) + b"{not json\n"
    script = str(REPO / "bench" / "upstream.py")
    answers = []
    for flags in ([], ["-S"]):
        with trio.fail_after(30):
            proc = await trio.run_process([sys.executable, *flags, script, "--name", "x", "--tools", "2"],
                                          stdin=data, capture_stdout=True, capture_stderr=True, check=False)
        assert proc.returncode == 0, proc.stderr.decode()[-2000:]
        answers.append([json.loads(line) for line in proc.stdout.splitlines()])
    full, lean = answers
    assert lean == full
    assert [a.get("id") for a in lean] == [1, 2, "s", 4, 5, 6, 7, None]
    assert lean[2]["result"]["content"][0]["text"] == "h\u00e9 \u2603 \"q\""


async def test_the_trio_relay_passes_a_session_through_and_ends_with_either_side() -> None:
    """``bench/relay.py`` (the floor row) hands the client exactly the upstream's bytes, and
    exits when the client closes its stdin (stopping the upstream) or when the upstream exits
    on its own (a crash), leaving no process behind either way."""
    requests = b"".join(json.dumps(r).encode() + b"\n" for r in (
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18"}},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
         "params": {"name": "payload", "arguments": {"size": 200_000}}},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
         "params": {"name": "echo", "arguments": {"text": "x"}}},
    ))
    upstream = [sys.executable, str(REPO / "bench" / "upstream.py"), "--name", "x"]
    relay = [sys.executable, str(REPO / "bench" / "relay.py")]
    outputs = []
    for argv in (upstream, [*relay, *upstream]):
        with trio.fail_after(30):
            proc = await trio.run_process(argv, stdin=requests, capture_stdout=True, capture_stderr=True,
                                          check=False)
        assert proc.returncode == 0, proc.stderr.decode()[-2000:]
        outputs.append(proc.stdout)
    direct, relayed = outputs
    assert relayed == direct
    assert [json.loads(line)["id"] for line in relayed.splitlines()] == [1, 2, 3]
    # An upstream that exits by itself (at once, status 3) ends the relay while its client
    # still holds stdin open.
    crashing = await trio.lowlevel.open_process([*relay, sys.executable, "-c", "raise SystemExit(3)"],
                                                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    try:
        with trio.fail_after(30):
            assert await crashing.wait() == 3
    finally:
        crashing.kill()
        with trio.CancelScope(shield=True):
            await crashing.wait()


def carrying(token: str) -> list[str]:
    """Command lines of the live processes whose environment carries this bench run's token."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("MCPVISOR_BENCH_TOKEN") == token and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(" ".join(proc.cmdline()))
        except psutil.Error:
            pass
    return found


@pytest.mark.timeout(RUN_LIMIT_S + 60)
async def test_sigterm_stops_the_run_and_every_server_it_started() -> None:
    """SIGTERM in the middle of the HTTP scenario (where the bench runs `mcpvisor serve --transport
    http` and an HTTP upstream as servers in their own sessions): the bench exits 143 and no
    process it started is left. Before, SIGTERM killed only the bench and left them running."""
    token = uuid.uuid4().hex
    env = dict(os.environ, MCPVISOR_BENCH_TOKEN=token)
    argv = [sys.executable, "-m", "mcpvisor.bench", "--only", "http_latency", "--calls", "1000000",
            "--rounds", "1", "--no-peers", "--no-nofast"]
    proc = await trio.lowlevel.open_process(argv, cwd=REPO, env=env, stdin=subprocess.DEVNULL,
                                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    err = b""
    try:
        with trio.fail_after(RUN_LIMIT_S):  # the proxy's session is up: its servers are running
            while b"mcpvisor over http: connected" not in err:
                chunk = await proc.stderr.receive_some()
                assert chunk, f"the bench ended early: {err.decode()[-2000:]}"
                err += chunk
        assert any("serve" in cmd and "http" in cmd for cmd in carrying(token)), carrying(token)
        proc.send_signal(signal.SIGTERM)
        with trio.fail_after(60):
            while chunk := await proc.stderr.receive_some():
                err += chunk
            await proc.wait()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM, err.decode()[-2000:]
    assert b"stopped by SIGTERM" in err
    assert carrying(token) == []


@pytest.mark.timeout(RUN_LIMIT_S + 30)
async def test_http_calls_in_flight_come_from_two_client_processes_and_stop_with_them(tmp_path: Path) -> None:
    """Over HTTP, calls in flight are spread over the session's client processes (one SDK
    client process is the bottleneck at ~1,000 calls/s): every call made comes back as a
    (start, end) span, from two live processes of their own, and closing the pool leaves
    neither running. A pool whose processes cannot connect says so instead of hanging."""
    with trio.fail_after(RUN_LIMIT_S):
        async with open_session(DIRECT, [UPSTREAM], tmp_path, transport="http") as session:
            pool = await client_pool(session)
            try:
                assert await client_pool(session) is pool  # started once, kept for the session
                helpers = [psutil.Process(p.pid) for p in pool._procs]
                assert len({h.pid for h in helpers}) == CLIENTS == 2
                assert all("mcpvisor.bench.http_clients" in " ".join(h.cmdline()) for h in helpers)
                spans = await pool.calls(session.tool("echo"), 31, 4, math.inf, distinct="t")
                assert len(spans) == 31
                assert all(start < end for start, end in spans)
            finally:
                await pool.aclose()
        assert all(not h.is_running() or h.status() == psutil.STATUS_ZOMBIE for h in helpers)

        nobody = ClientPool(f"http://127.0.0.1:{free_port()}/mcp", False, tmp_path / "nobody.log")
        try:
            with pytest.raises(RuntimeError, match="ended"):
                await nobody.start()
        finally:
            await nobody.aclose()
        assert (tmp_path / "nobody.log").stat().st_size > 0  # where it says why


def test_compare_direction_and_threshold() -> None:
    """Lower-is-better and higher-is-better metrics are flagged in the right direction; absolute
    times (machine-dependent) are shown but never flagged."""
    old = {"scenarios": [{"scenario": "throughput", "rows": [
        {"subject": "mcpvisor", "ratio_cN": 1.0, "ratio_c1": 0.5, "c1_calls_s": 1000.0}]}]}
    new = Result("throughput", "t", ["ratio_cN"])
    new.rows.append({"subject": "mcpvisor", "ratio_cN": 0.8, "ratio_c1": 0.6, "c1_calls_s": 100.0})
    rows = {r["metric"]: r for r in compare(old, [new], threshold=0.1)}
    assert rows["ratio_cN"]["regression"] is True  # throughput ratio fell by 20 %
    assert rows["ratio_c1"]["regression"] is False  # it rose: better
    assert rows["c1_calls_s"]["regression"] is False  # absolute: not flagged


@pytest.mark.parametrize(
    ("names", "base", "server", "expected"),
    [
        (["echo", "payload"], "echo", None, "echo"),
        (["b_echo", "b_payload"], "echo", None, "b_echo"),
        (["s00_tool_1", "s01_tool_1"], "tool_1", "s01", "s01_tool_1"),
        (["b.echo"], "echo", None, "b.echo"),
        (["slow_echo"], "echo", None, "slow_echo"),
        (["payload"], "echo", None, None),
    ],
)
def test_resolve_tool_finds_prefixed_names(names: list[str], base: str, server: str | None,
                                           expected: str | None) -> None:
    """Peers prefix tool names differently; the bench finds the upstream's tool under any of them."""
    assert resolve_tool(names, base, server) == expected


def test_stall_overlap_and_clean() -> None:
    """Paused time inside a span is subtracted exactly, and only the calls that overlapped a pause
    are left out of the percentiles."""
    watch = StallWatch()
    watch.spans = [(1.0, 1.5), (3.0, 3.2)]
    assert watch.overlap(0.0, 10.0) == pytest.approx(0.7)
    assert watch.overlap(1.2, 3.1) == pytest.approx(0.4)
    assert watch.overlap(1.5, 3.0) == 0.0
    kept, dropped = watch.clean([(0.1, 0.2), (0.9, 1.6), (2.0, 2.5), (3.1, 3.15)])
    assert kept == pytest.approx([0.1, 0.5])
    assert dropped == 2


async def test_canary_reports_a_pause_covering_the_time_it_was_stopped() -> None:
    """SIGSTOP the canary for 0.3 s (as a paused machine would stop it): the watch then holds a
    span covering that time, and a throughput window around it has it subtracted."""
    watch = StallWatch()
    async with trio.open_nursery() as nursery:
        await nursery.start(watch.run)
        if watch.unavailable is not None:
            pytest.skip(f"the canary cannot run at real-time priority here: {watch.unavailable}")
        canary = next(p for p in psutil.Process().children() if "canary.py" in " ".join(p.cmdline()))
        t0 = time.perf_counter()
        canary.suspend()
        await trio.sleep(0.3)  # the pause being simulated, not a wait for something to happen
        canary.resume()
        t1 = time.perf_counter()

        def covering() -> bool:  # real pauses of the machine may add other spans around it
            return any(start <= t0 + 0.06 and end >= t1 - 0.01 for start, end in watch.spans)

        with trio.fail_after(10):
            while not covering():
                await watch.settle()
        nursery.cancel_scope.cancel()
    assert watch.overlap(t0, t1) >= 0.25


def test_the_npm_peers_are_pinned_exactly_and_their_lock_agrees() -> None:
    """bench/peers/npm: every npm peer a PeerSpec names is in package.json at an exact version,
    and package-lock.json locks that same version (``npm ci`` refuses a lock out of step with
    its package.json, and a range would let two runs measure different peers)."""
    from mcpvisor.bench.peers import NPM_PINS, PEERS

    manifest = json.loads((NPM_PINS / "package.json").read_text())
    lock = json.loads((NPM_PINS / "package-lock.json").read_text())
    deps: dict[str, str] = manifest["dependencies"]
    for spec in PEERS:
        if spec.registry == "npm":
            assert spec.package in deps, f"{spec.name}: {spec.package} is not pinned"
    for name, version in deps.items():
        assert re.fullmatch(r"\d+\.\d+\.\d+", version), f"{name}: {version!r} is not an exact version"
        assert lock["packages"][f"node_modules/{name}"]["version"] == version
        assert lock["packages"][""]["dependencies"][name] == version
