"""The dashboard in headless Chromium, used as a person would, against ``mcpvisor serve``
with real subprocess servers and a connected MCP client.

Runs wherever Debian's ``chromium`` is installed; with ``CI=true`` a missing browser is a
failure, not a skip (`tests.integration.cdp.chromium`). It takes the screenshots docs/ keeps
(healthy, one server down, the last hour and tool table, the add form with an error) into
``$MCPVISOR_SCREENSHOT_DIR``
(``MCPVISOR_SCREENSHOT_DIR=docs`` refreshes them), else into the test's temporary directory.
"""

from __future__ import annotations

import json
import os
import signal
import socket
from pathlib import Path
from typing import Final
from urllib.parse import quote

import httpx2
import pytest
import trio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.helpers import PY, REAL_IO_BOUND_S, SERVERS_DIR, Recorder, http_client, text_of
from tests.integration.cdp import Page, chromium, open_browser
from tests.integration.dashboard import SECRET, flaky_entry, fleet, serving
from tests.security.proxy import running_proxy

SCREENSHOT_DIR_ENV: Final = "MCPVISOR_SCREENSHOT_DIR"
BROWSER_BOUND_S: Final = 2 * REAL_IO_BOUND_S
"""A proxy, three fixture servers and a browser on a busy 2-core box."""


def row(name: str) -> str:
    return f'document.querySelector(\'#servers tr[data-server="{name}"]\')'


def click(server: str, action: str) -> str:
    """JavaScript that clicks a row's button, as a person would."""
    return f"{row(server)}.querySelector('button[data-action=\"{action}\"]').click()"


form: Final = "document.querySelector('#server-form')"


async def fill(page: Page, values: dict[str, str]) -> None:
    """Type into the add form's fields (as input events, as a person's typing gives)."""
    for field, value in values.items():
        await page.evaluate(
            f"(() => {{ const el = document.querySelector('#server-form').elements[{json.dumps(field)}];"
            f" el.value = {json.dumps(value)}; el.dispatchEvent(new Event('input', {{bubbles: true}}));"
            f" el.dispatchEvent(new Event('change', {{bubbles: true}})); }})()"
        )


