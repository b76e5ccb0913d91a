"""What the dashboard shows, gathered once and shared by every open page.

`Hub` reads a `Source` (the supervisor in this process, or a running proxy's control
socket) and keeps what the page needs beyond `status`: calls and errors per minute and
p50 latency per server (`_metrics.CallWindow`), and the recent state changes. It listens
from the moment it runs (the proxy's start, for ``serve --transport http``), so the page
opened after a bad start still shows what happened and the calls made before it.

Sources:

* `LocalSource`: a `Supervisor` in this process (``serve --transport http``): its
  `status`, its `events`, `Supervisor.reload` after an edit, its reaper for probes.
* `ControlSource`: a proxy reached through its control socket (``mcpvisor dashboard``):
  the ``status`` op, polled every `POLL_S`, turned into state-change events; ``reload``
  after an edit. Calls per minute and latency are not on the control channel: the page
  shows them as unknown.

The last hour of each server (calls, errors, p50 and p99 a minute, its state changes) and
the tool table come from the proxy's own recorder (`mcpvisor.metrics.History`), which
counts from the proxy's start whether or not a page is open; a source without one (a
proxy reached over its control socket) shows them as unknown.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol

import trio

from mcpvisor.dashboard._metrics import CallWindow, RecentEvents

if TYPE_CHECKING:
    from mcpvisor.metrics import History

POLL_S: Final = 0.5
"""How often `ControlSource` asks a running proxy for its status: half the one second
within which the page must show a change."""

CONTROL_TIMEOUT_S: Final = 5.0
"""`mcpvisor.control.DEFAULT_REQUEST_TIMEOUT_S`; a reload may take longer (below)."""

RELOAD_TIMEOUT_S: Final = 120.0
"""A reload waits for added servers to start (``startupTimeout`` is 30 s by default)."""


def wall_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Source(Protocol):
    """What the dashboard reads and drives."""

    reaper: Any

    @property
    def config_path(self) -> Path | None: ...

    async def status(self) -> dict[str, Any]: ...

    def events(self) -> AsyncIterator[dict[str, Any]]: ...

    async def reload(self) -> dict[str, Any]: ...

    def history(self) -> History | None:
        """The proxy's recorded history (`mcpvisor.metrics`), if this source has one."""
        ...

    async def login(self, server: str) -> str:
        """Start ``server``'s OAuth login; its authorization URL (ValueError: why not)."""
        ...


class LocalSource:
    """The `Supervisor` running in this process."""

    def __init__(self, sup: Any) -> None:
        self.sup = sup
        self.reaper = sup.reaper

    @property
    def config_path(self) -> Path | None:
        path = self.sup.config.path
        return Path(path) if path is not None else None

    async def status(self) -> dict[str, Any]:
        from mcpvisor.control_ops import status_report

        return status_report(self.sup, transport="http")

    async def events(self) -> AsyncIterator[dict[str, Any]]:
        from mcpvisor.actors.messages import CallFinished, ListChanged, StateChanged

        async for event in self.sup.events():
            match event:
                case CallFinished():
                    yield {"type": "call", "server": event.server, "duration": event.duration, "ok": event.ok}
                case StateChanged():
                    yield {"type": "state", "server": event.server, "state": event.state,
                           "previous": event.previous, "reason": event.reason, "restarts": event.restarts}
                case ListChanged():
                    yield {"type": "list", "kinds": list(event.kinds), "version": event.version}
                case _:  # any other kind the bus carries, as a line in the page's events
                    text = getattr(event, "text", None) or type(event).__name__
                    yield {"type": "notice", "server": getattr(event, "server", None), "text": str(text)}

    async def reload(self) -> dict[str, Any]:
        result: dict[str, Any] = await self.sup.reload()
        return result

    def history(self) -> History | None:
        metrics = getattr(self.sup, "metrics", None)
        return metrics.history if metrics is not None else None

    async def login(self, server: str) -> str:
        url: str = await self.sup.login(server)
        return url


