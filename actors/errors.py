"""The proxy's error vocabulary, and the one place it becomes JSON-RPC.

Every failure a client can meet on a forwarded request is one of these, carrying the
data a user needs to act (which server, what state, until when). `error_data`
translates any of them to a JSON-RPC error body; nothing else builds error bodies
from exceptions.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import trio

from mcpvisor.actors import wire


class ProxyError(Exception):
    """Base class: a failure the proxy answers on its own."""

    code: int = wire.INTERNAL_ERROR

    def __init__(self, message: str, *, data: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.data = data


def wall_clock(deadline: float) -> str:
    """``HH:MM:SS`` local time of a trio-clock ``deadline``, for messages only."""
    # The only wall-clock read in the actors: display of a trio deadline.
    wall = time.time() + (deadline - trio.current_time())
    return time.strftime("%H:%M:%S", time.localtime(wall))


_STATE_WORDS = {"circuit_open": "circuit open: too many failed starts", "backing_off": "restarting"}
"""How an error names the state of a server that will be tried again."""


class UpstreamUnavailable(ProxyError):
    """The server that owns the target is not serving (down, restarting, circuit open, disabled)."""

    code = wire.UPSTREAM_UNAVAILABLE

    def __init__(self, server: str, state: str, reason: str | None, retry_at: float | None = None) -> None:
        if state == "needs_login":
            # The words `mcpvisor.actors.link.oauth.login_message` gives every status view.
            message = f"server {server} needs a login: run mcpvisor mcp login {server}"
        elif retry_at is not None:
            message = (f"server {server} is down ({reason or state}), next try at {wall_clock(retry_at)} "
                       f"({_STATE_WORDS.get(state, state.replace('_', ' '))})")
        elif reason:
            message = f"server {server} is {state.replace('_', ' ')} ({reason})"
        else:
            message = f"server {server} is {state.replace('_', ' ')}"
        super().__init__(message, data={"server": server, "state": state, "reason": reason})
        self.server = server
        self.state = state
        self.reason = reason
        self.retry_at = retry_at


class UpstreamDied(ProxyError):
    """The upstream's connection ended while the request was in flight."""

    code = wire.CONNECTION_CLOSED

    def __init__(self, server: str, reason: str) -> None:
        super().__init__(f"server {server} stopped while handling the request ({reason})",
                         data={"server": server, "reason": reason})
        self.server = server
        self.reason = reason


class CallTimeout(ProxyError):
    """No answer (and no progress) from the upstream within its limit."""

    code = wire.REQUEST_TIMEOUT

    def __init__(self, server: str, limit: float, *, hard_cap: bool = False) -> None:
        what = "the hard limit of" if hard_cap else "no answer or progress within"
        super().__init__(f"server {server} timed out: {what} {limit:g}s",
                         data={"server": server, "timeoutSeconds": limit})
        self.server = server
        self.limit = limit


class UpstreamError(ProxyError):
    """A JSON-RPC error the upstream itself sent: passed through as it came."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message, data=data)
        self.code = code


class TooManyRequests(ProxyError):
    """The upstream's pending table is full."""

    code = wire.INTERNAL_ERROR


class ShuttingDown(ProxyError):
    """The proxy is stopping (SIGTERM, SIGINT): a request it will not, or could not, finish."""

    code = wire.CONNECTION_CLOSED
    MESSAGE = "mcpvisor is shutting down"

    def __init__(self) -> None:
        super().__init__(self.MESSAGE, data={"reason": "shutdown"})


class BridgeUnsupported(ProxyError):
    """A message that cannot cross between the client's and the upstream's protocol eras."""

    code = wire.METHOD_NOT_FOUND


def error_data(exc: BaseException) -> dict[str, Any]:
    """The JSON-RPC ``error`` object for a failure on a forwarded request."""
    if isinstance(exc, ProxyError):
        body: dict[str, Any] = {"code": exc.code, "message": exc.message}
        if exc.data is not None:
            body["data"] = exc.data
        return body
    return {"code": wire.INTERNAL_ERROR, "message": f"internal error: {type(exc).__name__}: {exc}"}


def sole_exception(exc: BaseException) -> BaseException:
    """The single exception a (nested) exception group holds; ``exc`` itself otherwise.

    A nursery wraps whatever its body raises in a group, even one exception
    (trio's strict exception groups). A group of several is left as it is: which
    one mattered is not ours to guess, and a cancellation in it must not be hidden.
    """
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


@contextmanager
def unwrap_groups() -> Iterator[None]:
    """Re-raise a group that holds one exception as that exception.

    Used at the boundary of an upstream link, so a client reads the link's own error
    ("server X timed out ...") instead of "Exceptions from Trio nursery (1
    sub-exception)" with code 0, and the callers' ``except CallTimeout`` and
    ``except UpstreamDied`` see what they are written for.
    """
    try:
        yield
    except BaseExceptionGroup as group:
        inner = sole_exception(group)
        if inner is group:
            raise
        raise inner from None
