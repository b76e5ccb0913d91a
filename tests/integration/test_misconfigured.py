"""One bad server stays one bad server, and mcpvisor never runs itself.

Real ``mcpvisor serve`` processes (an SDK client over stdio, or the bare process with its
stdin held open), real fixture upstreams (tests/servers), and the real ``mcpvisor status``
reading the proxy's control socket. A regression shows as a proxy that exits 2 for one
server's unset variable, a server that keeps restarting though it can never start, a
reason that does not say what to fix, or a nested proxy process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import IO, Any

import psutil
import pytest
import trio

from mcpvisor.actors.errors import UpstreamUnavailable
from mcpvisor.control import list_running, request
from mcpvisor.tree import open_supervisor
from tests.helpers import REAL_IO_BOUND_S, flaky, proxy_client, text_of, write_config

PY = sys.executable
MCPVISOR = str(Path(PY).parent / "mcpvisor")
STEP_BOUND_S = 60.0
"""One CLI run on a loaded 2-core machine."""
UNSET = "MCPVISOR_TEST_SURELY_UNSET_PAT"
"""A variable no environment sets: the ``${GITHUB_PAT}`` of the issue."""


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCPVISOR_") or k == "MCPVISOR_TEST_TAG"}
    env.update(MCPVISOR_STATE_DIR=str(tmp_path / "state"), HOME=str(tmp_path))
    env.pop(UNSET, None)
    return env


def _status(tmp_path: Path) -> dict[str, dict[str, Any]]:
    """``mcpvisor status --format json``: the one running proxy's servers by name."""
    done = subprocess.run([PY, "-m", "mcpvisor", "status", "--format", "json"], capture_output=True,
                          text=True, env=_env(tmp_path), timeout=STEP_BOUND_S, check=False)
    assert done.returncode == 0, done.stderr
    (report,) = json.loads(done.stdout)
    return {s["name"]: s for s in report["servers"]}


def _bad_servers() -> dict[str, Any]:
    return {
        "gh": flaky(env={"GITHUB_PERSONAL_ACCESS_TOKEN": f"${{{UNSET}}}"}),
        "ghost": {"command": "mcpvisor-no-such-command-anywhere"},
        "typo": {"comand": "uvx", "args": ["mcp-server-git"]},
    }


async def test_one_bad_server_stays_one_bad_server(tmp_path: Path) -> None:
    """An unset ${VAR}, a command that does not exist, a misspelt field: each of those servers
    is misconfigured with a reason that says what to fix (status, get-server-status), none is
    restarted, and the good server serves (the proxy used to exit 2 for the unset variable,
    so the client lost every server)."""
    config = write_config(tmp_path, {**_bad_servers(), "fine": flaky(), "off": flaky(enabled=False)})
    env = _env(tmp_path)
    with trio.fail_after(REAL_IO_BOUND_S):
        async with proxy_client(config, env=env) as client:
            done = await client.call_tool("fine_echo", {"text": "still here"})
            assert text_of(done) == "echo: still here"
            text = text_of(await client.call_tool("get-server-status", {}))
            status = await trio.to_thread.run_sync(_status, tmp_path)
    assert "- gh: misconfigured" in text
    assert f"environment variable {UNSET} is not set" in text
    assert status["fine"]["state"] == "ready"
    # A server the config disables is listed too (`mcpvisor status` used to leave it out).
    assert (status["off"]["state"], status["off"]["reason"]) == ("disabled", "disabled in the config")
    assert "- off: disabled" in text
    expected = {
        "gh": f'field "env.GITHUB_PERSONAL_ACCESS_TOKEN": environment variable {UNSET} is not set',
        "ghost": "command not found on PATH: mcpvisor-no-such-command-anywhere",
        "typo": 'unknown field "comand" (did you mean "command"?)',
    }
    for name, reason in expected.items():
        assert status[name]["state"] == "misconfigured", status[name]
        assert reason in status[name]["reason"], status[name]
        assert status[name]["starts"] == 0  # no process, and nothing to restart
        assert status[name]["restarts"] == 0


async def test_a_call_to_a_misconfigured_server_names_it_its_state_and_why(tmp_path: Path) -> None:
    """What a caller of one of its tools gets: the server, "misconfigured", and the reason,
    at once (it never waits restartWait for a server that cannot start)."""
    config = write_config(tmp_path, _bad_servers(), restartWait="60s")
    with trio.fail_after(REAL_IO_BOUND_S):
        async with open_supervisor(config, state_dir=tmp_path / "state", watch=False) as sup:
            await sup.wait_ready()
            for name in ("gh", "ghost", "typo"):
                with pytest.raises(UpstreamUnavailable) as info:
                    await sup.upstreams[name].request("tools/call", {"name": "echo", "arguments": {}})
                assert info.value.state == "misconfigured"
                assert info.value.message.startswith(f"server {name} is misconfigured (")


