"""The config a new user writes on their first hour, and a client that sees every frame.

* `real_config`: nine servers as their READMEs configure them — the npm reference
  servers (filesystem, memory, everything, sequential-thinking) and the PyPI ones
  (time, git, fetch), pinned and installed by ``tests/setup.sh`` and the ``test``
  extra — plus our fixtures: ``slow`` (takes `SLOW_START_S` to answer ``initialize``)
  and ``broken`` (exits at once, so its circuit opens).
* `servers_or_skip`: the npm servers' ``node_modules/.bin``; missing, the test is
  skipped saying how to install them, except with ``CI=true``, where that is a failure.
* `LineClient`: ``mcpvisor serve`` as a subprocess over its real stdio pipes, spoken to
  in raw JSON-RPC lines, remembering when each response and notification arrived (the
  SDK's client would hide the order of notifications and answers).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

import pytest
import trio

from tests.helpers import PY, SERVERS_DIR, TESTS_DIR

NPM_BIN: Final = TESTS_DIR / "npm-servers" / "node_modules" / ".bin"
VENV_BIN: Final = Path(PY).parent

SLOW_START_S: Final = 16.0
"""How long ``slow`` takes to start: past Claude Code's ~5 s health check and past the
default ``startupWait`` (10 s), as the slow server of issue 25 did, and past `COLD_WAIT`."""

COLD_WAIT: Final = "14s"
"""``startupWait`` of the cold start with nine real servers: room for the npm servers to
list on a loaded 2-core machine (10 s was not always enough), still short of `SLOW_START_S`."""

SLOW_WAIT: Final = "40s"
"""``restartWait`` of the slow servers: a call made while one starts waits for it."""

NPM_SERVERS: Final = ("mcp-server-filesystem", "mcp-server-memory", "mcp-server-everything",
                      "mcp-server-sequential-thinking")


def servers_or_skip() -> Path:
    """The installed npm servers' bin directory (skip, or fail under ``CI=true``, without it)."""
    missing = [name for name in (*NPM_SERVERS, "claude") if not (NPM_BIN / name).exists()]
    missing += [name for name in ("mcp-server-time", "mcp-server-git", "mcp-server-fetch")
                if not (VENV_BIN / name).exists()]
    if missing:
        problem = (f"{', '.join(missing)} not installed: run tests/setup.sh and "
                   f"pip install -e '.[test]'")
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true: {problem}")
        pytest.skip(problem)
    return NPM_BIN


def slow(name: str, *flags: str) -> dict[str, Any]:
    return {"command": PY, "args": [str(SERVERS_DIR / "flaky.py"), "--name", name,
                                    "--slow-start", f"{SLOW_START_S:g}", *flags],
            "protocol": "legacy", "restartWait": SLOW_WAIT}


def real_config(tmp: Path, *, slow_servers: Mapping[str, dict[str, Any]] | None = None,
                drop: tuple[str, ...] = (), broken: bool = True, **settings: Any) -> Path:
    """Write ``tmp/mcpvisor.json``: the nine servers (``drop`` leaves some out), the slow
    ones (default: ``slow``), and ``broken`` unless told not to; returns its path."""
    root = tmp / "files"
    root.mkdir(exist_ok=True)
    (root / "hello.txt").write_text("hello\n")
    repo = tmp / "repo"
    if not (repo / ".git").exists():
        repo.mkdir(exist_ok=True)
        subprocess.run(["git", "init", "-q", str(repo)], check=True)
    servers: dict[str, Any] = {
        "fs": {"command": str(NPM_BIN / "mcp-server-filesystem"), "args": [str(root)]},
        "memory": {"command": str(NPM_BIN / "mcp-server-memory"),
                   "env": {"MEMORY_FILE_PATH": str(tmp / "memory.jsonl")}},
        "everything": {"command": str(NPM_BIN / "mcp-server-everything")},
        "thinking": {"command": str(NPM_BIN / "mcp-server-sequential-thinking")},
        "time": {"command": str(VENV_BIN / "mcp-server-time"), "args": ["--local-timezone", "UTC"]},
        "git": {"command": str(VENV_BIN / "mcp-server-git"), "args": ["--repository", str(repo)]},
        "fetch": {"command": str(VENV_BIN / "mcp-server-fetch")},
        "ours": {"command": PY, "args": [str(SERVERS_DIR / "everything.py"), "--name", "ours"]},
    }
    servers.update(slow_servers if slow_servers is not None else {"slow": slow("slow")})
    if broken:
        servers["broken"] = {"command": PY, "args": [str(SERVERS_DIR / "flaky.py"), "--exit-at-start", "1",
                                                     "--stderr-text", "fatal: no API key"],
                             "protocol": "legacy", "circuitFailures": 1, "circuitOpenFor": "5m"}
    for name in drop:
        servers.pop(name)
    settings.setdefault("exposure", "all")
    path = tmp / "mcpvisor.json"
    path.write_text(json.dumps({"mcpServers": servers, "settings": settings}, indent=2))
    return path


