"""Connections that never become a session cannot end the proxy or hold its descriptors.

Issue 23, items 1, 5 and the websocket half of 11, against a real ``mcpvisor serve`` over
loopback sockets:

* a client that resets its connection around the websocket handshake (after a full
  upgrade request, after a plain ``GET /``, after garbage, or a port scan's
  connect-and-close) ends that connection only: the proxy keeps serving the next client;
* a handshake (websocket upgrade, or an HTTP request's headers) that does not finish
  within ``settings.handshakeTimeout`` is closed and its descriptor comes back, while a
  legitimate client is served; handshakes in progress count against ``maxSessions``;
* a websocket opened with a token that a hot reload removes is closed (code 1008).

The figures (descriptors before, at the peak and after; time to close) are printed: run
with ``-s`` to see them.
"""

from __future__ import annotations

import json
import signal
import socket
import ssl
import struct
from pathlib import Path
from typing import Any, Final

import httpx2
import psutil
import pytest
import trio
from trio_websocket import ConnectionClosed, open_websocket_url

from tests.helpers import REAL_IO_BOUND_S, flaky
from tests.security.proxy import HTTP_HEADERS, INIT, Proxy, running_proxy, write
from tests.security.test_security_tokens import raw_handshake

pytestmark = pytest.mark.slow

ROUNDS: Final = 10
"""Rounds of the four aborted-handshake shapes (the unfixed front died on the first or second)."""
HALF_OPEN: Final = 300
"""The issue's figure: 300 handshakes that never finish."""
SLOW_HEADERS: Final = 50
BOUND: Final = "1s"
"""A short ``settings.handshakeTimeout`` so the tests stay short (the default is 10 s)."""
TRICKLE_S: Final = 0.2
"""A slowloris client's pace: one header byte this often (it must not keep the connection)."""
FD_POLL_S: Final = 0.05
CLOSE_PATIENCE_S: Final = 30.0
"""How long a test waits for the proxy to close what the 1 s bound should close: half of
the libraries' own 60 s defaults, so a close that comes only from those fails the test."""
SILENT_TLS: Final = 20
LONG_BOUND_S: Final = 40.0
"""A bound no part of the flood test waits for: what closes is closed for another reason."""
START_UP_FDS: Final = 4
"""Descriptors a proxy may hold only while it starts (files it writes once), at most."""
ALPHA: Final = "alpha-token-0123456789abcdef"
BETA: Final = "beta-token-0123456789abcdefgh"
UPGRADE: Final = (
    "GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
    "Sec-WebSocket-Protocol: mcp\r\n\r\n"
)


def fds(pid: int) -> int:
    return int(psutil.Process(pid).num_fds())


async def wait_fds_at_most(pid: int, limit: int) -> int:
    """Wait (bounded by the test's deadline) until the proxy holds at most ``limit`` descriptors.

    Another process's descriptor count has no event to wait on: it is sampled. The proxy
    closes its end before the client sees EOF, so this normally returns at once.
    """
    while True:
        now = fds(pid)
        if now <= limit:
            return now
        await trio.sleep(FD_POLL_S)


async def sample_fds(pid: int, peaks: list[int]) -> None:
    """Record the proxy's descriptor count until cancelled (for the figures, and to show it held them)."""
    while True:
        peaks.append(fds(pid))
        await trio.sleep(FD_POLL_S)


async def wait_fds_at_least(pid: int, count: int) -> None:
    """Wait (bounded by the test's deadline) until the proxy holds ``count`` descriptors."""
    while True:
        if fds(pid) >= count:
            return
        await trio.sleep(FD_POLL_S)


async def wait_log_count(proxy: Proxy, needle: str, count: int, *, after: int = 0) -> None:
    """Wait until ``count`` log lines from index ``after`` on contain ``needle``."""
    while sum(needle in line for line in proxy.log[after:]) < count:
        await proxy.grew.wait()


