"""The control channel (supervisor/control.py): one unix socket per running proxy.

What must hold: a running proxy registers ``run/<pid>.sock`` (0600, in a 0700 dir) and
``run/<pid>.json`` in its state directory and removes both when it stops; one JSON line
per request and per reply; every op answers ``ok`` true or false, never by dropping the
connection or by hurting the proxy; a state directory whose path is too long for a socket
falls back to a short path, an unusable one only costs a warning; `list_running` finds the
live proxies and prunes what a killed one left behind.

The client half (`request`, `list_running`) is synchronous, so these tests call it from a
worker thread while the server runs on the test's trio loop.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from mcpvisor.control import (
    MAX_REQUEST_BYTES,
    ControlError,
    RunningProxy,
    control_dir,
    list_running,
    request,
    serve_control,
)
from mcpvisor.control_ops import status_dict
from mcpvisor.tree import open_supervisor
from tests.fakes.supervisor import StubSupervisor, a_status

BOUND_S = 30.0


async def ask(path: Path, op: str, **args: Any) -> dict[str, Any]:
    return await trio.to_thread.run_sync(lambda: request(path, op, **args))


async def raw_exchange(path: Path, payload: bytes, replies: int) -> list[dict[str, Any]]:
    def run() -> list[dict[str, Any]]:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(10)
            s.connect(os.fspath(path))
            s.sendall(payload)
            data = b""
            while data.count(b"\n") < replies:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
        return [json.loads(line) for line in data.splitlines()]

    return await trio.to_thread.run_sync(run)


async def test_registration_files_exist_while_serving_and_are_removed_after(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with trio.fail_after(BOUND_S):
        async with trio.open_nursery() as nursery:
            path = await nursery.start(lambda task_status: serve_control(
                StubSupervisor(), state, transport="stdio", task_status=task_status))
            pid = os.getpid()
            assert path == control_dir(state) / f"{pid}.sock"
            assert stat.S_ISSOCK(os.stat(path).st_mode)
            assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
            assert stat.S_IMODE(os.stat(control_dir(state)).st_mode) == 0o700
            info = json.loads((control_dir(state) / f"{pid}.json").read_text())
            assert info["pid"] == pid
            assert info["socket"] == str(path)
            assert info["transport"] == "stdio"
            assert info["config"] == "/etc/mcpvisor.json"
            assert info["startedAt"].endswith("Z")
            assert stat.S_IMODE(os.stat(control_dir(state) / f"{pid}.json").st_mode) == 0o600
            found = await trio.to_thread.run_sync(list_running, state)
            assert found == [RunningProxy(pid=pid, socket=path, config="/etc/mcpvisor.json",
                                          started_at=info["startedAt"], transport="stdio")]
            nursery.cancel_scope.cancel()
    assert list(control_dir(state).iterdir()) == []


async def test_status_reports_the_proxy_and_every_server(tmp_path: Path) -> None:
    statuses = [a_status("ok"), a_status("bad", state="circuit_open", circuit="open", uptime=None, restarts=5,
                                         retry_at=trio.current_time() + 30, last_error="exited with status 2",
                                         tool_count=0, pid=None)]
    with trio.fail_after(BOUND_S):
        async with trio.open_nursery() as nursery:
            path = await nursery.start(serve_control, StubSupervisor(statuses), tmp_path)
            reply = await ask(path, "status")
            nursery.cancel_scope.cancel()
    assert reply["ok"] is True
    assert (reply["pid"], reply["config"], reply["exposure"], reply["toolset"]) == (
        os.getpid(), "/etc/mcpvisor.json", "menu", "dev")
    ok, bad = reply["servers"]
    assert ok["name"] == "ok"
    assert ok["state"] == "ready"
    assert ok["uptime"] == 5.0
    assert ok["retryAt"] is None
    assert (bad["state"], bad["circuit"], bad["restarts"], bad["lastError"], bad["toolCount"]) == (
        "circuit_open", "open", 5, "exited with status 2", 0)
    assert bad["retryAt"].endswith("Z")
    assert 0 < bad["retryInSeconds"] <= 30


def test_status_dict_turns_trio_times_into_wall_times() -> None:
    d = status_dict(a_status(since=90.0, retry_at=130.0), now=100.0, wall_now=1_800_000_000.0)
    assert d["since"] == "2027-01-15T08:00:00.000Z".replace("08:00:00", "07:59:50")
    assert d["retryAt"] == "2027-01-15T08:00:30.000Z"
    assert d["retryInSeconds"] == 30.0
    assert set(d) >= {"name", "state", "uptime", "restarts", "circuit", "retryAt", "lastError", "toolCount"}


async def test_equip_unequip_reload_answer_ok_or_say_why_not(tmp_path: Path) -> None:
    sup = StubSupervisor()
    with trio.fail_after(BOUND_S):
        async with trio.open_nursery() as nursery:
            path = await nursery.start(serve_control, sup, tmp_path)
            reply = await ask(path, "equip", name="dev")
            assert reply == {"ok": True, "result": {"equipped": "dev", "tools": ["a", "b"]}}
            with pytest.raises(ControlError, match="no toolset named 'missing'") as info:
                await ask(path, "equip", name="missing")
            assert info.value.reply is not None
            assert info.value.reply["errorType"] == "LookupError"
            with pytest.raises(ControlError, match='equip needs "name"'):
                await ask(path, "equip")
            with pytest.raises(ControlError, match=r"toolsets arrive with supervisor/menu\.py"):
                await ask(path, "unequip")
            assert (await ask(path, "reload"))["result"] == {"changed": []}
            assert (await ask(path, "ping"))["pid"] == os.getpid()
            with pytest.raises(ControlError, match="unknown op 'explode'"):
                await ask(path, "explode")
            nursery.cancel_scope.cancel()
    assert sup.equip_calls == ["dev", "missing"]


async def test_bad_requests_get_an_error_and_the_connection_stays_usable(tmp_path: Path) -> None:
    with trio.fail_after(BOUND_S):
        async with trio.open_nursery() as nursery:
            path = await nursery.start(serve_control, StubSupervisor(), tmp_path)
            payload = (b"not json\n[1, 2]\n" + b"x" * (MAX_REQUEST_BYTES + 10) + b"\n"
                       + b'{"op": "ping"}\n')
            replies = await raw_exchange(path, payload, 4)
            nursery.cancel_scope.cancel()
    assert [r["ok"] for r in replies] == [False, False, False, True]
    assert replies[0]["error"].startswith("not JSON")
    assert "JSON object" in replies[1]["error"]
    assert "longer than" in replies[2]["error"]


async def test_a_state_dir_too_long_for_a_socket_falls_back_to_a_short_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runtime = tmp_path / "rt"
    runtime.mkdir()
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    state = tmp_path / ("d" * 120)
    with trio.fail_after(BOUND_S):
        async with trio.open_nursery() as nursery:
            path = await nursery.start(serve_control, StubSupervisor(), state)
            assert path == runtime / "mcpvisor" / f"{os.getpid()}.sock"
            found = await trio.to_thread.run_sync(list_running, state)
            assert [p.socket for p in found] == [path]
            assert (await ask(found[0].socket, "ping"))["ok"]
            nursery.cancel_scope.cancel()
    assert not path.exists()


async def test_an_unusable_state_dir_costs_a_warning_not_the_proxy(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The state 'directory' is a file: no control channel, a warning, and a supervisor
    that runs normally."""
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    caplog.set_level(logging.WARNING, logger="mcpvisor.control")
    with trio.fail_after(BOUND_S):
        async with trio.open_nursery() as nursery:
            assert await nursery.start(serve_control, StubSupervisor(), not_a_dir) is None
        config = {"mcpServers": {}, "settings": {"exposure": "all"}}
        async with open_supervisor(config, state_dir=tmp_path / "state", watch=False,
                                   control=not_a_dir) as sup:
            assert sup.status() == []
    assert "`mcpvisor status` will not see" in caplog.text


