"""Three ``mcpvisor serve --transport http`` replicas behind a real HAProxy and a real nginx,
configured by the files deploy/ ships: rolling restarts lose no call, a killed replica loses
only what it held, handshake-era sessions stick to their replica and start over cleanly
elsewhere when it dies, and stateless calls go anywhere.

Each test starts its own three replicas (subprocesses, each with its own state dir and
flaky upstream) and its balancer on loopback ports, and stops every one of them at the end.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import time
from pathlib import Path
from typing import Final

import httpx2
import pytest
import trio

from tests.helpers import REAL_IO_BOUND_S
from tests.integration.replicas import (
    DEPLOY,
    Load,
    Replica,
    answer_of,
    configured,
    free_port,
    haproxy,
    modern_call,
    need,
    nginx,
    open_session,
    replicas,
    stateless_load,
)
from tests.polling import poll_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(3 * REAL_IO_BOUND_S + 60)]

CALLS: Final = 20_000
"""Issue 30's figure: 2026-07-28 calls through HAProxy while one replica is restarted."""
CONCURRENCY: Final = 32
TERM_AFTER: Final = CALLS // 4
"""Calls answered before the SIGTERM: the load is well under way on every replica."""
KILL_CALLS: Final = 2_000
SLOW_CALL_S: Final = 0.05
"""Each call of the SIGKILL round sleeps this long upstream, so the replica killed holds some."""
CHECK_BOUND_S: Final = 30.0
"""A balancer checking its config file (a loaded box)."""
STOP_AT_ONCE_S: Final = 20.0
"""A second SIGTERM to the exit: the upstream's stop (2 s + 2 s) on a loaded box, far
below the 30 s drain the first one began."""
HELD_CALL_S: Final = 2
"""A call a draining replica holds: long enough to look at the replica while it drains."""


def pool(http_limit: int = CONCURRENCY) -> httpx2.AsyncClient:
    limits = httpx2.Limits(max_connections=http_limit, max_keepalive_connections=http_limit)
    return httpx2.AsyncClient(limits=limits, timeout=httpx2.Timeout(60.0))


def replica_of(sid: str, fleet: list[Replica]) -> Replica:
    """The replica whose name begins the session id."""
    name, dot, _ = sid.partition(".")
    assert dot, f"the session id {sid!r} does not name its replica"
    return next(r for r in fleet if r.name == name)


