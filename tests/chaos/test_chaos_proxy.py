"""Chaos through the whole proxy: ``mcpvisor serve`` as a subprocess, a real SDK client
over stdio, real upstream processes, and ``mcpvisor status`` reading it from outside.

* A crash mid-call reaches the client as a prompt error; the circuit opening withdraws
  the server's tools with exactly one ``tools/list_changed`` and the recovery brings
  them back with exactly one; ``mcpvisor status`` shows the crash, the open circuit and
  the recovery (issue points 4, 5, 7).
* The proxy itself SIGKILLed: every process it started (upstreams, their grandchildren,
  the watchdog) dies within seconds (issue point 6).

Bounds are generous real-time ones (a busy 2-core CI box); the conftest's leak check
fails any test that leaves a process behind.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any, Final

import psutil
import pytest
import trio
from mcp.shared.exceptions import MCPError

from mcpvisor.cli import main as cli_main
from mcpvisor.control import ControlError, list_running, request
from tests.helpers import (
    PY,
    SERVERS_DIR,
    Recorder,
    flaky,
    proxy_client,
    text_of,
    write_config,
)
from tests.polling import poll_until

pytestmark = pytest.mark.slow

POLL_S: Final = 0.05
PROXY_BOUND_S: Final = 240.0
"""Bound for a test that starts `mcpvisor serve`: a cold `import mcp` in a child on a
loaded 2-core box has taken 30 s; the test itself takes 10-20 s on a quiet one."""
PROMPT_S: Final = 10.0
"""An answer "at once" in real time on a loaded 2-core box: far below the 60 s timeout."""


def gated(gate: Path, **extra: Any) -> dict[str, Any]:
    """flaky.py behind a gate: while the file ``gate`` exists every start exits with
    status 2 saying "fatal: gate closed" (a server that cannot start until fixed)."""
    script = 'if [ -e "$0" ]; then echo "fatal: gate closed" >&2; exit 2; fi; exec "$1" "$2" --name gated'
    return {"command": "sh", "args": ["-c", script, str(gate), PY, str(SERVERS_DIR / "flaky.py")],
            "protocol": "legacy", **extra}


async def status_of(state_dir: Path) -> dict[str, Any]:
    """The one running proxy's status reply (via the control socket, in a thread)."""

    def ask() -> dict[str, Any]:
        proxies = list_running(state_dir)
        assert len(proxies) == 1, proxies
        return request(proxies[0].socket, "status")

    return await trio.to_thread.run_sync(ask)


async def wait_server(state_dir: Path, name: str, state: str, bound: float = 60.0) -> dict[str, Any]:
    """Poll the proxy's status until server ``name`` is in ``state``; returns that server."""
    with trio.fail_after(bound):
        while True:
            try:
                report = await status_of(state_dir)
            except (ControlError, AssertionError):
                report = {"servers": []}
            for server in report["servers"]:
                if server["name"] == name and server["state"] == state:
                    return server  # type: ignore[no-any-return]
            await trio.sleep(POLL_S)


async def run_status_cli(*args: str) -> tuple[int, str, str]:
    """``mcpvisor status ARGS`` in this process (in a thread); (exit code, stdout, stderr)."""
    import contextlib
    import io

    def run() -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli_main(["status", *args])
        return code, out.getvalue(), err.getvalue()

    return await trio.to_thread.run_sync(run)


