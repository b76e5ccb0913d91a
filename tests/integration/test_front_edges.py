"""The stdio front at the edges: bad input from a client, servers that cannot start,
bad configs, the environment upstreams get, and what is left after the proxy stops."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import psutil
import pytest
import trio

from mcpvisor import open_supervisor
from tests.helpers import (
    PY,
    REAL_IO_BOUND_S,
    embedded_client,
    embedded_front,
    everything,
    flaky,
    read_record,
    text_of,
    write_config,
)
from tests.polling import poll_until

pytestmark = pytest.mark.slow


class RawClient:
    """Speaks newline-delimited JSON-RPC to the proxy's stdio front, byte by byte."""

    def __init__(self, send: trio.abc.SendStream, receive: trio.abc.ReceiveStream) -> None:
        self._send = send
        self._receive = receive
        self._buf = b""

    async def send(self, data: bytes | dict[str, Any]) -> None:
        line = data if isinstance(data, bytes) else json.dumps(data).encode()
        await self._send.send_all(line + b"\n")

    async def receive(self) -> dict[str, Any]:
        """The next reply or request; notifications the proxy sends on its own (a late
        upstream's ``list_changed``, log messages) are skipped."""
        while True:
            while b"\n" not in self._buf:
                chunk = await self._receive.receive_some(65536)
                assert chunk, "the proxy closed its stdout"
                self._buf += chunk
            line, self._buf = self._buf.split(b"\n", 1)
            msg: dict[str, Any] = json.loads(line)
            if "method" not in msg or "id" in msg:
                return msg

    async def receive_id(self, request_id: Any) -> dict[str, Any]:
        while True:
            msg = await self.receive()
            if msg.get("id") == request_id and "method" not in msg:
                return msg

    async def handshake(self) -> None:
        await self.send({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                         "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                                    "clientInfo": {"name": "raw", "version": "1"}}})
        reply = await self.receive_id(0)
        assert reply["result"]["serverInfo"]["name"] == "mcpvisor"
        await self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})


@asynccontextmanager
async def raw_proxy(config: Path) -> AsyncIterator[RawClient]:
    """Raw bytes to the stdio front `mcpvisor serve` uses, the proxy in this process."""
    async with embedded_front(config) as (send, receive):
        yield RawClient(send, receive)


async def test_malformed_input_gets_json_rpc_errors_and_the_proxy_keeps_serving(tmp_path: Path) -> None:
    """Non-JSON -> -32700 with a null id; a batch -> -32600; a request with a null id ->
    -32600; a reused in-flight id -> -32600 while the first completes; an unknown method ->
    -32601 with its id; a malformed notification -> nothing at all. The next valid request
    is served (docs/reliability.md P1-P4, P7, P8, P20)."""
    config = write_config(tmp_path, {"fl": flaky()})
    with trio.fail_after(REAL_IO_BOUND_S):
        async with raw_proxy(config) as raw:
            await raw.handshake()
            await raw.send(b"{this is not json")
            reply = await raw.receive()
            assert reply["id"] is None
            assert reply["error"]["code"] == -32700
            await raw.send(b'[{"jsonrpc": "2.0", "id": 5, "method": "ping"}]')
            reply = await raw.receive()
            assert reply["id"] is None
            assert reply["error"]["code"] == -32600
            await raw.send({"jsonrpc": "2.0", "id": None, "method": "ping"})
            reply = await raw.receive()
            assert reply["error"]["code"] == -32600
            await raw.send({"jsonrpc": "2.0", "method": "notifications/whatever", "params": 12})
            await raw.send({"jsonrpc": "2.0", "id": 7, "method": "no/such/method"})
            reply = await raw.receive()
            assert reply.keys() == {"jsonrpc", "id", "error"}, reply
            assert reply["id"] == 7, reply
            assert reply["error"]["code"] == -32601
            await raw.send({"jsonrpc": "2.0", "id": 8, "method": "tools/call",
                            "params": {"name": "fl_sleep", "arguments": {"seconds": 1}}})
            await raw.send({"jsonrpc": "2.0", "id": 8, "method": "ping"})
            reused = await raw.receive()
            assert reused["id"] == 8
            assert reused["error"]["code"] == -32600
            first = await raw.receive_id(8)
            assert "result" in first
            await raw.send({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                            "params": {"name": "fl_echo", "arguments": {"text": "still here"}}})
            reply = await raw.receive_id(9)
            assert reply["result"]["content"][0]["text"] == "echo: still here"