async def echo_over_ws(url: str, text: str, headers: dict[str, str] | None = None) -> str:
    """A whole legitimate session: handshake, initialize, one tools/call through an upstream."""
    extra = [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
    async with open_websocket_url(url, subprotocols=["mcp"], extra_headers=extra) as ws:
        await ws.send_message(json.dumps(INIT))
        assert "result" in json.loads(await ws.get_message())
        await ws.send_message(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        call = {"name": "fl_echo", "arguments": {"text": text}}
        await ws.send_message(json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call}))
        reply = json.loads(await ws.get_message())
        return str(reply["result"]["content"][0]["text"])


async def connect(port: int) -> trio.socket.SocketType:
    sock = trio.socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    await sock.connect(("127.0.0.1", port))
    return sock


def reset(sock: trio.socket.SocketType) -> None:
    """Close with a TCP RST instead of a FIN (SO_LINGER 0), as a crashed or hostile client does."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


async def wait_closed_by_peer(sock: trio.socket.SocketType) -> None:
    """Read until the proxy closes the connection (EOF or reset); whatever it answered is dropped."""
    try:
        while await sock.recv(4096):
            pass
    except OSError:
        pass


def config_for(tmp_path: Path, **settings: Any) -> Path:
    return write(
        tmp_path / "mcpvisor.json",
        {"mcpServers": {"fl": flaky()}, "settings": {"exposure": "all", **settings}},
    )


def assert_no_crash_logged(proxy: Proxy) -> None:
    assert proxy.process.returncode is None, proxy.text()
    assert "Traceback" not in proxy.text(), proxy.text()


async def test_aborted_websocket_handshakes_end_only_their_connection(tmp_path: Path) -> None:
    """Resets after a full upgrade request, after a plain ``GET /``, after garbage, and
    connect-and-close, ten rounds: the proxy stays up, logs no traceback, and a second
    client's session still answers a call through an upstream (the unfixed front let
    ConnectionClosed out of accept()/reject() and exited on the first or second round)."""
    config = config_for(tmp_path)
    with trio.fail_after(REAL_IO_BOUND_S):
        async with running_proxy(config, "--transport", "ws", "--port", "0") as proxy:
            assert await echo_over_ws(proxy.url, "before") == "echo: before"
            shapes = (
                UPGRADE.format(port=proxy.port).encode(),
                b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
                b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03garbage\r\n\r\n",
                b"",
            )
            for _ in range(ROUNDS):
                for payload in shapes:
                    sock = await connect(proxy.port)
                    if payload:
                        await sock.send(payload)
                        reset(sock)
                    else:
                        sock.close()  # a port scan: connect, then a plain close
                # The same shapes, reset only once the proxy has answered (its write lands
                # on a reset socket, or its reader is told mid-answer).
                for payload in shapes[:3]:
                    sock = await connect(proxy.port)
                    await sock.send(payload)
                    await sock.recv(1)
                    reset(sock)
            assert await echo_over_ws(proxy.url, "after") == "echo: after"
            assert_no_crash_logged(proxy)


async def test_half_open_websocket_handshakes_are_closed_after_the_bound_and_their_fds_come_back(
    tmp_path: Path,
) -> None:
    """300 connections that send half an upgrade request and stop: while they hang, a
    legitimate client is served; each is closed by the proxy after ``handshakeTimeout``
    and the proxy's descriptor count returns to where it was (the unfixed front held
    them for trio-websocket's 60 s, past this test's patience for a 1 s bound)."""
    config = config_for(tmp_path, handshakeTimeout=BOUND)
    with trio.fail_after(REAL_IO_BOUND_S):
        async with running_proxy(config, "--transport", "ws", "--port", "0") as proxy:
            pid = proxy.process.pid
            assert await echo_over_ws(proxy.url, "warm") == "echo: warm"
            baseline = fds(pid)
            half = UPGRADE.format(port=proxy.port).encode()[:40]
            socks = []
            started = trio.current_time()
            for _ in range(HALF_OPEN):
                sock = await connect(proxy.port)
                await sock.send(half)
                socks.append(sock)
            peaks: list[int] = []
            async with trio.open_nursery() as sampling:
                sampling.start_soon(sample_fds, pid, peaks)
                assert await echo_over_ws(proxy.url, "meanwhile") == "echo: meanwhile"
                with trio.fail_after(CLOSE_PATIENCE_S):
                    async with trio.open_nursery() as nursery:
                        for sock in socks:
                            nursery.start_soon(wait_closed_by_peer, sock)
                closed_in = trio.current_time() - started
                sampling.cancel_scope.cancel()
            peak = max(peaks)
            for sock in socks:
                sock.close()
            after = await wait_fds_at_most(pid, baseline)
            print(
                f"\nws half-open handshakes: proxy fds {baseline} before, {peak} with {HALF_OPEN} open, "
                f"{after} after; all closed {closed_in:.1f} s after the first opened (bound {BOUND})"
            )
            assert peak >= baseline + HALF_OPEN // 2, "the proxy never held the connections"
            assert await echo_over_ws(proxy.url, "after") == "echo: after"
            assert_no_crash_logged(proxy)
            assert "settings.handshakeTimeout" in proxy.text()


async def test_handshakes_in_progress_count_against_max_sessions(tmp_path: Path) -> None:
    """``maxSessions: 3`` and three handshakes hanging: a fourth client is refused with
    503 (the unfixed front counted only open sessions and admitted it); once the hanging
    ones time out it is admitted."""
    config = config_for(tmp_path, handshakeTimeout=BOUND, maxSessions=3)
    with trio.fail_after(REAL_IO_BOUND_S):
        async with running_proxy(config, "--transport", "ws", "--port", "0") as proxy:
            half = UPGRADE.format(port=proxy.port).encode()[:40]
            socks = []
            for _ in range(3):
                sock = await connect(proxy.port)
                await sock.send(half)
                socks.append(sock)
            status, _ = await raw_handshake(proxy.port, {})
            assert status == 503
            with trio.fail_after(CLOSE_PATIENCE_S):
                async with trio.open_nursery() as nursery:
                    for sock in socks:
                        nursery.start_soon(wait_closed_by_peer, sock)
            for sock in socks:
                sock.close()
            assert await echo_over_ws(proxy.url, "admitted") == "echo: admitted"


async def test_a_flood_past_max_sessions_is_closed_unanswered_so_descriptors_stay_bounded(
    tmp_path: Path,
) -> None:
    """``maxSessions: 1`` and a long bound: one hanging handshake holds the slot, 64 more
    are held only to be answered 503, and the next connection is closed at once without
    an answer, long before the bound (the unfixed front held every one of them)."""
    from mcpvisor.actors.fronts.ws_server import OVERFLOW_HANDSHAKES

    config = config_for(tmp_path, handshakeTimeout=f"{LONG_BOUND_S:g}s", maxSessions=1)
    with trio.fail_after(REAL_IO_BOUND_S):
        async with running_proxy(config, "--transport", "ws", "--port", "0") as proxy:
            half = UPGRADE.format(port=proxy.port).encode()[:40]
            baseline = fds(proxy.process.pid)
            held = []
            for _ in range(1 + OVERFLOW_HANDSHAKES):
                sock = await connect(proxy.port)
                await sock.send(half)
                held.append(sock)
            with trio.fail_after(LONG_BOUND_S / 2):
                await proxy.wait_log("refusing websocket connections")
                # All accepted. A few descriptors of start-up (the remembered catalog's write, its
                # lock) may still have been open when the baseline was read: allow for them.
                await wait_fds_at_least(proxy.process.pid, baseline + len(held) - START_UP_FDS)
                extra = await connect(proxy.port)
                assert await extra.recv(4096) == b""
            extra.close()
            seen = len(proxy.log)
            for sock in held:
                sock.close()
            await wait_log_count(proxy, "closed before a handshake", len(held), after=seen)
            assert await echo_over_ws(proxy.url, "admitted") == "echo: admitted"


async def trickle_headers(port: int) -> None:
    """A slowloris client: a POST whose headers arrive one byte at a time, never finished."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    head = f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Slow: " + "a" * 10_000
    try:
        async with trio.open_nursery() as nursery:

            async def send() -> None:
                for byte in head.encode():
                    await stream.send_all(bytes([byte]))
                    await trio.sleep(TRICKLE_S)

            nursery.start_soon(send)
            try:
                while await stream.receive_some(4096):
                    pass
            except trio.BrokenResourceError:
                pass
            nursery.cancel_scope.cancel()
    except trio.BrokenResourceError:
        pass  # our next byte met the closed connection
    finally:
        await trio.aclose_forcefully(stream)


