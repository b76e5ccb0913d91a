"""Probe one configured server the way the proxy would: start or connect, initialize, list tools.

Owns what `mcpvisor mcp list`, `mcp test` and `mcp info` know about a server without a
running proxy:

* `probe_server`: one attempt, bounded in time, with the timing of each step (spawn,
  initialize, tools/list) and, on failure, a classified cause (`Failure`): the command is
  not on PATH, the process exited (with its status and last stderr lines), an HTTP
  status (401, 404, ...), a refused connection, a handshake error, a timeout
  (classified by `mcpvisor.probe_failures`);
* `probe_all`: every given server at once, under one process watchdog, reporting each
  result as it arrives.

It uses the proxy's own connection code (`mcpvisor.actors.link.stdio.open_stdio_link` /
`open_sdk_link`), so a server that passes here starts under the proxy too. Whatever a
probe starts is stopped and reaped before it returns, cancellation included.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import trio

from mcpvisor.actors.core.vocabulary import STDIO_TRANSPORTS
from mcpvisor.config import ServerSpec
from mcpvisor.probe_failures import Failure, classify, scrubbed, stderr_tail

__all__ = [
    "DEFAULT_PROBE_TIMEOUT_S",
    "ProbeResult",
    "Step",
    "probe_all",
    "probe_server",
]

DEFAULT_PROBE_TIMEOUT_S: Final = 15.0
"""Bound on one probe (spawn to the end of tools/list): the CLI's default `--timeout`.
Long enough for an `npx`/`uvx` server's first download-free start on a busy laptop,
short enough that `mcp list` never looks hung."""

PROBE_SHUTDOWN_GRACE_S: Final = 1.0
"""Stop sequence grace for probed children (close stdin, wait, SIGTERM, wait, SIGKILL):
shorter than the proxy's 2 s because nobody is waiting on the child's work."""

PROBE_MAX_MESSAGE: Final = 16 * 1024 * 1024
"""Largest message accepted while probing: the proxy's default `maxMessageBytes`."""

LIST_PAGE_LIMIT: Final = 1000
"""Pages of tools/list followed at most (a server that never ends its cursor chain)."""


@dataclass(frozen=True, slots=True)
class Step:
    """One step of a probe and how long it took (seconds of trio's clock)."""

    name: str
    seconds: float
    ok: bool
    detail: str | None = None


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """What one probe found. ``ok`` means initialize and tools/list both succeeded."""

    server: str
    transport: str
    ok: bool
    steps: tuple[Step, ...]
    seconds: float
    tools: tuple[Mapping[str, Any], ...] = ()
    protocol_version: str | None = None
    server_name: str | None = None
    server_version: str | None = None
    failure: Failure | None = None

    def to_json(self, *, with_tools: bool = False) -> dict[str, Any]:
        """The result as plain JSON (what `--format json` prints)."""
        out: dict[str, Any] = {
            "server": self.server,
            "transport": self.transport,
            "ok": self.ok,
            "seconds": round(self.seconds, 4),
            "steps": [
                {"name": s.name, "seconds": round(s.seconds, 4), "ok": s.ok, "detail": s.detail}
                for s in self.steps
            ],
            "toolCount": len(self.tools) if self.ok else None,
            "protocolVersion": self.protocol_version,
            "serverInfo": {"name": self.server_name, "version": self.server_version}
            if self.server_name is not None
            else None,
            "failure": None,
        }
        if with_tools:
            out["tools"] = [{"name": t.get("name"), "description": t.get("description")} for t in self.tools]
        if self.failure is not None:
            f = self.failure
            out["failure"] = {
                "kind": f.kind,
                "message": f.message,
                "step": f.step,
                "status": f.status,
                "httpStatus": f.http_status,
                "stderr": list(f.stderr),
                "hint": f.hint,
            }
        return out


class _QuietEvents:
    """LinkEvents for a probe: nothing to forward, nobody to ask."""

    def list_changed(self, kind: str) -> None:
        pass

    def resource_updated(self, uri: str) -> None:
        pass

    def log_message(self, params: dict[str, Any]) -> None:
        pass

    def fallback_origin(self, method: str) -> None:
        return None