class ControlSource:
    """A running proxy, through its control socket (`mcpvisor.control`)."""

    reaper: Any = None

    def __init__(self, socket: Path, config: str | None) -> None:
        self.socket = socket
        self._config = config

    @property
    def config_path(self) -> Path | None:
        return Path(self._config) if self._config else None

    async def _ask(self, op: str, bound: float = CONTROL_TIMEOUT_S) -> dict[str, Any]:
        """Ask the proxy (`mcpvisor.control.request`, in a thread: it blocks up to ``bound`` s)."""
        from mcpvisor.control import request

        reply: dict[str, Any] = await trio.to_thread.run_sync(lambda: request(self.socket, op, bound))
        return reply

    async def status(self) -> dict[str, Any]:
        reply = await self._ask("status")
        reply.pop("ok", None)
        self._config = reply.get("config") or self._config
        return reply

    async def events(self) -> AsyncIterator[dict[str, Any]]:
        from mcpvisor.control import ControlError

        last: dict[str, str] = {}
        while True:
            try:
                report = await self.status()
            except ControlError as exc:
                yield {"type": "notice", "server": None, "text": f"the proxy does not answer: {exc}"}
                await trio.sleep(POLL_S)
                continue
            for server in report.get("servers", []):
                name, state = server["name"], server["state"]
                if last.get(name) not in (None, state):
                    yield {"type": "state", "server": name, "state": state, "previous": last[name],
                           "reason": server.get("reason"), "restarts": server.get("restarts", 0)}
                last[name] = state
            await trio.sleep(POLL_S)

    async def reload(self) -> dict[str, Any]:
        reply = await self._ask("reload", RELOAD_TIMEOUT_S)
        result: dict[str, Any] = reply.get("result") or {}
        return result

    def history(self) -> History | None:
        return None  # not on the control channel

    async def login(self, server: str) -> str:
        # The login's redirect listener must run where the tokens are used: in the proxy.
        raise ValueError(f"log in from a terminal: mcpvisor mcp login {server} "
                         "(the proxy picks the tokens up by itself)")


class Hub:
    """The shared view: `status` with metrics, the recent events, a wake-up per change."""

    def __init__(self, source: Source, *, metrics: bool = True) -> None:
        self.source = source
        self.metrics = metrics
        self.window = CallWindow()
        self.recent = RecentEvents()
        self.changed = trio.Event()
        """Set (and replaced) at every state or list change; pages wait on it."""
        self.seq = 0

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Follow the source's events until cancelled."""
        task_status.started()
        async for event in self.source.events():
            self.note(event, trio.current_time())

    def note(self, event: dict[str, Any], now: float) -> None:
        if event["type"] == "call":
            self.window.record(event["server"], now, event["duration"], event["ok"])
            return
        if event["type"] == "state" and event["state"] == event.get("previous"):
            return  # a new attempt in the same state ("starting -> starting"): nothing to show
        self.seq += 1
        self.recent.add({**event, "seq": self.seq, "at": wall_iso()})
        self.changed.set()
        self.changed = trio.Event()

    def events_since(self, seq: int) -> list[dict[str, Any]]:
        return [e for e in self.recent.list() if e["seq"] > seq]

    async def status(self, configured: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
        """The source's status, each server with its call metrics, plus configured servers
        the proxy does not run (``disabled`` or ``not_loaded``)."""
        report = await self.source.status()
        now = trio.current_time()
        history = self.source.history() if self.metrics else None
        running = {s["name"] for s in report.get("servers", [])}
        for server in report.get("servers", []):
            server["metrics"] = self.window.summary(server["name"], now) if self.metrics else None
            server["history"] = history.series(server["name"], now) if history is not None else None
        for name, entry in (configured or {}).items():
            if name not in running:
                state = "disabled" if entry.get("enabled", True) is False or entry.get("disabled") is True \
                    else "not_loaded"
                report.setdefault("servers", []).append(
                    {"name": name, "state": state, "transport": entry.get("type", "stdio"), "metrics": None})
        report["tools"] = history.tools() if history is not None else None
        report["events"] = self.recent.list()
        report["seq"] = self.seq
        report["now"] = time.time()
        return report
