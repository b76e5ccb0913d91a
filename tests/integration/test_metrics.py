"""Prometheus metrics of a real ``mcpvisor serve``: ``/metrics`` on the HTTP front and
``--metrics-port`` beside the stdio front, scraped after known calls, errors and a
restart of real subprocess servers; checked by Debian's ``promtool`` and scraped by a
real ``prometheus`` (both from ``tests/setup.sh``; with ``CI=true`` a missing one is a
failure, not a skip).

A regression shows as a family or a label missing, a count that does not match the
calls made, a restart not counted or counted without its reason, a text ``promtool``
refuses, or a Prometheus that cannot scrape the proxy.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

import httpx2
import pytest
import trio
from mcp import Client
from mcp.shared.exceptions import MCPError
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers import PY, REAL_IO_BOUND_S, everything, flaky, http_client, write_config
from tests.integration.dashboard import serving
from tests.polling import poll_until
from tests.security.proxy import INIT

pytestmark = pytest.mark.timeout(2 * REAL_IO_BOUND_S + 60)  # the tests bound themselves; this is the backstop

TOKEN: Final = "metrics-token-0123456789abcdef"
PROMETHEUS_STOP_S: Final = 10.0
"""SIGTERM to exit for Prometheus (it flushes its head block: well under a second here)."""


def binary(name: str) -> str:
    """A Debian binary of the ``prometheus`` package; skips without it, fails under ``CI=true``."""
    found = shutil.which(name)
    if found:
        return found
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{name} is not installed; tests/setup.sh installs it "
                    "(apt-get install -y prometheus)")
    pytest.skip(f"{name} is not installed (apt-get install -y prometheus)")


def samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Every sample of an exposition by sample name (``..._count``, ``..._total``)."""
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def value(found: dict[str, list[tuple[dict[str, str], float]]], name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels`` (0 when there is none)."""
    return sum(v for lab, v in found.get(name, []) if all(lab.get(k) == want for k, want in labels.items()))


def promtool_check(text: str) -> None:
    """``promtool check metrics``: the format and Prometheus's naming rules."""
    done = subprocess.run([binary("promtool"), "check", "metrics"], input=text, capture_output=True,
                          text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def free_port() -> int:
    # Prometheus takes a fixed listen address; the port is free when asked (a race with
    # another process taking it in between would fail the start, not pass a wrong test).
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@asynccontextmanager
async def prometheus(tmp_path: Path, target: str, *, bearer: str | None = None) -> AsyncIterator[str]:
    """A real Prometheus scraping ``target`` (``host:port``) every second; yields its base URL."""
    port = free_port()
    job: dict[str, object] = {"job_name": "mcpvisor", "scrape_interval": "1s", "scrape_timeout": "1s",
                              "static_configs": [{"targets": [target]}]}
    if bearer is not None:
        job["authorization"] = {"type": "Bearer", "credentials": bearer}
    config = tmp_path / "prometheus.yml"
    # JSON is YAML: the config needs no YAML writer.
    config.write_text(json.dumps({"global": {"scrape_interval": "1s"}, "scrape_configs": [job]}))
    process = await trio.lowlevel.open_process(
        [binary("prometheus"), f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        process.send_signal(signal.SIGTERM)
        with trio.move_on_after(PROMETHEUS_STOP_S) as scope:
            await process.wait()
        if scope.cancelled_caught:
            process.kill()
            await process.wait()


async def scraped(http: httpx2.AsyncClient, base: str) -> bool:
    """Whether Prometheus at ``base`` has our target up and holds a series of our calls."""
    try:
        targets = (await http.get(f"{base}/api/v1/targets")).json()["data"]["activeTargets"]
        if not targets or targets[0]["health"] != "up":
            return False
        query = 'mcp_server_operation_duration_seconds_count{gen_ai_tool_name="echo",outcome="ok"}'
        result = (await http.get(f"{base}/api/v1/query", params={"query": query})).json()["data"]["result"]
    except (httpx2.HTTPError, KeyError, ValueError):
        return False  # not listening yet
    return any(r["metric"].get("mcpvisor_server") == "alpha" and float(r["value"][1]) == 3 for r in result)


async def test_the_http_front_exports_calls_errors_and_a_restart(tmp_path: Path) -> None:
    """Three good calls, a tool error, a JSON-RPC error and a crash through a real proxy:
    the scrape counts each with its tool, server and outcome on both sides of the proxy,
    the crash as a restart with its reason, every upstream's state and the process's
    own figures; promtool accepts the text and a real Prometheus scrapes it."""
    config = write_config(tmp_path, {"alpha": everything("--name", "alpha"), "beta": flaky("--name", "beta")})
    with trio.fail_after(2 * REAL_IO_BOUND_S):
        async with serving(tmp_path, config) as dash, http_client() as http:
            async with Client(dash.proxy.url, mode="legacy", cache=None) as client:
                for text in ("a", "b", "c"):
                    await client.call_tool("alpha_echo", {"text": text})
                assert (await client.call_tool("alpha_fail", {"message": "no"})).is_error
                with pytest.raises(MCPError):
                    await client.call_tool("alpha_raise_error", {"code": -32602, "message": "no"})
                with pytest.raises(MCPError):
                    await client.call_tool("beta_crash", {})

            async def restarted() -> bool:
                reply = await http.get(f"{dash.base}/api/servers/beta")
                status = reply.json()["status"]
                return bool(status["state"] == "ready" and status["restarts"] == 1)

            await poll_until(restarted)

            scrape = await http.get(f"{dash.base}/metrics")
            assert scrape.status_code == 200
            assert scrape.headers["content-type"].startswith("text/plain")
            text = scrape.text
            promtool_check(text)
            found = samples(text)
            for family in ("mcp_server_operation_duration_seconds_count",
                           "mcp_client_operation_duration_seconds_count"):
                assert value(found, family, mcp_method_name="tools/call", gen_ai_tool_name="echo",
                             mcpvisor_server="alpha", outcome="ok") == 3
                assert value(found, family, gen_ai_tool_name="fail", mcpvisor_server="alpha",
                             outcome="tool_error", error_type="tool_error") == 1
                assert value(found, family, gen_ai_tool_name="raise_error", outcome="error") == 1
                assert value(found, family, gen_ai_tool_name="crash", mcpvisor_server="beta",
                             outcome="server_down") == 1
            # The other requests the proxy served: no tool, no server.
            assert value(found, "mcp_server_operation_duration_seconds_count", mcp_method_name="initialize",
                         outcome="ok") >= 1
            assert value(found, "mcp_server_operation_duration_seconds_count",
                         mcp_method_name="initialize", mcpvisor_server="") >= 1
            buckets = [lab for lab, _ in found["mcp_server_operation_duration_seconds_bucket"]
                       if lab["gen_ai_tool_name"] == "echo"]
            assert {b["le"] for b in buckets} >= {"0.01", "300.0", "+Inf"}
            restarts = "mcpvisor_upstream_restarts_total"
            assert value(found, restarts, mcpvisor_server="beta", reason="exit") == 1
            assert value(found, restarts, mcpvisor_server="alpha") == 0
            assert "mcpvisor_upstream_breaker_opens_total" not in found  # a family with no series yet
            for name in ("alpha", "beta"):
                assert value(found, "mcpvisor_upstream_state", mcpvisor_server=name, state="ready") == 1
                # One state at a time: every other state's series is 0.
                assert value(found, "mcpvisor_upstream_state", mcpvisor_server=name) == 1
                assert value(found, "mcpvisor_requests_in_flight", mcpvisor_server=name) == 0
            assert value(found, "mcpvisor_list_changes_sent_total", kind="tools") >= 1
            assert "mcpvisor_sessions_open" in found
            assert value(found, "mcpvisor_journal_queue_depth") == 0
            assert value(found, "process_resident_memory_bytes") > 0
            assert "process_cpu_seconds_total" in found

            # Guarded like /api: a foreign page or Host gets nothing.
            assert (await http.get(f"{dash.base}/metrics", headers={"Origin": "http://evil.example"})
                    ).status_code == 403
            rebound = await http.get(f"{dash.base}/metrics", headers={"Host": "evil.example"})
            assert rebound.status_code == 421

            async with prometheus(tmp_path, f"127.0.0.1:{dash.proxy.port}") as prom:
                await poll_until(lambda: scraped(http, prom), every=0.25)


async def read_line_with(stream: trio.abc.ReceiveStream, needle: bytes, buf: bytearray) -> bytes:
    """The next line of ``stream`` that holds ``needle`` (earlier lines are dropped)."""
    while True:
        while b"\n" in buf:
            line, _, rest = bytes(buf).partition(b"\n")
            buf[:] = rest
            if needle in line:
                return line
        chunk = await stream.receive_some(65536)
        assert chunk, "the proxy closed its output"
        buf.extend(chunk)


async def test_the_metrics_port_serves_a_stdio_proxy_behind_its_token(tmp_path: Path) -> None:
    """``serve --metrics-port 0`` beside the stdio front: the scrape counts the call made over
    stdio; with a token configured it asks for it, until ``settings.metrics.public`` (applied
    by a hot reload) opens it on loopback; a real Prometheus scrapes it with the token."""
    settings: dict[str, Any] = {"authToken": TOKEN}
    config = write_config(tmp_path, {"alpha": everything("--name", "alpha")}, **settings)
    process = await trio.lowlevel.open_process(
        [PY, "-m", "mcpvisor", "serve", "--config", str(config), "--state-dir", str(tmp_path / "state"),
         "--metrics-port", "0"],
        env={**os.environ, "MCPVISOR_TOKEN": ""},
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdin is not None
    assert process.stdout is not None
    assert process.stderr is not None
    try:
        with trio.fail_after(2 * REAL_IO_BOUND_S):
            errbuf, outbuf = bytearray(), bytearray()
            line = await read_line_with(process.stderr, b"metrics at ", errbuf)
            url = line.decode().rsplit("metrics at ", 1)[1].strip()
            assert url.startswith("http://127.0.0.1:")
            assert url.endswith("/metrics")
            call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                    "params": {"name": "alpha_echo", "arguments": {"text": "hi"}}}
            for message in (INIT, {"jsonrpc": "2.0", "method": "notifications/initialized"}, call):
                await process.stdin.send_all(json.dumps(message).encode() + b"\n")
            answer = json.loads(await read_line_with(process.stdout, b'"id":2', outbuf))
            assert answer["result"]["content"][0]["text"] == "echo: hi"

            async with http_client() as http:
                assert (await http.get(url)).status_code == 401
                reply = await http.get(url, headers={"Authorization": f"Bearer {TOKEN}"})
                assert reply.status_code == 200
                promtool_check(reply.text)
                found = samples(reply.text)
                for family in ("mcp_server_operation_duration_seconds_count",
                               "mcp_client_operation_duration_seconds_count"):
                    assert value(found, family, gen_ai_tool_name="echo", mcpvisor_server="alpha",
                                 outcome="ok") == 1
                # The handshake the stdio front answers itself is timed as the SDK's answers are.
                assert value(found, "mcp_server_operation_duration_seconds_count",
                             mcp_method_name="initialize", mcpvisor_server="", outcome="ok") == 1
                assert value(found, "mcpvisor_sessions_open") == 1

                async with prometheus(tmp_path, url.removeprefix("http://").removesuffix("/metrics"),
                                      bearer=TOKEN) as prom:
                    await poll_until(lambda: scraped_once(http, prom), every=0.25)

                write_config(tmp_path, {"alpha": everything("--name", "alpha")}, **settings,
                             metrics={"public": True})

                async def opened() -> bool:
                    return (await http.get(url)).status_code == 200

                await poll_until(opened, every=0.2)  # the config watcher applies the edit
                assert (await http.get(url, headers={"Host": "evil.example"})).status_code == 421
    finally:
        with trio.move_on_after(PROMETHEUS_STOP_S):
            await process.stdin.aclose()  # EOF: the stdio proxy stops its servers and exits
            await process.wait()
        if process.returncode is None:
            process.kill()
            await process.wait()


async def scraped_once(http: httpx2.AsyncClient, base: str) -> bool:
    """Whether Prometheus at ``base`` scraped its one target successfully (with the token)."""
    try:
        targets = (await http.get(f"{base}/api/v1/targets")).json()["data"]["activeTargets"]
        if not targets or targets[0]["health"] != "up":
            return False
        query = 'mcpvisor_upstream_state{mcpvisor_server="alpha",state="ready"}'
        result = (await http.get(f"{base}/api/v1/query", params={"query": query})).json()["data"]["result"]
    except (httpx2.HTTPError, KeyError, ValueError):
        return False
    return any(float(r["value"][1]) == 1 for r in result)


async def test_the_bench_measures_what_metrics_cost_and_counts_every_call() -> None:
    """``python -m mcpvisor.bench.metrics_cost``: batches with metrics on and off through a
    real proxy and upstream; every call made with metrics on is counted, none made off."""
    with trio.fail_after(REAL_IO_BOUND_S):
        argv = [PY, "-m", "mcpvisor.bench.metrics_cost", "--pairs", "2", "--calls", "64"]
        done = await trio.run_process(argv, capture_stdout=True, capture_stderr=True, check=False)
    assert done.returncode == 0, done.stderr.decode()
    result = json.loads(done.stdout.decode().strip().splitlines()[-1])
    assert result["scenario"] == "metrics_cost"
    assert result["counted_calls"] == 2 * result["calls_per_batch"] == 128
    assert result["cpu_us_per_call_on"] > 0
    assert result["cpu_us_per_call_off"] > 0
    assert b"metrics cost at concurrency 32" in done.stderr


async def test_the_bench_measures_what_tracing_costs_with_a_real_otlp_export() -> None:
    """``metrics_cost --traces``: the same batches with tracing toggled, exporting over
    OTLP/HTTP to a sink process that the bench stops on its way out."""
    with trio.fail_after(REAL_IO_BOUND_S):
        argv = [PY, "-m", "mcpvisor.bench.metrics_cost", "--traces", "--pairs", "1", "--calls", "64"]
        done = await trio.run_process(argv, capture_stdout=True, capture_stderr=True, check=False)
    assert done.returncode == 0, done.stderr.decode()
    result = json.loads(done.stdout.decode().strip().splitlines()[-1])
    assert result["scenario"] == "tracing_cost"
    assert result["calls_per_batch"] == 64
    assert result["cpu_us_per_call_on"] > 0
    assert b"tracing cost at concurrency 32" in done.stderr


def serve_refused(tmp_path: Path, *extra: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    """``serve --config`` a server that leaves a file the moment it is spawned, expecting a refusal."""
    mark = tmp_path / "spawned"
    config = write_config(tmp_path, {"tattle": {"command": "sh", "args": ["-c", f"touch {mark}; exec cat"]}})
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCPVISOR_") or k == "MCPVISOR_TEST_TAG"}
    done = subprocess.run([PY, "-m", "mcpvisor", "serve", "--config", str(config), "--state-dir",
                           str(tmp_path / "state"), *extra], stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, env=env, timeout=REAL_IO_BOUND_S, check=False)
    return done, mark


def test_a_busy_or_unguarded_metrics_port_is_refused_before_any_server_starts(tmp_path: Path) -> None:
    """A busy ``--metrics-port``, or ``--metrics-host`` beyond loopback with no token: one
    line naming the flag, the port or the host, exit 2, and no server spawned."""
    with socket.socket() as busy:
        busy.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done, mark = serve_refused(tmp_path, "--metrics-port", str(port))
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        f"mcpvisor: --metrics-port: port {port} on 127.0.0.1 is already in use "
        "(another mcpvisor? see mcpvisor status)"]
    assert not mark.exists()
    done, mark = serve_refused(tmp_path, "--metrics-port", "0", "--metrics-host", "0.0.0.0")
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("mcpvisor: --metrics-port: refusing to serve on 0.0.0.0 without a token")
    assert len(done.stderr.splitlines()) == 1
    assert not mark.exists()