@dataclass(slots=True)
class _Run:
    """The mutable record of one probe in progress."""

    spec: ServerSpec
    started: float
    mark: float
    step: str
    steps: list[Step] = field(default_factory=list)
    tools: tuple[Mapping[str, Any], ...] = ()
    protocol_version: str | None = None
    server_name: str | None = None
    server_version: str | None = None
    link: Any = None
    http_statuses: list[int] = field(default_factory=list)

    def done(self, detail: str | None = None, *, next_step: str) -> None:
        now = trio.current_time()
        self.steps.append(Step(self.step, now - self.mark, True, detail))
        self.mark = now
        self.step = next_step

    def result(self, failure: Failure | None) -> ProbeResult:
        now = trio.current_time()
        steps = list(self.steps)
        if failure is not None:
            steps.append(Step(self.step, now - self.mark, False, failure.message))
        return ProbeResult(
            server=self.spec.name,
            transport=self.spec.transport,
            ok=failure is None,
            steps=tuple(steps),
            seconds=now - self.started,
            tools=self.tools if failure is None else (),
            protocol_version=self.protocol_version,
            server_name=self.server_name,
            server_version=self.server_version,
            failure=failure,
        )


async def probe_server(
    spec: ServerSpec, *, limit: float = DEFAULT_PROBE_TIMEOUT_S, reaper: Any = None
) -> ProbeResult:
    """Start or connect to ``spec``'s server, initialize, list its tools, and disconnect.

    Args:
        spec: the server, as resolved from the config (enabled or not: a probe is explicit).
        limit: bound on the whole probe, in seconds. On expiry the probe is abandoned
            and reported as a ``timeout`` failure naming the step it was in.
        reaper: an `mcpvisor.actors.process.Reaper` that kills the child if this process dies.

    Returns:
        The result; never raises for a failure of the server itself.

    Cancellation: the child process (if any) is stopped and reaped, shielded and bounded
    by about three times `PROBE_SHUTDOWN_GRACE_S`, before the cancellation propagates.
    """
    load_connection_code([spec])  # importing the SDK takes seconds on a busy machine: not the server's time
    now = trio.current_time()
    first = "spawn" if spec.transport in STDIO_TRANSPORTS else "connect + initialize"
    run = _Run(spec=spec, started=now, mark=now, step=first)
    failure: Failure | None = None
    with trio.move_on_after(limit) as scope:
        try:
            if spec.transport in STDIO_TRANSPORTS:
                await _probe_stdio(run, reaper)
            else:
                await _probe_remote(run)
        except Exception as exc:
            failure = classify(exc, spec, run.step, run.link, run.http_statuses)
        except BaseExceptionGroup as group:  # a failure and a cancellation at once
            cancelled, rest = group.split(trio.Cancelled)
            if rest is not None:
                failure = classify(rest, spec, run.step, run.link, run.http_statuses)
            if cancelled is not None:
                raise cancelled from None  # docs/style.md 14: ours ends here, an outer one goes on
            raise
    if scope.cancelled_caught and failure is None:
        failure = Failure(
            "timeout",
            f"no answer within {limit:g}s (during {run.step})",
            run.step,
            stderr=stderr_tail(run.link),
            hint="raise --timeout if the server is just slow to start",
        )
    if failure is not None:  # its URL, its errors and its stderr may quote the server's keys
        failure = scrubbed(failure, spec)
    return run.result(failure)


async def probe_all(
    specs: Sequence[ServerSpec],
    *,
    limit: float = DEFAULT_PROBE_TIMEOUT_S,
    on_result: Callable[[ProbeResult], None] | None = None,
) -> dict[str, ProbeResult]:
    """Probe every server in ``specs`` concurrently; each one bounded by ``limit`` seconds.

    Returns:
        Results by server name, in the order of ``specs``. ``on_result`` is called as
        each one finishes (for a spinner's progress).
    """
    from mcpvisor.actors.process import open_reaper

    load_connection_code(specs)
    results: dict[str, ProbeResult] = {}

    async def one(spec: ServerSpec) -> None:
        result = await probe_server(spec, limit=limit, reaper=reaper)
        results[spec.name] = result
        if on_result is not None:
            on_result(result)

    async with open_reaper() as reaper, trio.open_nursery() as nursery:
        for spec in specs:
            nursery.start_soon(one, spec)
    return {spec.name: results[spec.name] for spec in specs}


# --- the two kinds of connection --------------------------------------------------------