class LineClient:
    """A raw JSON-RPC client of ``mcpvisor serve`` over its stdio."""

    def __init__(self, process: trio.Process) -> None:
        self.process = process
        self.t0 = trio.current_time()
        self.answers: dict[int, tuple[float, dict[str, Any]]] = {}
        self.notifications: list[tuple[float, str]] = []
        self._arrived = trio.Event()
        self._ids = 0

    def list_changed(self, kind: str = "tools") -> list[float]:
        """When each ``notifications/<kind>/list_changed`` arrived (seconds after the spawn)."""
        return [t for t, m in self.notifications if m == f"notifications/{kind}/list_changed"]

    async def _read(self) -> None:
        assert self.process.stdout is not None
        buf = b""
        while chunk := await self.process.stdout.receive_some(1 << 16):
            *lines, buf = (buf + chunk).split(b"\n")
            for line in lines:
                if not line.strip():
                    continue
                message = json.loads(line)
                at = trio.current_time() - self.t0
                if "id" in message and "method" not in message:
                    self.answers[message["id"]] = (at, message)
                elif "method" in message:
                    self.notifications.append((at, message["method"]))
                self._arrived.set()
                self._arrived = trio.Event()

    async def send(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send_all(json.dumps(message).encode() + b"\n")

    async def request(self, method: str, params: dict[str, Any] | None = None) -> int:
        """Send a request; returns its id (`answer` waits for the reply)."""
        self._ids += 1
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": self._ids, "method": method}
        if params is not None:
            message["params"] = params
        await self.send(message)
        return self._ids

    async def answer(self, rid: int) -> dict[str, Any]:
        while rid not in self.answers:
            await self._arrived.wait()
        return self.answers[rid][1]

    async def call(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        return await self.answer(await self.request(method, params))

    async def handshake(self) -> tuple[float, dict[str, Any]]:
        """initialize + initialized; (seconds from asking to the answer, the answer)."""
        asked = trio.current_time()
        init = await self.call("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                              "clientInfo": {"name": "first-hour", "version": "1"}})
        took = trio.current_time() - asked
        await self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return took, init

    async def timed(self, method: str, params: dict[str, Any] | None = None) -> tuple[float, dict[str, Any]]:
        """(seconds from asking to the answer, the answer)."""
        asked = trio.current_time()
        answer = await self.call(method, params)
        return trio.current_time() - asked, answer

    async def tools(self) -> list[str]:
        return [t["name"] for t in (await self.call("tools/list"))["result"]["tools"]]


@asynccontextmanager
async def serve(config: Path, state: Path, log: Path) -> AsyncIterator[LineClient]:
    """``mcpvisor serve`` on ``config`` as a subprocess, its stderr in ``log``; stopped
    (stdin closed, then killed if it lingers) when the block ends."""
    with log.open("ab") as err:
        process = await trio.lowlevel.open_process(
            [PY, "-m", "mcpvisor", "serve", "--config", str(config), "--state-dir", str(state)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err)
    client = LineClient(process)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(client._read)
            yield client
            assert process.stdin is not None
            await process.stdin.aclose()  # the client leaves: the proxy stops its servers and exits
            with trio.move_on_after(20):
                await process.wait()
            nursery.cancel_scope.cancel()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