async def test_http_headers_trickled_byte_by_byte_are_cut_after_the_bound(tmp_path: Path) -> None:
    """50 slowloris connections on the HTTP front, each sending a header byte every 0.2 s:
    all are closed by the proxy (the trickle does not extend the bound) while a
    legitimate client initializes and calls a tool, and the descriptors come back."""
    config = config_for(tmp_path, handshakeTimeout=BOUND)
    with trio.fail_after(REAL_IO_BOUND_S):
        async with running_proxy(config, "--transport", "http", "--port", "0") as proxy:
            pid = proxy.process.pid
            async with httpx2.AsyncClient(timeout=30) as http:
                r = await http.post(proxy.url, json=INIT, headers=HTTP_HEADERS)
                assert r.status_code == 200
            baseline = fds(pid)
            started = trio.current_time()
            async with trio.open_nursery() as nursery:
                for _ in range(SLOW_HEADERS):
                    nursery.start_soon(trickle_headers, proxy.port)
                async with httpx2.AsyncClient(timeout=30) as http:
                    r = await http.post(proxy.url, json=INIT, headers=HTTP_HEADERS)
                    assert r.status_code == 200
            closed_in = trio.current_time() - started
            after = await wait_fds_at_most(pid, baseline)
            print(
                f"\nhttp slowloris: {SLOW_HEADERS} trickling connections all cut {closed_in:.1f} s after "
                f"they opened (bound {BOUND}); proxy fds {baseline} before, {after} after"
            )
            assert proxy.process.returncode is None