def load_connection_code(specs: Iterable[ServerSpec]) -> None:
    """Import the connection code ``specs`` need before any probe starts its clock: our stdio
    link for a stdio server, the MCP SDK (and httpx2) for a remote one (0.35-0.6 s: probing
    only stdio servers never loads it)."""
    import mcpvisor.actors.link.stdio  # noqa: F401

    if any(spec.transport not in STDIO_TRANSPORTS for spec in specs):
        import mcp.client.sse
        import mcp.client.streamable_http  # noqa: F401


async def _probe_stdio(run: _Run, reaper: Any) -> None:
    from mcpvisor.actors.core.argv import stdio_argv
    from mcpvisor.actors.link import open_stdio_link

    spec = run.spec
    argv = stdio_argv(spec)

    def spawned(link: Any) -> None:
        run.link = link
        run.done(f"pid {link.pid}", next_step="initialize")

    async with open_stdio_link(
        spec.name,
        argv,
        env=spec.env,
        cwd=spec.cwd,
        events=_QuietEvents(),
        reaper=reaper,
        protocol=spec.protocol,
        max_message=PROBE_MAX_MESSAGE,
        shutdown_grace=min(spec.shutdown_grace, PROBE_SHUTDOWN_GRACE_S),
        on_spawn=spawned,
    ) as link:
        await _after_handshake(run, link)


async def _probe_remote(run: _Run) -> None:
    import httpx2

    from mcpvisor.actors.link import open_sdk_link
    from mcpvisor.actors.transports import sdk_transport

    async def record(response: httpx2.Response) -> None:
        run.http_statuses.append(int(response.status_code))

    # The transport the proxy itself uses for this server (headers, limits, redirects),
    # with the probe's own timeout and the HTTP statuses recorded for the report.
    spec = run.spec
    transport = sdk_transport(spec, PROBE_MAX_MESSAGE, http_timeout=httpx2.Timeout(DEFAULT_PROBE_TIMEOUT_S),
                              on_response=record, auth=_stored_login(spec))
    async with open_sdk_link(spec.name, transport, events=_QuietEvents(), protocol=spec.protocol) as link:
        await _after_handshake(run, link)


def _stored_login(spec: ServerSpec) -> Any:
    """The OAuth client of an http or sse server over the tokens ``mcpvisor mcp login``
    stored (never a browser: a probe asks no one); None with a static Authorization header."""
    import os

    from mcpvisor.actors.link.oauth import UpstreamAuth
    from mcpvisor.pgstore import STORE_ENV, is_store_url
    from mcpvisor.settings import state_dir
    from mcpvisor.tokens import FileTokenStore

    if spec.transport not in ("http", "sse"):
        return None
    if spec.oauth is None and any(k.lower() == "authorization" for k in spec.headers):
        return None
    shared = os.environ.get(STORE_ENV, "").strip()
    if is_store_url(shared):  # the replicas' shared store holds the tokens (`mcpvisor.pgstore`)
        from mcpvisor.pgstore.store import PgStore

        return UpstreamAuth(spec, PgStore(shared, state_dir=state_dir()).tokens(spec.name)).provider
    return UpstreamAuth(spec, FileTokenStore(state_dir(), spec.name)).provider


async def _after_handshake(run: _Run, link: Any) -> None:
    """Record the handshake step, then list every page of tools."""
    run.protocol_version = link.protocol_version or None
    info = link.server_info
    if info is not None:
        run.server_name = info.get("name")
        run.server_version = info.get("version")
    who = f"{run.server_name} {run.server_version}" if run.server_name else "initialized"
    run.done(f"{who} (protocol {link.protocol_version})", next_step="tools/list")
    run.tools = await _list_tools(link)
    run.done(f"{len(run.tools)} tools", next_step="done")


async def _list_tools(link: Any) -> tuple[Mapping[str, Any], ...]:
    from mcpvisor.actors import wire
    from mcpvisor.actors.errors import UpstreamError

    caps = link.capabilities
    if caps is not None and caps.get("tools") is None:
        return ()
    items: list[Mapping[str, Any]] = []
    cursor: str | None = None
    for _page in range(LIST_PAGE_LIMIT):
        try:
            page = await link.list_page("tools", cursor)
        except UpstreamError as exc:
            if exc.code == wire.METHOD_NOT_FOUND:
                return ()
            raise
        items.extend(page.items)
        cursor = page.next_cursor
        if not cursor:
            break
    return tuple(items)