async def test_open_supervisor_serves_the_control_socket_for_its_lifetime(tmp_path: Path) -> None:
    config = {"mcpServers": {}, "settings": {"exposure": "all"}}
    with trio.fail_after(BOUND_S):
        async with open_supervisor(config, state_dir=tmp_path / "state", watch=False,
                                   control=tmp_path / "state", control_transport="http"):
            [proxy] = await trio.to_thread.run_sync(list_running, tmp_path / "state")
            reply = await ask(proxy.socket, "status")
            assert proxy.transport == "http"
            assert reply["servers"] == []
            assert reply["exposure"] == "all"
        assert await trio.to_thread.run_sync(list_running, tmp_path / "state") == []


def test_list_running_prunes_what_dead_proxies_left(tmp_path: Path) -> None:
    run = control_dir(tmp_path)
    run.mkdir(parents=True)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    dead_pid = int(dead.stdout)
    stale_sock = run / f"{dead_pid}.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.bind(os.fspath(stale_sock))  # bound, never listening: like a SIGKILLed proxy's
    (run / f"{dead_pid}.json").write_text(json.dumps({"pid": dead_pid, "socket": str(stale_sock)}))
    (run / "1.json").write_text(json.dumps({"pid": os.getpid(), "socket": str(run / "nothing.sock")}))
    (run / "junk.json").write_text("{not json")
    assert list_running(tmp_path) == []
    assert sorted(p.name for p in run.iterdir()) == ["junk.json"]


def test_request_to_nothing_or_to_a_silent_peer_is_a_control_error(tmp_path: Path) -> None:
    with pytest.raises(ControlError, match="no proxy is listening"):
        request(tmp_path / "absent.sock", "status")
    silent = tmp_path / "silent.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.bind(os.fspath(silent))
        s.listen(1)
        with pytest.raises(ControlError, match=r"did not answer 'status' within 0.3s"):
            request(silent, "status", timeout=0.3)