async def test_haproxy_restart_loses_no_call_and_sessions_stick_and_start_over(tmp_path: Path) -> None:
    need("haproxy")
    with trio.fail_after(3 * REAL_IO_BOUND_S):
        async with replicas(tmp_path, record=True) as fleet, \
                haproxy(tmp_path, [r.port for r in fleet]) as base, pool() as http:
            url = f"{base}/mcp"
            # A handshake-era session sticks: its id names its replica, and every request
            # of it is served (any other replica would answer 404, which HAProxy does not retry).
            session = await open_session(http, url)
            home = replica_of(session.sid, fleet)
            for i in range(12):
                r = await session.call("f_echo", {"text": f"s{i}"})
                assert r.status_code == 200, r.text
                assert answer_of(r)["result"]["content"][0]["text"] == f"echo: s{i}"

            # A rolling restart: 20,000 stateless calls, 32 in flight; one replica (not
            # the session's) gets SIGTERM once a quarter are answered. None fails, and the
            # replica exits 0.
            # The leaving replica also holds a longer call at the SIGTERM: it finishes with
            # its own answer while the balancer's traffic goes elsewhere.
            leaving = next(r for r in fleet if r is not home)
            load = Load()
            held: list[httpx2.Response] = []

            async def hold() -> None:
                body, headers = modern_call(1, "f_sleep", {"seconds": HELD_CALL_S})
                held.append(await http.post(f"http://127.0.0.1:{leaving.port}/mcp", content=body,
                                            headers=headers))

            started = time.monotonic()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(stateless_load, url, CALLS, CONCURRENCY, load)
                await poll_until(lambda: load.done + load.failed >= TERM_AFTER)
                nursery.start_soon(hold)
                await poll_until(lambda: leaving.saw(f'"seconds": {HELD_CALL_S}'))
                leaving.process.send_signal(signal.SIGTERM)
                assert await leaving.process.wait() == 0, leaving.proxy.text()[-2000:]
            elapsed = time.monotonic() - started
            assert answer_of(held[0])["result"]["content"][0]["text"] == f"slept {HELD_CALL_S}"
            print(f"\n{CALLS} calls through HAProxy, {CONCURRENCY} in flight, one replica restarted: "
                  f"{elapsed:.1f}s ({CALLS / elapsed:.0f} calls/s)")
            assert (load.done, load.failed) == (CALLS, 0), load.failures
            drained = [line for line in leaving.proxy.log if "drained:" in line]
            assert drained, "the replica did not drain"
            print(drained[0].split("mcpvisor@", 1)[-1])

            # The session is still served by its own replica.
            r = await session.call("f_echo", {"text": "still here"})
            assert r.status_code == 200, r.text

            # SIGKILL the session's replica mid-load (each call sleeps upstream, so it
            # holds some): at most the calls in flight at that moment fail, every other
            # is answered by the replica left.
            killed = Load()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(lambda: stateless_load(url, KILL_CALLS, CONCURRENCY, killed,
                                                          arguments={"seconds": SLOW_CALL_S}, tool="f_sleep"))
                await poll_until(lambda: killed.done >= KILL_CALLS // 4)
                in_flight_at_kill = killed.in_flight
                home.process.kill()
                await home.process.wait()
            print(f"SIGKILL with {in_flight_at_kill} calls in flight: {killed.failed} failed")
            assert killed.done + killed.failed == KILL_CALLS
            assert killed.failed <= in_flight_at_kill, killed.failures

            # The session's replica is gone: the next request gets 404 through HAProxy,
            # the client initializes again and lands on a replica that is alive.
            r = await session.call("f_echo", {"text": "orphan"})  # the fast path's candidate
            assert r.status_code == 404, r.text
            listing = {"jsonrpc": "2.0", "id": 99, "method": "tools/list"}  # the SDK's own path
            assert (await http.post(url, json=listing, headers=session.headers)).status_code == 404
            again = await open_session(http, url)
            assert replica_of(again.sid, fleet) not in (home, leaving)
            r = await again.call("f_echo", {"text": "anew"})
            assert answer_of(r)["result"]["content"][0]["text"] == "echo: anew"


async def test_nginx_routes_sessions_on_their_replica_and_spreads_stateless_calls(tmp_path: Path) -> None:
    need("nginx")
    with trio.fail_after(2 * REAL_IO_BOUND_S):
        async with replicas(tmp_path, record=True) as fleet, \
                nginx(tmp_path, [r.port for r in fleet]) as base, pool() as http:
            url = f"{base}/mcp"
            sessions = [await open_session(http, url) for _ in range(3)]
            homes = {replica_of(s.sid, fleet).name for s in sessions}
            assert len(homes) == 3, "nginx's round robin should open one session on each replica"
            for s in sessions:
                for i in range(5):
                    r = await s.call("f_echo", {"text": f"{s.sid}-{i}"})
                    assert r.status_code == 200, r.text  # any other replica would answer 404
            before = {r.name: r.calls_seen() for r in fleet}
            assert set(before.values()) == {5}

            load = Load()
            await stateless_load(url, 60, 6, load)
            assert (load.done, load.failed) == (60, 0), load.failures
            spread = {r.name: r.calls_seen() - before[r.name] for r in fleet}
            assert sum(spread.values()) == 60
            assert all(n > 0 for n in spread.values()), spread

            # SIGTERM one replica while it holds a call: at once it is not ready and
            # answers new work 503 + Retry-After (nginx retries that on the next replica,
            # so no call through nginx fails); the call it holds gets its own answer; then
            # it exits 0.
            first = fleet[0]
            direct = f"http://127.0.0.1:{first.port}"
            assert (await http.get(f"{direct}/healthz")).json() == {"status": "ok"}
            assert (await http.get(f"{direct}/readyz")).json() == {"status": "ready"}
            held: list[httpx2.Response] = []
            seen = first.calls_seen()

            async def hold() -> None:
                body, headers = modern_call(1, "f_sleep", {"seconds": HELD_CALL_S})
                held.append(await http.post(f"{direct}/mcp", content=body, headers=headers))

            # A handshake-era client of that replica, with its notification stream open:
            # once the drain is done the stream is ended, not cut (the client comes back
            # after the stream's retry hint, through the balancer, to a live replica).
            mine = await open_session(http, f"{direct}/mcp")
            listening = trio.Event()
            stream_end: list[str] = []

            async def listen() -> None:
                async with http.stream("GET", f"{direct}/mcp",
                                       headers={**mine.headers, "accept": "text/event-stream"}) as r:
                    assert r.status_code == 200
                    listening.set()
                    try:
                        async for _ in r.aiter_bytes():
                            pass
                        stream_end.append("ended")
                    except httpx2.HTTPError as exc:
                        stream_end.append(f"cut: {type(exc).__name__}")

            async with trio.open_nursery() as nursery:
                nursery.start_soon(listen)
                nursery.start_soon(hold)
                await listening.wait()
                await poll_until(lambda: first.calls_seen() > seen)
                first.process.send_signal(signal.SIGTERM)
                await first.proxy.wait_log("received SIGTERM")
                ready = await http.get(f"{direct}/readyz")
                assert ready.status_code == 503
                assert "draining" in ready.json()["reason"]
                assert (await http.get(f"{direct}/healthz")).status_code == 200  # alive all the same
                body, headers = modern_call(2, "f_echo", {"text": "late"})
                refused = await http.post(f"{direct}/mcp", content=body, headers=headers)
                assert refused.status_code == 503
                assert refused.headers["retry-after"] == "1"
                through = Load()
                await stateless_load(url, 30, 6, through)
                assert (through.done, through.failed) == (30, 0), through.failures
            assert held[0].status_code == 200
            assert stream_end == ["ended"]
            assert answer_of(held[0])["result"]["content"][0]["text"] == f"slept {HELD_CALL_S}"
            assert await first.process.wait() == 0

            # The session nginx pinned to that replica falls to another (a backup of its
            # upstream), which answers 404; the client initializes again, on a live replica.
            orphan = next(x for x in sessions if replica_of(x.sid, fleet) is first)
            r = await orphan.call("f_echo", {"text": "orphan"})
            assert r.status_code == 404, r.text
            again = await open_session(http, url)
            assert replica_of(again.sid, fleet) is not first
            assert (await again.call("f_echo", {"text": "anew"})).status_code == 200

            # A second SIGTERM stops a draining replica at once, whatever it still holds.
            second = fleet[1]
            seen = second.calls_seen()

            async def stick() -> None:
                body, headers = modern_call(3, "f_sleep", {"seconds": 600})
                with contextlib.suppress(httpx2.HTTPError):  # the replica goes away mid-call
                    await http.post(f"http://127.0.0.1:{second.port}/mcp", content=body, headers=headers)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(stick)
                await poll_until(lambda: second.calls_seen() > seen)
                second.process.send_signal(signal.SIGTERM)
                await second.proxy.wait_log("received SIGTERM")
                second.process.send_signal(signal.SIGTERM)
                with trio.fail_after(STOP_AT_ONCE_S):
                    await second.process.wait()
                await second.proxy.wait_log("received SIGTERM again: stopping now")


def test_the_shipped_files_pass_each_balancers_own_check_and_the_bench_keeps_its_replicas(
        tmp_path: Path) -> None:
    """deploy/haproxy.cfg and deploy/nginx.conf, their example addresses replaced, pass
    ``haproxy -c`` and ``nginx -t``; the bench's copy of the HAProxy file names exactly
    the replicas it runs."""
    from mcpvisor.bench.replicas import haproxy_config

    ports = [free_port() for _ in range(3)]
    cfg = tmp_path / "haproxy.cfg"
    cfg.write_text(configured((DEPLOY / "haproxy.cfg").read_text(), ports, [(":8080\n", ":18080\n")]))
    done = subprocess.run([need("haproxy"), "-c", "-f", str(cfg)], capture_output=True, text=True,
                          timeout=CHECK_BOUND_S, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    two = haproxy_config(ports[:2], 18081)
    assert [line.split()[2] for line in two.splitlines() if line.strip().startswith("server ")] == [
        f"127.0.0.1:{p}" for p in ports[:2]]
    assert "bind 127.0.0.1:18081" in two
    home = tmp_path / "nginx"
    home.mkdir()
    conf = home / "nginx.conf"
    conf.write_text(configured((DEPLOY / "nginx.conf").read_text(), ports,
                               [("listen 8080;", "listen 127.0.0.1:18082;"),
                                ("pid /run/nginx-mcpvisor.pid;", f"pid {home}/nginx.pid;")]))
    done = subprocess.run([need("nginx"), "-t", "-e", "stderr", "-p", str(home), "-c", str(conf)],
                          capture_output=True, text=True, timeout=CHECK_BOUND_S, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
