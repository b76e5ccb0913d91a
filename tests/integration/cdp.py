"""Headless Chromium driven over the Chrome DevTools Protocol, for the dashboard tests.

Debian's ``chromium`` (``apt-get install -y chromium``; ``.ci/run`` installs it) is started
in its own process group with a fresh profile and ``--remote-debugging-port=0``; the
browser prints the websocket URL it listens on, and `Browser` speaks CDP to it over
trio-websocket (one reader task owns the connection; each request waits on its own
one-slot channel, as in `mcpvisor.actors`). One page target, attached in flat mode.

`Page.wait_for` waits for a JavaScript condition on the page's DOM with a
MutationObserver (no polling, no sleeps); the caller bounds it with ``trio.fail_after``.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

import pytest
import trio
from trio_websocket import open_websocket_url

FLAGS: Final = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage", "--window-size=1280,900", "--remote-debugging-port=0",
    "--remote-allow-origins=*",
)
START_BOUND_S: Final = 60.0
"""Chromium's first start on a busy 2-core box takes a few seconds."""
STOP_BOUND_S: Final = 10.0
MAX_CDP_MESSAGE: Final = 64 * 1024 * 1024
"""A full-page PNG screenshot arrives base64 in one message."""

_LISTENING = re.compile(r"DevTools listening on (ws://\S+)")


def chromium() -> str:
    """The Chromium binary; skips the test when there is none, fails it under ``CI=true``."""
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail("chromium is not installed; .ci/run installs it (apt-get install -y chromium)")
    pytest.skip("chromium is not installed (apt-get install -y chromium)")


class CdpError(Exception):
    pass


class Page:
    """One tab, attached to its session."""

    def __init__(self, browser: Browser, session: str) -> None:
        self.browser = browser
        self.session = session

    async def send(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        return await self.browser.send(method, params, session=self.session)

    async def navigate(self, url: str) -> None:
        """Go to ``url`` and wait for its load event."""
        loaded = self.browser.expect("Page.loadEventFired", self.session)
        await self.send("Page.navigate", {"url": url})
        await loaded.receive()

    async def evaluate(self, expression: str) -> Any:
        """The value of ``expression`` (awaited if it is a promise)."""
        reply = await self.send("Runtime.evaluate", {"expression": expression, "awaitPromise": True,
                                                     "returnByValue": True})
        if "exceptionDetails" in reply:
            raise CdpError(json.dumps(reply["exceptionDetails"])[:2000])
        return reply["result"].get("value")

    async def wait_for(self, condition: str) -> Any:
        """Wait until the JavaScript ``condition`` is truthy; return its value."""
        return await self.evaluate(f"""new Promise((resolve) => {{
            const check = () => {{ let v; try {{ v = ({condition}); }} catch (e) {{ v = null; }}
                                   if (v) {{ observer.disconnect(); resolve(v); }} }};
            const observer = new MutationObserver(check);
            observer.observe(document, {{subtree: true, childList: true, attributes: true,
                                          characterData: true}});
            check();
        }})""")

    async def screenshot(self, path: Path) -> None:
        reply = await self.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True})
        await trio.Path(path).write_bytes(base64.b64decode(reply["data"]))


class Browser:
    """A CDP connection to the browser; `page` opens a tab."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self._ids = itertools.count(1)
        self._pending: dict[int, trio.MemorySendChannel[dict[str, Any]]] = {}
        self._waiters: list[tuple[str, str | None, trio.MemorySendChannel[dict[str, Any]]]] = []

    async def reader(self) -> None:
        async for raw in _messages(self.ws):
            message = json.loads(raw)
            if "id" in message:
                reply = self._pending.pop(message["id"], None)
                if reply is not None:
                    reply.send_nowait(message)
                continue
            for method, session, channel in list(self._waiters):
                if method == message.get("method") and session in (None, message.get("sessionId")):
                    self._waiters.remove((method, session, channel))
                    channel.send_nowait(message.get("params", {}))

    def expect(self, method: str, session: str | None = None) -> trio.MemoryReceiveChannel[dict[str, Any]]:
        """A channel that gets the next event ``method`` (register before causing it)."""
        send, receive = trio.open_memory_channel[dict[str, Any]](1)
        self._waiters.append((method, session, send))
        return receive

    async def send(self, method: str, params: dict[str, Any] | None = None, *,
                   session: str | None = None) -> dict[str, Any]:
        ident = next(self._ids)
        send, receive = trio.open_memory_channel[dict[str, Any]](1)
        self._pending[ident] = send
        message: dict[str, Any] = {"id": ident, "method": method, "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        try:
            await self.ws.send_message(json.dumps(message))
            reply = await receive.receive()
        finally:
            self._pending.pop(ident, None)
        if "error" in reply:
            raise CdpError(f"{method}: {reply['error']}")
        result: dict[str, Any] = reply.get("result", {})
        return result

    async def page(self) -> Page:
        target = await self.send("Target.createTarget", {"url": "about:blank"})
        attached = await self.send("Target.attachToTarget", {"targetId": target["targetId"], "flatten": True})
        page = Page(self, attached["sessionId"])
        await page.send("Page.enable")
        await page.send("Runtime.enable")
        await page.send("Page.setLifecycleEventsEnabled", {"enabled": True})
        return page


async def _messages(ws: Any) -> AsyncIterator[str]:
    from trio_websocket import ConnectionClosed

    while True:
        try:
            yield await ws.get_message()
        except ConnectionClosed:
            return


@asynccontextmanager
async def open_browser(profile: Path) -> AsyncIterator[Browser]:
    """Start headless Chromium with a fresh profile in ``profile``; stop it (and every
    process it started) on exit."""
    binary = chromium()
    await trio.Path(profile).mkdir(parents=True, exist_ok=True)
    process = await trio.lowlevel.open_process(
        [binary, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        url = ""
        with trio.fail_after(START_BOUND_S):
            assert process.stderr is not None
            buf = b""
            while not url:
                chunk = await process.stderr.receive_some(65536)
                if not chunk:
                    raise CdpError("chromium exited before listening:\n" + buf.decode(errors="replace"))
                buf += chunk
                found = _LISTENING.search(buf.decode(errors="replace"))
                if found:
                    url = found[1]
        async with trio.open_nursery() as nursery:

            async def drain() -> None:  # chromium logs to stderr; a full pipe would stall it
                assert process.stderr is not None
                while await process.stderr.receive_some(65536):
                    pass

            nursery.start_soon(drain)
            async with open_websocket_url(url, max_message_size=MAX_CDP_MESSAGE) as ws:
                browser = Browser(ws)
                nursery.start_soon(browser.reader)
                yield browser
            # The websocket is closed first, with its closing handshake (a browser that
            # drops it under trio-websocket leaves its socket to the GC); then the group dies.
            nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            with trio.move_on_after(STOP_BOUND_S):
                await process.wait()
