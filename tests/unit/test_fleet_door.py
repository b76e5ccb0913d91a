"""`mcpvisor.actors.fronts.fleet.FleetDoor`, the HTTP front's outermost layer, spoken to as
ASGI: what a balancer's health checks read, and what a draining replica does with each
kind of request. The same behaviour through real balancers: tests/integration/test_replicas.py.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import trio

from mcpvisor.actors.fronts.asgi import Message
from mcpvisor.actors.fronts.drain import ADMITTED, Drain
from mcpvisor.actors.fronts.fleet import STORE_CHECK_S, FleetDoor


@dataclass
class Behind:
    """The app behind the door: records what reached it, answers 200."""

    seen: list[dict[str, Any]] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.seen.append(scope)
        if scope.get("method") == "POST":
            self.bodies.append((await receive()).get("body", b""))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"behind"})


async def ask(door: FleetDoor, method: str, path: str, body: dict[str, Any] | None = None,
              headers: list[tuple[bytes, bytes]] | None = None) -> tuple[int, dict[bytes, bytes], bytes]:
    sent: list[dict[str, Any]] = []
    raw = json.dumps(body).encode() if body is not None else b""

    async def receive() -> Message:
        return {"type": "http.request", "body": raw, "more_body": False}

    async def send(message: Message) -> None:
        sent.append(dict(message))

    scope = {"type": "http", "method": method, "path": path, "headers": headers or []}
    await door(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    payload = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], dict(start.get("headers") or []), payload


def door_with(ready: Any = None) -> tuple[FleetDoor, Behind, Drain]:
    behind, drain = Behind(), Drain()
    door = FleetDoor(behind, drain, ready=ready, max_body=1 << 20, mcp_path="/mcp")
    door.listening = True
    return door, behind, drain


CALL = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "f_echo", "arguments": {}}}


async def test_health_and_readiness_say_alive_ready_and_why_not() -> None:
    reasons: list[str | None] = [None]

    async def store() -> str | None:
        return reasons[0]

    door, behind, drain = door_with(store)
    status, headers, body = await ask(door, "GET", "/healthz")
    assert (status, json.loads(body)) == (200, {"status": "ok"})
    assert headers[b"content-type"] == b"application/json"
    status, _, body = await ask(door, "GET", "/readyz")
    assert (status, json.loads(body)) == (200, {"status": "ready"})
    reasons[0] = "the store refused the connection"
    status, _, body = await ask(door, "GET", "/readyz")
    assert (status, json.loads(body)) == (503, {"status": "not ready",
                                                "reason": "the store refused the connection"})
    reasons[0] = None
    door.listening = False
    assert json.loads((await ask(door, "GET", "/readyz"))[2])["reason"] == "the front is not listening yet"
    door.listening = True
    drain.draining = True
    status, _, body = await ask(door, "GET", "/readyz")
    assert status == 503
    assert "draining" in json.loads(body)["reason"]
    assert (await ask(door, "GET", "/healthz"))[0] == 200  # alive while it drains
    assert behind.seen == []  # neither reaches the app (nor its token check)


async def test_a_store_check_that_fails_or_hangs_is_a_503_with_a_reason(
        autojump_clock: trio.abc.Clock) -> None:
    async def broken() -> str | None:
        raise ConnectionError("postgresql://user:secret@db/x unreachable")

    async def hung() -> str | None:
        await trio.sleep_forever()
        return None

    status, _, body = await ask(door_with(broken)[0], "GET", "/readyz")
    assert status == 503
    assert json.loads(body)["reason"] == "the store's health check failed (ConnectionError)"
    assert b"secret" not in body
    began = trio.current_time()
    status, _, body = await ask(door_with(hung)[0], "GET", "/readyz")
    assert status == 503
    assert trio.current_time() - began == STORE_CHECK_S
    assert "did not answer" in json.loads(body)["reason"]


async def test_while_draining_new_requests_get_503_and_what_ends_calls_in_flight_passes() -> None:
    door, behind, drain = door_with()
    status, _, _ = await ask(door, "POST", "/mcp", CALL)
    assert status == 200
    assert behind.seen[-1][ADMITTED] is True

    drain.draining = True
    for path in ("/mcp", "/mcp/toolset/dev"):
        status, headers, body = await ask(door, "POST", path, CALL)
        assert status == 503
        assert headers[b"retry-after"] == b"1"
        assert headers[b"connection"] == b"close"
        answer = json.loads(body)
        assert answer["id"] == 7
        assert "shutting down" in answer["error"]["message"]
    assert (await ask(door, "GET", "/mcp"))[0] == 503  # a new notification stream
    reached = len(behind.seen)
    passing = [
        # an answer to a server's request (elicitation, sampling) a call in flight waits for
        ("POST", {"jsonrpc": "2.0", "id": "mcpvisor-s-1", "result": {}}, []),
        ("POST", {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 3}}, []),
        ("GET", None, [(b"last-event-id", b"5")]),  # a stream of a call in flight, resumed
        ("DELETE", None, []),
    ]
    for method, frame, extra in passing:
        assert (await ask(door, method, "/mcp", frame, extra))[0] == 200
    assert len(behind.seen) == reached + len(passing)
    assert behind.bodies[-2:] == [json.dumps(passing[0][1]).encode(), json.dumps(passing[1][1]).encode()]
    assert (await ask(door, "GET", "/api/status"))[0] == 200  # the dashboard is not the door's
    assert door.refused == 3
