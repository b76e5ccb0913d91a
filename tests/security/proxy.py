"""A real ``mcpvisor serve`` subprocess on a network front, for the security tests.

`running_proxy` starts it, waits for the banner line that names the URL it bound,
keeps every log line it writes (``--log-level debug``), and stops it with SIGTERM
(SIGKILL after a bound) so the conftest leak check finds nothing.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import trio

from tests.helpers import PY

START_BOUND_S: Final = 60.0
"""Start-up of a proxy with one Python upstream on a busy 2-core box (docs/sdk.md §4: ~1 s idle)."""
STOP_BOUND_S: Final = 15.0
"""SIGTERM to exit, children included (their stop sequence is 2 s + 2 s)."""

INIT: Final = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "security-test", "version": "1"},
    },
}
HTTP_HEADERS: Final = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}

_BANNER = re.compile(r"serving ((?:https?|wss?)://\S+?:(\d+)\S*);")


@dataclass
class Proxy:
    process: trio.Process
    url: str
    port: int
    log: list[str] = field(default_factory=list)
    grew: trio.Event = field(default_factory=trio.Event)
    """Set (and replaced) whenever a log line arrives."""

    def text(self) -> str:
        return "\n".join(self.log)

    async def wait_log(self, needle: str, *, after: int = 0) -> str:
        """The first log line from index ``after`` on that contains ``needle`` (waits for it)."""
        while True:
            for line in self.log[after:]:
                if needle in line:
                    return line
            await self.grew.wait()


def serve_args(config: Path, *extra: str) -> list[str]:
    return [PY, "-m", "mcpvisor", "serve", "--config", str(config), "--log-level", "debug", *extra]


def run_serve(
    config: Path, *extra: str, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``mcpvisor serve`` expecting it to refuse to start (bounded)."""
    return subprocess.run(
        serve_args(config, *extra),
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=START_BOUND_S,
        check=False,
    )


def write(path: Path, doc: Mapping[str, Any]) -> Path:
    path.write_text(json.dumps(doc, indent=2))
    return path


@asynccontextmanager
async def running_proxy(
    config: Path, *extra: str, env: Mapping[str, str] | None = None
) -> AsyncIterator[Proxy]:
    """Start ``mcpvisor serve --config CONFIG EXTRA...`` and yield it once it serves."""
    process = await trio.lowlevel.open_process(
        serve_args(config, *extra),
        env={**os.environ, **(env or {})},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    log: list[str] = []
    proxies: list[Proxy] = []
    found: list[re.Match[str]] = []
    serving = trio.Event()
    ended = trio.Event()

    async def read() -> None:
        assert process.stderr is not None
        buf = b""
        try:
            while chunk := await process.stderr.receive_some(65536):
                *lines, buf = (buf + chunk).split(b"\n")
                for raw in lines:
                    line = raw.decode(errors="replace")
                    log.append(line)
                    m = _BANNER.search(line)
                    if m and not serving.is_set():
                        found.append(m)
                        serving.set()
                if proxies:
                    proxies[0].grew.set()
                    proxies[0].grew = trio.Event()
        finally:
            if buf:
                log.append(buf.decode(errors="replace"))
            ended.set()
            serving.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(read)
        try:
            with trio.fail_after(START_BOUND_S):
                await serving.wait()
            assert found, "the proxy exited before serving:\n" + "\n".join(log)
            m = found[0]
            proxies.append(Proxy(process, m[1], int(m[2]), log))
            yield proxies[0]
        finally:
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
            with trio.move_on_after(STOP_BOUND_S) as scope:
                await process.wait()
                await ended.wait()
            if scope.cancelled_caught:
                process.kill()
                await process.wait()
            nursery.cancel_scope.cancel()