# --- mcpvisor never runs itself ------------------------------------------------------------------


def _read_until(stream: IO[str], needles: set[str]) -> list[str]:
    """Lines of ``stream`` until each of ``needles`` has been in one (fails at EOF)."""
    seen: list[str] = []
    left = set(needles)
    for line in stream:
        seen.append(line)
        left -= {n for n in left if n in line}
        if not left:
            return seen
    raise AssertionError(f"never saw {left}; the process wrote:\n{''.join(seen)}")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project folder whose ./.mcp.json is what `claude mcp add -s project mcpvisor --
    <venv>/bin/mcpvisor serve` writes, plus the same behind a shell, plus a real server."""
    folder = tmp_path / "project"
    folder.mkdir()
    doc = {"mcpServers": {
        "mcpvisor": {"type": "stdio", "command": MCPVISOR, "args": ["serve"], "env": {}},
        "wrapped": {"type": "stdio", "command": "sh", "args": ["-c", f"exec {MCPVISOR} serve"], "env": {}},
        "fine": flaky(),
    }}
    (folder / ".mcp.json").write_text(json.dumps(doc, indent=2))
    return folder


def test_serve_in_a_project_that_lists_mcpvisor_starts_no_nested_proxy(tmp_path: Path, project: Path) -> None:
    """`mcpvisor serve` in a folder whose .mcp.json lists mcpvisor itself (directly, and
    through `sh -c`): both entries are misconfigured with a reason that says it is mcpvisor
    itself, the real server runs, and no nested proxy process exists (there were 10
    nested proxies after 8 s)."""
    argv = [MCPVISOR, "serve"]
    with subprocess.Popen(argv, cwd=project, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, env=_env(tmp_path)) as proxy:
        try:
            assert proxy.stderr is not None
            _read_until(proxy.stderr, {"mcpvisor: starting -> misconfigured",
                                       "wrapped: starting -> misconfigured", "fine: starting -> ready"})
            status = _status(tmp_path)
            nested = [p.cmdline() for p in psutil.Process(proxy.pid).children(recursive=True)
                      if "serve" in p.cmdline()]
        finally:
            assert proxy.stdin is not None
            proxy.stdin.close()
            try:
                proxy.wait(STEP_BOUND_S)
            except subprocess.TimeoutExpired:
                proxy.kill()
                proxy.wait()
    assert nested == []
    assert status["fine"]["state"] == "ready"
    for name in ("mcpvisor", "wrapped"):
        assert status[name]["state"] == "misconfigured", status[name]
        assert "this server is mcpvisor itself" in status[name]["reason"]
        assert status[name]["restarts"] == 0
    assert status["mcpvisor"]["starts"] == 0  # refused before any process was spawned


def test_a_child_mcpvisor_serve_refuses_at_once_naming_its_parent(tmp_path: Path) -> None:
    """The marker route on its own: a `mcpvisor serve` whose environment names a live
    ancestor as its proxy exits 2 before reading any config, saying why."""
    env = {**_env(tmp_path), "MCPVISOR_PARENT": str(os.getpid())}
    done = subprocess.run([MCPVISOR, "serve", "--config", str(tmp_path / "none.json")], capture_output=True,
                          text=True, env=env, stdin=subprocess.DEVNULL, timeout=STEP_BOUND_S, check=False)
    assert done.returncode == 2
    assert f"refusing to serve: started as an upstream server by mcpvisor (pid {os.getpid()})" in done.stderr
    assert "none.json" not in done.stderr  # it never got as far as the config


def test_a_leaked_marker_that_names_no_ancestor_is_ignored(tmp_path: Path) -> None:
    """A marker copied into an unrelated shell (a pid that is not an ancestor) blocks
    nothing: the proxy goes on to read its config."""
    with subprocess.Popen([PY, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE,
                          env=_env(tmp_path)) as stranger:  # alive, and no ancestor of the proxy below
        env = {**_env(tmp_path), "MCPVISOR_PARENT": str(stranger.pid)}
        try:
            done = subprocess.run([MCPVISOR, "serve", "--config", str(tmp_path / "none.json")],
                                  capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL,
                                  timeout=STEP_BOUND_S, check=False)
        finally:
            assert stranger.stdin is not None
            stranger.stdin.close()
            stranger.wait(STEP_BOUND_S)
    assert "refusing to serve" not in done.stderr
    assert "none.json: no such file" in done.stderr


def test_import_skips_an_entry_that_runs_mcpvisor_and_says_so(tmp_path: Path) -> None:
    """`mcpvisor import claude-code` after the README's own Claude Code line (`claude mcp
    add mcpvisor -- mcpvisor serve`) and its uvx form: both skipped with the reason, the
    other server imported (mcpvisor used to import itself as one of its servers)."""
    source = tmp_path / "claude.json"
    source.write_text(json.dumps({"mcpServers": {
        "mcpvisor": {"type": "stdio", "command": "mcpvisor", "args": ["serve"], "env": {}},
        "viauvx": {"type": "stdio", "command": "uvx", "args": ["mcpvisor", "serve"], "env": {}},
        "time": {"type": "stdio", "command": "uvx", "args": ["mcp-server-time"], "env": {}},
    }}))
    target = tmp_path / "mcpvisor.json"
    argv = [PY, "-m", "mcpvisor", "import", "claude-code", str(source), "--config", str(target), "--yes",
            "--format", "json"]
    done = subprocess.run(argv, capture_output=True, text=True, env=_env(tmp_path), stdin=subprocess.DEVNULL,
                          timeout=STEP_BOUND_S, check=False)
    assert done.returncode == 0, done.stderr
    actions = {a["name"]: a for a in json.loads(done.stdout)["actions"]}
    for name in ("mcpvisor", "viauvx"):
        assert actions[name]["action"] == "skip"
        assert actions[name]["reason"].startswith("runs mcpvisor itself")
    assert actions["time"]["action"] == "add"
    assert list(json.loads(target.read_text())["mcpServers"]) == ["time"]


def test_an_exposure_flag_is_not_a_settings_change_at_each_reload(tmp_path: Path) -> None:
    """`serve --exposure all` with "menu" in the file: a reload of the unchanged file applies
    quietly (it logged 'settings "exposure" changed: restart the proxy' every time, since
    the flag was compared with the file)."""
    config = write_config(tmp_path, {}, exposure="menu")
    argv = [MCPVISOR, "serve", "--config", str(config), "--exposure", "all"]
    with subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True, env=_env(tmp_path)) as proxy:
        try:
            assert proxy.stderr is not None
            _read_until(proxy.stderr, {"(exposure all)"})
            (running,) = list_running(tmp_path / "state")
            reply = request(running.socket, "reload", timeout=STEP_BOUND_S)
            logged = _read_until(proxy.stderr, {"config reloaded"})
        finally:
            assert proxy.stdin is not None
            proxy.stdin.close()
            try:
                proxy.wait(STEP_BOUND_S)
            except subprocess.TimeoutExpired:
                proxy.kill()
                proxy.wait()
    assert reply["result"]["ok"], reply
    assert reply["result"]["needsRestart"] == []
    assert not [line for line in logged if "restart the proxy" in line], logged


# --- mcp test judges a server as the proxy will ----------------------------------------------------


def _mcp_test(tmp_path: Path, config: Path, *args: str) -> tuple[int, dict[str, Any]]:
    argv = [PY, "-m", "mcpvisor", "mcp", "test", *args, "--config", str(config), "--format", "json"]
    done = subprocess.run(argv, capture_output=True, text=True, env=_env(tmp_path), stdin=subprocess.DEVNULL,
                          timeout=STEP_BOUND_S, check=False)
    return done.returncode, json.loads(done.stdout)


def test_mcp_test_fails_a_server_slower_than_its_startup_timeout(tmp_path: Path) -> None:
    """A server that needs 2 s with "startupTimeout": "1s" can never start under the proxy:
    `mcp test` says so by default (bounded by that timeout, the hint naming it) and with a
    longer --timeout too (it said OK: its own 15 s bound ignored the entry's)."""
    config = write_config(tmp_path, {"slow": flaky("--slow-start", "2", startupTimeout="1s")})
    code, bounded = _mcp_test(tmp_path, config, "slow")
    assert code == 1
    assert bounded["failure"]["message"].startswith("no answer within 1s")
    assert "startupTimeout" in bounded["failure"]["hint"]
    code, patient = _mcp_test(tmp_path, config, "slow", "--timeout", "20")
    assert code == 1
    assert "past its startupTimeout of 1s" in patient["failure"]["message"]


def test_mcp_test_fails_a_server_that_is_mcpvisor_itself_without_starting_it(tmp_path: Path) -> None:
    """The entry `claude mcp add` writes for mcpvisor: `mcp test` reports what the proxy
    will do with it (refuse it), exit 1, and starts nothing."""
    config = write_config(tmp_path, {"me": {"command": MCPVISOR, "args": ["serve"]}})
    code, report = _mcp_test(tmp_path, config, "me")
    assert code == 1
    assert report["failure"]["kind"] == "misconfigured"
    assert "this server is mcpvisor itself" in report["failure"]["message"]
    assert report["steps"] == []