@pytest.mark.parametrize("transport", ["http", "ws"])
async def test_tls_connections_that_never_handshake_are_closed_after_the_bound(
    tmp_path: Path, transport: str
) -> None:
    """With ``--certfile``: 20 TCP connections that never send a ClientHello are closed
    after ``handshakeTimeout`` on both fronts (hypercorn's and trio-websocket's own TLS
    bounds are 60 s) while a TLS client is served, and the descriptors come back."""
    from tests.security.test_security_tls import self_signed

    certfile, keyfile = self_signed(tmp_path)
    trust = ssl.create_default_context(cafile=str(certfile))
    config = write(
        tmp_path / "mcpvisor.json",
        {"mcpServers": {}, "settings": {"authToken": ALPHA, "handshakeTimeout": BOUND}},
    )
    tls = ("--certfile", str(certfile), "--keyfile", str(keyfile))
    with trio.fail_after(REAL_IO_BOUND_S):
        async with running_proxy(config, "--transport", transport, "--port", "0", *tls) as proxy:
            pid = proxy.process.pid
            baseline = fds(pid)
            socks = [await connect(proxy.port) for _ in range(SILENT_TLS)]
            started = trio.current_time()
            auth = {"Authorization": f"Bearer {ALPHA}"}
            if transport == "http":
                async with httpx2.AsyncClient(verify=trust, timeout=30) as http:
                    r = await http.post(proxy.url, json=INIT, headers={**HTTP_HEADERS, **auth})
                    assert r.status_code == 200
            else:
                extra = [(k.encode(), v.encode()) for k, v in auth.items()]
                async with open_websocket_url(
                    proxy.url, subprotocols=["mcp"], extra_headers=extra, ssl_context=trust
                ) as ws:
                    await ws.send_message(json.dumps(INIT))
                    assert "result" in json.loads(await ws.get_message())
            with trio.fail_after(CLOSE_PATIENCE_S):
                async with trio.open_nursery() as nursery:
                    for sock in socks:
                        nursery.start_soon(wait_closed_by_peer, sock)
            closed_in = trio.current_time() - started
            for sock in socks:
                sock.close()
            after = await wait_fds_at_most(pid, baseline)
            print(
                f"\n{transport} silent TLS: {SILENT_TLS} connections closed {closed_in:.1f} s after they "
                f"opened (bound {BOUND}); proxy fds {baseline} before, {after} after"
            )