@pytest.mark.slow
@pytest.mark.timeout(BROWSER_BOUND_S + 60)
async def test_the_dashboard_in_a_browser(tmp_path: Path) -> None:
    chromium()  # skip early (fail under CI=true) without a browser
    shots = Path(os.environ.get(SCREENSHOT_DIR_ENV) or tmp_path)
    recorder = Recorder()
    with trio.fail_after(BROWSER_BOUND_S):
        async with serving(tmp_path, fleet(tmp_path)) as dash, \
                httpx2.AsyncClient(timeout=60) as http, \
                http_client() as mcp_http, \
                Client(streamable_http_client(f"{dash.base}/mcp", http_client=mcp_http), mode="legacy",
                       cache=None,
                       **recorder.kwargs()) as client, \
                open_browser(tmp_path / "profile") as browser:
            page = await browser.page()
            # Calls made before any page is open: the proxy keeps them for the page's last hour.
            for text in ("a", "b", "c"):
                await client.call_tool("alpha_echo", {"text": text})
            assert (await client.call_tool("alpha_fail", {"message": "no"})).is_error
            await client.call_tool("beta_echo", {"text": "d"})

            # Logging in puts the token in an HttpOnly cookie and leaves it out of the URL.
            await page.navigate(f"{dash.base}/login?token={dash.token}")
            assert await page.evaluate("location.pathname + location.search") == "/"
            assert dash.token not in await page.evaluate("document.cookie + location.href")

            # Rows and states render, live.
            await page.wait_for(f"{row('alpha')}?.dataset.state === 'ready' && "
                                f"{row('beta')}?.dataset.state === 'ready'")
            await page.wait_for("document.querySelector('#conn').dataset.state === 'live'")
            assert SECRET not in await page.evaluate("document.documentElement.outerHTML")
            await page.screenshot(shots / "dashboard.png")

            # Killing beta's process: its row goes to backing off and back to ready, no reload.
            marker = await page.evaluate("window.__same_page = Math.random()")
            pid = (await http.get(f"{dash.base}/api/servers/beta")).json()["status"]["pid"]
            os.kill(pid, signal.SIGKILL)
            history = await page.wait_for(
                f"(/backing_off( \\S+)* ready$/.test({row('beta')}?.dataset.history || '')) && "
                f"{row('beta')}.dataset.history")
            assert "backing_off" in history
            assert await page.evaluate("window.__same_page") == marker  # the same page, never reloaded

            # The last hour: the calls made before the page opened, and beta's restart on its timeline.
            def spark(server: str, kind: str) -> str:
                return f"{row(server)}?.querySelector('svg.spark.{kind}')"

            assert await page.wait_for(f"{spark('alpha', 'rate')}?.dataset.total") == "4"
            assert await page.evaluate(f"{spark('alpha', 'rate')}.dataset.errors") == "1"
            assert await page.evaluate(f"{spark('alpha', 'rate')}.querySelectorAll('polyline').length") >= 1
            assert float(await page.evaluate(f"{spark('alpha', 'latency')}.dataset.p99")) > 0
            lines = await page.evaluate(f"{spark('alpha', 'latency')}.querySelectorAll('.p50, .p99').length")
            assert lines >= 2
            assert await page.evaluate(f"{spark('beta', 'rate')}.dataset.total") == "1"
            ticks = await page.wait_for(
                f"[...{spark('beta', 'timeline')}.querySelectorAll('rect.tick')].map(t => t.dataset.state)"
                ".join(' ').match(/backing_off( \\S+)* ready$/)?.input")
            assert "backing_off" in ticks
            # The tool table: most called first; a click on "errors" puts the failing tool first.
            first = "document.querySelector('#tools tbody tr')"
            assert await page.wait_for(f"{first}?.dataset.tool") == "echo"
            assert await page.evaluate(f"{first}.dataset.server") == "alpha"
            await page.evaluate("document.querySelector('#tools button[data-sort=\"errors\"]').click()")
            assert await page.wait_for(f"{first}.dataset.tool === 'fail' && {first}.dataset.tool")
            await page.screenshot(shots / "dashboard-last-hour.png")

            # A server that cannot start shows as down, with its last error.
            down = await http.post(f"{dash.base}/api/servers", headers=dash.auth(), json={
                "name": "weather", "entry": flaky_entry("weather", "--exit-at-start", "1",
                                                         "--stderr-text", "WEATHER_API_KEY is not set")})
            assert down.status_code == 201, down.text
            await page.wait_for(f"['backing_off', 'circuit_open'].includes({row('weather')}?.dataset.state)"
                                " && "
                                f"{row('weather')}.querySelector('td.error').textContent.includes('exited')")
            await page.screenshot(shots / "dashboard-server-down.png")
            gone = await http.delete(f"{dash.base}/api/servers/weather", headers=dash.auth())
            assert gone.status_code == 200
            await page.wait_for(f"!{row('weather')}")

            # A bad command: the error shows next to the command field; nothing is written.
            before = dash.config.read_text()
            await fill(page, {"name": "delta", "command": "/no/such/mcp-server"})
            await page.evaluate("document.querySelector('#save').click()")
            error = await page.wait_for(
                "document.querySelector('.field-error[data-for=\"command\"]').textContent")
            assert error == "command not found: /no/such/mcp-server"
            command_field = "document.querySelector('#server-form').elements.command"
            assert await page.evaluate(f"{command_field}.getAttribute('aria-invalid')") == "true"
            await page.screenshot(shots / "dashboard-add-error.png")
            assert dash.config.read_text() == before

            # Adding a server through the form: a connected client gets one list_changed and its tools.
            seen = recorder.list_changed
            changed = recorder.changed
            await fill(page, {"name": "gamma", "command": PY,
                              "args": f"{SERVERS_DIR / 'flaky.py'}\n--name\ngamma", "env": ""})
            await page.evaluate("document.querySelector('#save').click()")
            await changed.wait()
            tools = {t.name for t in (await client.list_tools()).tools}
            assert "gamma_echo" in tools
            assert text_of(await client.call_tool("gamma_echo", {"text": "hi"})) == "echo: hi"
            await page.wait_for(f"{row('gamma')}?.dataset.state === 'ready'")
            assert recorder.list_changed == seen + 1
            assert dash.file_entry("gamma")["args"][-1] == "gamma"

            # Editing in the page: the secret shows as ***, and saving keeps it.
            await page.evaluate(click("alpha", "edit"))
            assert await page.wait_for(f"{form}.elements.env.value") == "API_KEY=***"
            await fill(page, {"env": "API_KEY=***\nEXTRA=1"})
            await page.evaluate("document.querySelector('#save').click()")
            await page.wait_for("document.querySelector('#notice').textContent === 'saved alpha'")
            assert dash.file_entry("alpha")["env"] == {"API_KEY": SECRET, "EXTRA": "1"}

            # Disable and enable from the row; remove after saying yes to the confirmation.
            await page.evaluate(click("beta", "disable"))
            await page.wait_for(f"{row('beta')}?.dataset.state === 'disabled'")
            await page.evaluate(click("beta", "enable"))
            await page.wait_for(f"{row('beta')}?.dataset.state === 'ready'")
            dialog = browser.expect("Page.javascriptDialogOpening", page.session)
            async with trio.open_nursery() as clicking:
                clicking.start_soon(page.evaluate, click("gamma", "remove"))  # blocks until answered
                asked = await dialog.receive()
                assert asked["message"] == "Remove server gamma from the config?"
                await page.send("Page.handleJavaScriptDialog", {"accept": True})
            await page.wait_for(f"!{row('gamma')}")
            assert dash.file_entry("gamma") is None

            # A request without the token is refused (the page's own cookie left out).
            status = await page.evaluate(
                "fetch('/api/servers/alpha/disable', {method: 'POST', credentials: 'omit'})"
                ".then(r => r.status)")
            assert status == 401
            # A page from another origin posting to the API is refused (Origin: null here).
            attack = ("data:text/html,<form method=post action='"
                      f"{dash.base}/api/servers/alpha/disable'></form><script>document.forms[0].submit()</script>")
            await page.navigate(quote(attack, safe=":/=<>'.;,()[]"))
            refused = await page.wait_for("document.body && document.body.innerText.includes('Origin') && "
                                          "document.body.innerText")
            assert "Invalid Origin" in refused
            assert "enabled" not in dash.file_entry("alpha")
            assert (await http.get(f"{dash.base}/api/servers/alpha")).json()["status"]["state"] == "ready"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.mark.slow
