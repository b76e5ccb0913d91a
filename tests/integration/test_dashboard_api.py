"""The dashboard's JSON API over real loopback HTTP, against ``mcpvisor serve`` with real
subprocess servers: what a script sees, what it may change, and what it is refused."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import httpx2
import pytest
import trio
from trio_websocket import open_websocket_url

from mcpvisor.config import demo_config_path
from tests.helpers import REAL_IO_BOUND_S, http_client, write_config
from tests.integration.dashboard import SECRET, flaky_entry, fleet, private, server_state, serving

CONFIG_TOKEN = "config-token-0123456789abcdef"

pytestmark = pytest.mark.timeout(REAL_IO_BOUND_S + 60)  # the tests bound themselves; this is the backstop


async def test_reading_shows_every_server_and_hides_secrets(tmp_path: Path) -> None:
    with trio.fail_after(REAL_IO_BOUND_S):
        async with serving(tmp_path, fleet(tmp_path)) as dash, http_client() as http:
            assert private(dash.token_file)
            assert f"{dash.base}/login?token={dash.token}" in dash.proxy.text()  # the login URL is printed
            assert (await http.get(f"{dash.base}/healthz")).json() == {"status": "ok"}
            listing = await http.get(f"{dash.base}/api/servers")
            assert listing.status_code == 200
            rows = {row["name"]: row for row in listing.json()["servers"]}
            assert rows["alpha"]["entry"]["env"] == {"API_KEY": "***"}
            assert rows["alpha"]["status"]["state"] == "ready"
            assert rows["alpha"]["status"]["toolCount"] > 0
            assert rows["beta"]["status"]["state"] == "ready"
            status = (await http.get(f"{dash.base}/api/status")).json()
            assert status["exposure"] == "all"
            assert {s["name"] for s in status["servers"]} == {"alpha", "beta"}
            for path in ("/api/servers", "/api/servers/alpha", "/api/status", "/"):
                assert SECRET not in (await http.get(dash.base + path)).text
            missing = await http.get(f"{dash.base}/api/servers/nope")
            assert missing.status_code == 404
            assert "error" in missing.json()


async def test_changes_need_the_token_and_the_proxy_applies_them(tmp_path: Path) -> None:
    with trio.fail_after(REAL_IO_BOUND_S):
        async with serving(tmp_path, fleet(tmp_path)) as dash, http_client() as http:
            api = f"{dash.base}/api/servers"
            before = dash.config.read_text()
            gamma = {"name": "gamma", "entry": flaky_entry("gamma")}
            refused = await http.post(api, json=gamma)
            assert refused.status_code == 401
            wrong = await http.post(api, json=gamma, headers={"Authorization": "Bearer not-the-token"})
            assert wrong.status_code == 401
            foreign = await http.post(api, json=gamma, headers={**dash.auth(), "Origin": "http://evil.example"})
            assert foreign.status_code == 403
            rebound = await http.post(api, json=gamma, headers={**dash.auth(), "Host": "evil.example"})
            assert rebound.status_code == 421
            assert dash.config.read_text() == before

            bad = await http.post(api, json={"name": "delta", "entry": {"command": "/no/such/mcp-server"}},
                                  headers=dash.auth())
            assert bad.status_code == 422
            assert bad.json()["fields"] == {"command": "command not found: /no/such/mcp-server"}
            bad_args = await http.post(api, json={"name": "delta", "entry": {"command": "x", "args": "a b"}},
                                       headers=dash.auth())
            assert bad_args.status_code == 422  # the message `mcpvisor mcp add-json` prints
            assert bad_args.json()["fields"] == {"args": 'field "args": expected a list, got a string'}
            bad_name = await http.post(api, json={"name": "no spaces", "entry": flaky_entry("x")},
                                       headers=dash.auth())
            assert bad_name.status_code == 422
            assert "name" in bad_name.json()["fields"]
            assert (await http.post(api, content=b"{not json", headers=dash.auth())).status_code == 400
            assert dash.config.read_text() == before

            added = await http.post(api, json=gamma, headers=dash.auth())
            assert added.status_code == 201, added.text
            assert added.json()["reload"]["added"] == ["gamma"]
            assert await server_state(http, dash.base, "gamma") == "ready"
            again = await http.post(api, json=gamma, headers=dash.auth())
            assert again.status_code == 409

            edit = {"entry": {**dash.file_entry("alpha"), "env": {"API_KEY": "***", "EXTRA": "1"}}}
            edited = await http.put(f"{api}/alpha", json=edit, headers=dash.auth())
            assert edited.status_code == 200, edited.text
            assert edited.json()["entry"]["env"] == {"API_KEY": "***", "EXTRA": "***"}
            assert dash.file_entry("alpha")["env"] == {"API_KEY": SECRET, "EXTRA": "1"}  # *** kept the value
            assert edited.json()["reload"]["restarted"] == ["alpha"]
            unknown = await http.put(f"{api}/alpah", json=edit, headers=dash.auth())
            assert unknown.status_code == 404
            assert "alpha" in unknown.json()["suggestions"]

            off = await http.post(f"{api}/beta/disable", headers=dash.auth())
            assert off.status_code == 200
            assert off.json()["changed"] is True
            assert dash.file_entry("beta")["enabled"] is False
            assert await server_state(http, dash.base, "beta") == "disabled"
            on = await http.post(f"{api}/beta/enable", headers=dash.auth())
            assert on.status_code == 200
            assert "enabled" not in dash.file_entry("beta")
            assert await server_state(http, dash.base, "beta") == "ready"

            removed = await http.delete(f"{api}/gamma", headers=dash.auth())
            assert removed.status_code == 200
            assert removed.json()["reload"]["removed"] == ["gamma"]
            assert dash.file_entry("gamma") is None
            assert (await http.get(f"{api}/gamma")).status_code == 404
            assert (await http.delete(f"{api}/gamma", headers=dash.auth())).status_code == 404


async def test_the_bundled_demo_config_is_never_edited(tmp_path: Path) -> None:
    """Under ``serve --demo`` the page and the API show the servers but refuse changes
    (409, saying what to do instead): the demo config is package data, and an add used to
    rewrite it for every later demo."""
    demo = demo_config_path()
    before = demo.read_bytes()
    gamma = {"name": "gamma", "entry": flaky_entry("gamma")}
    try:
        with trio.fail_after(REAL_IO_BOUND_S):
            async with serving(tmp_path, demo) as dash, httpx2.AsyncClient(timeout=60) as http:
                api = f"{dash.base}/api/servers"
                listing = (await http.get(api)).json()
                assert listing["configEditable"] is False
                assert {row["name"] for row in listing["servers"]} == {"notes", "calc", "text"}
                added = await http.post(api, json=gamma, headers=dash.auth())
                assert added.status_code == 409
                assert "bundled demo config" in added.json()["error"]
                assert (await http.post(f"{api}/calc/disable", headers=dash.auth())).status_code == 409
                assert (await http.delete(f"{api}/calc", headers=dash.auth())).status_code == 409
                assert await server_state(http, dash.base, "calc") == "ready"
        assert demo.read_bytes() == before
    finally:
        if demo.read_bytes() != before:  # a regression must not leave the checkout edited
            demo.write_bytes(before)


async def test_test_runs_the_mcp_test_probe(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"beta": flaky_entry("beta"),
                                     "broken": flaky_entry("broken", "--exit-at-start", "3",
                                                           "--stderr-text", "API_KEY is not set")})
    with trio.fail_after(REAL_IO_BOUND_S):
        async with serving(tmp_path, config) as dash, httpx2.AsyncClient(timeout=60) as http:
            api = f"{dash.base}/api/servers"
            assert (await http.post(f"{api}/beta/test")).status_code == 401
            ok = (await http.post(f"{api}/beta/test", headers=dash.auth())).json()
            assert ok["ok"] is True
            assert [s["name"] for s in ok["steps"]] == ["spawn", "initialize", "tools/list"]
            assert ok["toolCount"] == len(ok["tools"]) > 0
            failed = (await http.post(f"{api}/broken/test", headers=dash.auth())).json()
            assert failed["ok"] is False
            assert failed["failure"]["kind"] == "exited"
            assert failed["failure"]["status"] == 3
            assert "API_KEY is not set" in "\n".join(failed["failure"]["stderr"])
            assert (await http.post(f"{api}/nope/test", headers=dash.auth())).status_code == 404


async def test_the_live_feed_reports_a_crash_and_the_restart(tmp_path: Path) -> None:
    """``/api/events`` sends a snapshot, then beta's crash and its recovery as they happen;
    a foreign Origin is refused at the handshake."""
    with trio.fail_after(REAL_IO_BOUND_S):
        async with serving(tmp_path, fleet(tmp_path)) as dash, http_client() as http:
            ws_url = f"ws://127.0.0.1:{dash.proxy.port}/api/events"
            handshake = {"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
                         "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}
            foreign = await http.get(f"{dash.base}/api/events",
                                     headers={**handshake, "Origin": "http://evil.example"})
            assert foreign.status_code == 403  # refused before the upgrade
            async with open_websocket_url(ws_url) as ws:
                first = json.loads(await ws.get_message())
                assert first["type"] == "snapshot"
                states = {s["name"]: s for s in first["status"]["servers"]}
                assert states["beta"]["state"] == "ready"
                os.kill(states["beta"]["pid"], signal.SIGKILL)
                seen: list[str] = []
                while seen[-1:] != ["ready"]:
                    message = json.loads(await ws.get_message())
                    if message["type"] == "event" and message["event"].get("server") == "beta":
                        seen.append(message["event"]["state"])
                assert "backing_off" in seen or "starting" in seen, seen
            assert await server_state(http, dash.base, "beta") == "ready"


async def test_a_configured_token_guards_reading_too(tmp_path: Path) -> None:
    config = fleet(tmp_path, authToken=CONFIG_TOKEN)
    with trio.fail_after(REAL_IO_BOUND_S):
        async with serving(tmp_path, config) as dash, http_client() as http:
            assert (await http.get(f"{dash.base}/healthz")).status_code == 200  # for load balancers
            assert (await http.get(f"{dash.base}/api/status")).status_code == 401
            assert (await http.get(f"{dash.base}/")).status_code == 401
            bearer = {"Authorization": f"Bearer {CONFIG_TOKEN}"}
            assert (await http.get(f"{dash.base}/api/status", headers=bearer)).status_code == 200
            assert (await http.get(f"{dash.base}/api/status", headers=dash.auth())).status_code == 200
            login = await http.get(f"{dash.base}/login", params={"token": dash.token})
            assert login.status_code == 303
            assert login.headers["location"] == "/"
            cookie = login.headers["set-cookie"]
            assert "HttpOnly" in cookie
            assert "SameSite=Strict" in cookie
            page = await http.get(f"{dash.base}/", headers={"Cookie": cookie.split(";")[0]})
            assert page.status_code == 200
            assert "mcpvisor" in page.text
            assert (await http.get(f"{dash.base}/login", params={"token": "guess"})).status_code == 401
    assert CONFIG_TOKEN not in dash.proxy.text()


async def test_mcpvisor_dashboard_drives_a_proxy_running_over_stdio(tmp_path: Path) -> None:
    """``mcpvisor dashboard`` serves the API for a proxy under a stdio client, through its
    control socket: the status shows, and disabling a server reaches the client at once."""
    from mcpvisor.cli.dashboard import serve_dashboard
    from mcpvisor.control import list_running
    from mcpvisor.dashboard import ensure_token
    from tests.helpers import Recorder, proxy_client

    state = tmp_path / "state"
    config = fleet(tmp_path)
    recorder = Recorder()
    with trio.fail_after(REAL_IO_BOUND_S):
        async with proxy_client(config, "--state-dir", str(state), recorder=recorder) as client, \
                trio.open_nursery() as nursery, httpx2.AsyncClient(timeout=60) as http:
            assert any(t.name == "alpha_echo" for t in (await client.list_tools()).tools)
            [proxy] = list_running(state)
            base = await nursery.start(serve_dashboard, proxy.socket, proxy.config, state, 0, False)
            status = (await http.get(f"{base}/api/status")).json()
            assert {s["name"]: s["state"] for s in status["servers"]} == {"alpha": "ready", "beta": "ready"}
            assert status["servers"][0]["metrics"] is None  # not on the control channel
            assert (await http.post(f"{base}/api/servers/alpha/disable")).status_code == 401
            changed = recorder.changed
            token = {"Authorization": f"Bearer {ensure_token(state)}"}
            off = await http.post(f"{base}/api/servers/alpha/disable", headers=token)
            assert off.status_code == 200
            assert off.json()["reload"]["removed"] == ["alpha"]
            await changed.wait()
            assert not any(t.name.startswith("alpha_") for t in (await client.list_tools()).tools)
            assert await server_state(http, base, "alpha") == "disabled"
            nursery.cancel_scope.cancel()


def test_mcpvisor_dashboard_with_no_running_proxy_says_so(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """``mcpvisor dashboard`` in a state dir with no proxy: exit 1 and the message says how
    to start one (the command's own entry point, as a user runs it)."""
    from mcpvisor.cli import main

    assert main(["dashboard", "--state-dir", str(tmp_path), "--no-open"]) == 1
    assert f"no running mcpvisor proxy found in {tmp_path}" in capsys.readouterr().err


async def test_the_page_shows_what_happened_before_it_was_first_opened(tmp_path: Path) -> None:
    """A server that became ready before anyone opened the dashboard: the first page load
    lists that event (the hub started listening at the first request, so after a bad start
    the page showed nothing)."""
    config = write_config(tmp_path, {"slow": flaky_entry("slow", "--slow-start", "1")})
    with trio.fail_after(REAL_IO_BOUND_S):
        async with serving(tmp_path, config) as dash, http_client() as http:
            await dash.proxy.wait_log("slow: starting -> ready")
            status = (await http.get(f"{dash.base}/api/status")).json()
    events = [(e.get("server"), e.get("state")) for e in status["events"] if e["type"] == "state"]
    assert ("slow", "ready") in events, status["events"]