async def test_a_pipelined_call_never_overtakes_the_initialize_reply(tmp_path: Path) -> None:
    """initialize, notifications/initialized and a tools/call written in one burst: the
    initialize answer comes first (the fast path opens only after the handshake)."""
    config = write_config(tmp_path, {"fl": flaky()})
    with trio.fail_after(REAL_IO_BOUND_S):
        async with raw_proxy(config) as raw:
            burst = [
                {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                 "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                            "clientInfo": {"name": "raw", "version": "1"}}},
                {"jsonrpc": "2.0", "method": "notifications/initialized"},
                {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                 "params": {"name": "fl_echo", "arguments": {"text": "x"}}},
            ]
            await raw.send(b"\n".join(json.dumps(m).encode() for m in burst))
            first = await raw.receive()
            assert first["id"] == 1
            assert "result" in first
            second = await raw.receive_id(2)
            assert "result" in second


async def test_a_server_that_cannot_start_is_reported_and_the_others_serve(tmp_path: Path) -> None:
    """A missing command and a server that exits at once never take the proxy down; their
    status says why, with the exit status and the last stderr line."""
    config = write_config(tmp_path, {
        "missing": {"command": "no-such-command-anywhere", "args": []},
        "dies": flaky("--exit-at-start", "3", "--stderr-text", "fatal: no API key"),
        "fine": flaky(),
    }, startupWait="30s")
    with trio.fail_after(REAL_IO_BOUND_S):
        async with open_supervisor(config) as sup:
            await sup.wait_ready(30)
            assert (await sup.call_tool("fine_echo", {"text": "ok"}))["content"][0]["text"] == "echo: ok"
            status = {s.name: s for s in sup.status()}
            assert status["fine"].state == "ready"
            missing = status["missing"].last_error or ""
            assert "command not found" in missing
            assert "no-such-command-anywhere" in missing
            dies = status["dies"].last_error or ""
            assert "exited with status 3" in dies
            assert "fatal: no API key" in dies


async def test_an_unreadable_config_exits_2_naming_the_file_and_the_place(tmp_path: Path) -> None:
    """A file that is not JSON cannot be served at all (one bad server entry only makes that
    server misconfigured: tests/integration/test_misconfigured.py)."""
    config = tmp_path / "mcpvisor.json"
    config.write_text('{"mcpServers": {"git": {"command": "uvx",}}}')
    with trio.fail_after(REAL_IO_BOUND_S):
        done = await trio.run_process([PY, "-m", "mcpvisor", "serve", "--config", str(config)],
                                      stdin=subprocess.DEVNULL, capture_stdout=True, capture_stderr=True,
                                      check=False)
    assert done.returncode == 2
    assert "mcpvisor.json" in done.stderr.decode()
    assert "line 1" in done.stderr.decode()
    assert done.stdout == b""


async def test_upstreams_get_the_proxys_environment_plus_their_env(tmp_path: Path) -> None:
    """PATH and the user's own variables reach the server, and its `env` is added on top."""
    script = tmp_path / "envcheck.py"
    script.write_text(
        "import os, sys, runpy\n"
        "open(os.environ['ENV_OUT'], 'w').write(os.environ.get('PATH','') + '\\n' "
        "+ os.environ.get('MY_KEY','') + '\\n' + os.environ.get('FROM_CONFIG',''))\n"
        f"sys.argv = [{str(Path(__file__).parents[1] / 'servers' / 'flaky.py')!r}]\n"
        "runpy.run_path(sys.argv[0], run_name='__main__')\n"
    )
    out = tmp_path / "env.txt"
    config = write_config(tmp_path, {"e": {"command": PY, "args": [str(script)], "protocol": "legacy",
                                           "env": {"FROM_CONFIG": "yes", "ENV_OUT": str(out)}}})
    os.environ["MY_KEY"] = "secret-from-the-user"
    try:
        with trio.fail_after(REAL_IO_BOUND_S):
            async with open_supervisor(config) as sup:
                assert await sup.wait_ready(60) == []
    finally:
        del os.environ["MY_KEY"]
    path, key, from_config = out.read_text().split("\n")
    assert path == os.environ["PATH"]
    assert key == "secret-from-the-user"
    assert from_config == "yes"


async def test_protocol_legacy_skips_the_2026_probe(tmp_path: Path) -> None:
    """`"protocol": "legacy"` goes straight to initialize: the server never sees server/discover
    (so an old server that ignores unknown methods does not cost the 10 s probe)."""
    record = tmp_path / "rec.jsonl"
    config = write_config(tmp_path, {"ev": everything("--record", str(record), protocol="legacy")})
    with trio.fail_after(REAL_IO_BOUND_S):
        async with open_supervisor(config) as sup:
            assert await sup.wait_ready(60) == []
    events = [e["event"] for e in read_record(record)]
    assert "initialize" in events
    assert "discover" not in events


async def test_the_first_list_waits_for_start_up_and_late_servers_arrive_by_list_changed(
        tmp_path: Path) -> None:
    """With startupWait shorter than a slow server's start, the first tools/list comes back
    without it, and its tools arrive later with a list_changed."""
    from tests.helpers import Recorder

    config = write_config(tmp_path, {"quick": flaky(), "slow": flaky("--slow-start", "4")}, startupWait="1s")
    rec = Recorder()
    with trio.fail_after(REAL_IO_BOUND_S):
        async with embedded_client(config, recorder=rec) as client:
            first = {t.name for t in (await client.list_tools()).tools}
            if "slow_echo" not in first:  # on a very slow machine the quick one may be late too
                await rec.changed.wait()
                while "slow_echo" not in {t.name for t in (await client.list_tools()).tools}:
                    await rec.changed.wait()
            assert text_of(await client.call_tool("slow_echo", {"text": "late"})) == "echo: late"


@pytest.mark.parametrize("how", ["stdin-closed", "SIGTERM", "SIGINT"])
async def test_stopping_the_proxy_leaves_no_child(tmp_path: Path, how: str) -> None:
    """Whichever way the proxy is stopped, its upstreams (and their grandchildren) go too."""
    config = write_config(tmp_path, {"a": flaky("--spawn-grandchild"), "b": flaky()})
    proc = await trio.lowlevel.open_process([PY, "-m", "mcpvisor", "serve", "--config", str(config)],
                                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                            stderr=subprocess.PIPE)
    try:
        me = psutil.Process(proc.pid)
        def running() -> list[psutil.Process]:
            return me.children(recursive=True)

        def command(p: psutil.Process) -> str:
            try:
                return " ".join(p.cmdline())
            except psutil.Error:  # exited (or a zombie) between the listing and this look
                return ""

        with trio.fail_after(REAL_IO_BOUND_S):
            def all_started() -> bool:
                listed = [command(c) for c in running()]
                return (len([c for c in listed if "flaky" in c]) >= 2
                        and any("sleep(3600)" in c for c in listed))

            await poll_until(all_started, every=0.1)
        tree = running()
        if how == "stdin-closed":
            assert proc.stdin is not None
            await proc.stdin.aclose()
        else:
            proc.send_signal(signal.SIGTERM if how == "SIGTERM" else signal.SIGINT)
        with trio.fail_after(30):
            assert await proc.wait() == 0
        _, alive = await trio.to_thread.run_sync(lambda: psutil.wait_procs(tree, timeout=10))
        assert alive == [], f"left behind: {[p.cmdline() for p in alive]}"
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                await stream.aclose()


def test_help_lists_serve_with_an_example() -> None:
    done = subprocess.run([sys.executable, "-m", "mcpvisor", "serve", "--help"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0
    assert "examples:" in done.stdout
    assert "--transport" in done.stdout
    # A long example is continued with a shell backslash, not joined into one run of spaces.
    assert "--token-file ~/.mcpvisor-token \\\n      --certfile cert.pem" in done.stdout