async def test_a_websocket_whose_token_a_reload_removes_is_closed(tmp_path: Path) -> None:
    """Two sessions with two tokens; a reload removes one token: that session is closed
    with code 1008 and a reason, the other keeps answering, and the removed token's next
    handshake gets 401 (the unfixed front let the session go on working). No token value
    reaches the log."""
    config = config_for(tmp_path, authTokens={"alpha": ALPHA, "beta": BETA})
    with trio.fail_after(REAL_IO_BOUND_S):
        async with running_proxy(config, "--transport", "ws", "--port", "0") as proxy:
            alpha = [(b"Authorization", f"Bearer {ALPHA}".encode())]
            beta = [(b"Authorization", f"Bearer {BETA}".encode())]
            async with (
                open_websocket_url(proxy.url, subprotocols=["mcp"], extra_headers=alpha) as ws_a,
                open_websocket_url(proxy.url, subprotocols=["mcp"], extra_headers=beta) as ws_b,
            ):
                for ws in (ws_a, ws_b):
                    await ws.send_message(json.dumps(INIT))
                    assert "result" in json.loads(await ws.get_message())
                doc = json.loads(config.read_text())
                del doc["settings"]["authTokens"]["alpha"]
                seen = len(proxy.log)
                config.write_text(json.dumps(doc))
                proxy.process.send_signal(signal.SIGHUP)
                reloaded = trio.current_time()
                with pytest.raises(ConnectionClosed) as closed:
                    await ws_a.get_message()
                closed_in = trio.current_time() - reloaded
                assert closed.value.reason is not None
                assert closed.value.reason.code == 1008
                assert closed.value.reason.reason == "token no longer accepted"
                # trio-websocket 0.12 leaves the TCP stream open when the peer closed first
                # (aclose returns early once a close reason is set): close it for the leak check.
                await ws_a._stream.aclose()
                await ws_b.send_message(json.dumps({"jsonrpc": "2.0", "id": 2, "method": "ping"}))
                assert json.loads(await ws_b.get_message())["id"] == 2
                await proxy.wait_log("its token is no longer accepted", after=seen)
                print(f"\nws session closed {closed_in:.2f} s after the reload signal")
            status, _ = await raw_handshake(proxy.port, {"Authorization": f"Bearer {ALPHA}"})
            assert status == 401
            assert ALPHA not in proxy.text()
            assert BETA not in proxy.text()


def test_handshake_timeout_is_a_checked_duration_with_a_10_s_default() -> None:
    """``settings.handshakeTimeout``: 10 s unless set; a bad value names the field."""
    from mcpvisor.config import ConfigError, parse_config

    assert parse_config({"mcpServers": {}}).settings.handshake_timeout == 10.0
    short = parse_config({"mcpServers": {}, "settings": {"handshakeTimeout": "500ms"}})
    assert short.settings.handshake_timeout == 0.5
    for bad in ("2 weeks", 0, "1h"):
        with pytest.raises(ConfigError) as err:
            parse_config({"mcpServers": {}, "settings": {"handshakeTimeout": bad}}, env={})
        assert 'field "handshakeTimeout"' in str(err.value)