@pytest.mark.timeout(PROXY_BOUND_S + 60)
async def test_circuit_opens_and_recovers_with_one_list_changed_each_and_status_shows_it(
        tmp_path: Path) -> None:
    """Through `mcpvisor serve` and a real client: a call in flight when the server is
    SIGKILLed fails promptly; with the server unable to start, the circuit opens and the
    client gets exactly one tools/list_changed (its tools gone); once it can start again
    the trial succeeds and exactly one more list_changed brings them back. A healthy
    server answers throughout. `mcpvisor status` shows each phase."""
    gate = tmp_path / "gate"
    state_dir = tmp_path / "state"
    config = write_config(tmp_path, {
        "ok": flaky(),
        "gated": gated(gate, restartDelay="100ms", restartDelayMax="200ms", circuitFailures=3,
                       circuitOpenFor="3s", restartWait="30s"),
    })
    rec = Recorder()
    with trio.fail_after(PROXY_BOUND_S):
        async with proxy_client(config, "--state-dir", str(state_dir), recorder=rec) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            assert {"ok_echo", "gated_echo", "gated_sleep"} <= names
            ready = await wait_server(state_dir, "gated", "ready")
            code, out, _ = await run_status_cli("--state-dir", str(state_dir))
            assert code == 0
            assert "gated" in out
            assert "ready" in out
            changed_before = rec.list_changed

            gate.touch()
            outcome: list[BaseException] = []

            async def slow_call() -> None:
                try:
                    await client.call_tool("gated_sleep", {"seconds": 60})
                except MCPError as exc:
                    outcome.append(exc)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(slow_call)
                with trio.fail_after(PROMPT_S):
                    async def in_flight() -> bool:
                        return bool((await status_of(state_dir))["servers"][1]["inFlight"])

                    await poll_until(in_flight, every=POLL_S)
                killed = trio.current_time()
                os.kill(ready["pid"], signal.SIGKILL)
            assert trio.current_time() - killed < PROMPT_S
            assert "server gated stopped while handling the request (killed by SIGKILL)" in str(outcome[0])

            down = await wait_server(state_dir, "gated", "circuit_open")
            assert down["circuit"] == "open"
            assert down["retryAt"] is not None
            assert down["lastError"] == "exited with status 2: fatal: gate closed"
            assert down["restarts"] == 3
            with trio.fail_after(PROMPT_S):
                while rec.list_changed < changed_before + 1:
                    await rec.changed.wait()
            names = {t.name for t in (await client.list_tools()).tools}
            assert "gated_echo" not in names
            assert "ok_echo" in names
            code, out, _ = await run_status_cli("--state-dir", str(state_dir), "--format", "json")
            assert code == 0
            shown = {s["name"]: s for s in json.loads(out)[0]["servers"]}
            assert shown["gated"]["state"] == "circuit_open"
            assert shown["ok"]["state"] == "ready"
            assert text_of(await client.call_tool("ok_echo", {"text": "fine"})) == "echo: fine"

            gate.unlink()
            back = await wait_server(state_dir, "gated", "ready")
            assert back["circuit"] == "closed"
            assert back["pid"] != ready["pid"]
            with trio.fail_after(PROMPT_S):
                while rec.list_changed < changed_before + 2:
                    await rec.changed.wait()
            assert text_of(await client.call_tool("gated_echo", {"text": "back"})) == "echo: back"
            await trio.sleep(1)
            assert rec.list_changed == changed_before + 2
            code, out, _ = await run_status_cli("--state-dir", str(state_dir))
            assert code == 0
            assert "closed" in out


def descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def alive(p: psutil.Process) -> bool:
    try:
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.timeout(PROXY_BOUND_S + 60)
async def test_no_process_survives_a_sigkilled_proxy(tmp_path: Path) -> None:
    """Issue point 6: SIGKILL the proxy itself (no cleanup code runs): its upstreams,
    their grandchildren (npx -> node) and the watchdog all die within a few seconds, and
    `mcpvisor status` then finds no running proxy (the stale registration is pruned)."""
    state_dir = tmp_path / "state"
    config = write_config(tmp_path, {"a": flaky("--spawn-grandchild"), "b": flaky("--spawn-grandchild"),
                                     "c": flaky("--ignore-sigterm")})
    log = (tmp_path / "proxy.log").open("wb")
    with trio.fail_after(PROXY_BOUND_S):
        proxy = await trio.lowlevel.open_process(
            [PY, "-m", "mcpvisor", "serve", "--config", str(config), "--state-dir", str(state_dir)],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=log)
        try:
            for name in ("a", "b", "c"):
                await wait_server(state_dir, name, "ready")
            family = descendants(proxy.pid)
            # the watchdog, three servers, two grandchildren
            assert len(family) == 6, [p.cmdline() for p in family]
            proxy.kill()
            await proxy.wait()
            with trio.fail_after(PROMPT_S):
                await poll_until(lambda: not any(alive(p) for p in family), every=POLL_S)
        finally:
            if proxy.returncode is None:
                proxy.kill()
                await proxy.wait()
            log.close()
    assert list_running(state_dir) == []
    assert not list((state_dir / "run").glob("*.json"))
    code, _, err = await run_status_cli("--state-dir", str(state_dir))
    assert code == 1
    assert "no running mcpvisor proxy found" in err