@pytest.mark.timeout(BROWSER_BOUND_S + 60)
async def test_the_page_says_when_the_proxy_is_gone_and_reconnects_by_itself(tmp_path: Path) -> None:
    """The proxy stops: the page says the connection is lost; it comes back on the same
    port: the page is live again, with the new process's servers, never reloaded."""
    chromium()
    config = fleet(tmp_path)
    state = tmp_path / "state"
    port = str(free_port())
    args = ("--transport", "http", "--port", port, "--state-dir", str(state))
    with trio.fail_after(BROWSER_BOUND_S):
        async with open_browser(tmp_path / "profile") as browser:
            page = await browser.page()
            async with running_proxy(config, *args) as first:
                await page.navigate(f"http://127.0.0.1:{port}/")
                await page.wait_for(f"{row('alpha')}?.dataset.state === 'ready'")
                await page.wait_for("document.querySelector('#conn').dataset.state === 'live'")
                marker = await page.evaluate("window.__same_page = Math.random()")
                first_pid = first.process.pid
            lost = await page.wait_for("document.querySelector('#conn').dataset.state === 'lost' && "
                                       "document.querySelector('#conn').textContent")
            assert "connection lost" in lost
            async with running_proxy(config, *args) as second:
                assert second.process.pid != first_pid
                await page.wait_for("document.querySelector('#conn').dataset.state === 'live'")
                await page.wait_for(f"{row('alpha')}?.dataset.state === 'ready'")
                assert await page.evaluate("window.__same_page") == marker
