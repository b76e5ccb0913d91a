"""Why a start or a connection of an upstream failed, in the words a user reads.

The exit status and the last stderr lines when the process is gone ("exited with
status 2: <stderr>"), the link's own close reason ("hung: 3 pings unanswered", "garbage
on stdout: ..."), the handshake's error, or the exception. Cancellation is never a
failure: it is re-raised (docs/style.md rule 14).
"""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING, Any, Final

import anyio
import trio

from mcpvisor.actors import wire
from mcpvisor.actors.errors import ProxyError, UpstreamDied
from mcpvisor.actors.link.session import HandshakeFailed
from mcpvisor.actors.process import SpawnError, describe_exit

if TYPE_CHECKING:
    from mcpvisor.actors.link import Link

logger = logging.getLogger(__name__)

OUR_STOP: Final = "stopped by mcpvisor"
"""The close reason a link gets when we end it ourselves (actors.link); never a failure text."""

WRITE_FAILED: Final = "cannot write to it"
"""How actors.link words a close after a failed write (EPIPE); the exit status is better."""

STDERR_TAIL_LINES: Final = 3
"""Last stderr lines quoted in a failure reason (the link keeps more, for the log)."""


def classify(exc: BaseException, attempt: Link | None, server: str) -> str:
    """The failure text for an exception out of a start or a life; re-raises
    cancellation and anything that is not an `Exception` (docs/style.md rule 14)."""
    if isinstance(exc, BaseExceptionGroup):
        cancelled, rest = exc.split(trio.Cancelled)
        if rest is None:
            raise exc
        if rest.split(Exception)[1] is not None:
            raise exc  # KeyboardInterrupt, SystemExit: not ours to swallow
        if cancelled is not None:
            # Being cancelled wins (the text is logged, not counted).
            logger.debug("%s: failure during cancellation: %s", server, describe_exception(rest))
            raise cancelled from None
        leaf = first_leaf(rest)
    elif isinstance(exc, Exception):
        leaf = exc
    else:
        raise exc
    text = failure_text(leaf, attempt)
    logger.debug("%s: start or connection failed: %s", server, text, exc_info=exc)
    return text


def failure_text(leaf: BaseException, attempt: Link | None) -> str:
    """Why a start or a connection failed, as precisely as the link can tell."""
    closed = attempt.close_reason if attempt is not None else None
    if closed and closed.startswith(WRITE_FAILED):
        return exit_text(attempt) or closed  # EPIPE: the exit status says why
    if closed and closed != OUR_STOP:
        return closed
    if isinstance(leaf, SpawnError):
        return str(leaf)
    sdk_error = _sdk_error(leaf)
    connection_lost = isinstance(leaf, UpstreamDied | anyio.EndOfStream | anyio.BrokenResourceError
                                 | anyio.ClosedResourceError | trio.BrokenResourceError) or (
        sdk_error is not None and sdk_error.code == wire.CONNECTION_CLOSED)
    if connection_lost:
        exited = exit_text(attempt)
        if exited is not None:
            return exited
    if isinstance(leaf, UpstreamDied):
        return leaf.reason
    if sdk_error is not None:
        return with_stderr(f"handshake failed: {sdk_error.message}", attempt)
    if isinstance(leaf, HandshakeFailed):  # a stdio link's own handshake: the same words
        return with_stderr(leaf.reads_as, attempt)
    if isinstance(leaf, ProxyError):
        return leaf.message
    return with_stderr(describe_exception(leaf), attempt)


def _sdk_error(leaf: BaseException) -> Any:
    """The JSON-RPC error of the SDK's ``MCPError`` (an SDK link's handshake or transport),
    or None. No such error exists unless an SDK link loaded the SDK, so a proxy whose
    upstreams all run over stdio never imports it for this check."""
    exceptions = sys.modules.get("mcp.shared.exceptions")
    if exceptions is not None and isinstance(leaf, exceptions.MCPError):
        return leaf.error
    return None


def exit_text(attempt: Link | None) -> str | None:
    """"exited with status 2: <last stderr lines>" once the attempt's process is reaped."""
    proc = getattr(attempt, "proc", None)
    status = getattr(proc, "returncode", None)
    if status is None:
        return None
    return with_stderr(describe_exit(status), attempt)


def with_stderr(text: str, attempt: Link | None) -> str:
    """``text``, followed by the last stderr lines of the attempt's process if it has any."""
    stderr = getattr(attempt, "stderr", None)
    tail = stderr.tail(STDERR_TAIL_LINES) if stderr is not None else ""
    return f"{text}: {tail}" if tail else text


def first_leaf(exc: BaseException) -> BaseException:
    """The first exception in a (nested) group that is not a cancellation."""
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            if not isinstance(inner, trio.Cancelled):
                return first_leaf(inner)
    return exc


def describe_exception(exc: BaseException) -> str:
    """``Type: message`` of the first non-cancellation exception in ``exc``."""
    leaf = first_leaf(exc)
    text = str(leaf)
    return f"{type(leaf).__name__}: {text}" if text else type(leaf).__name__


def holds(exc: BaseException, kind: type[BaseException]) -> bool:
    """``exc`` is, or (in a group, or as a cause) carries, a ``kind``."""
    seen: set[int] = set()
    todo = [exc]
    while todo:
        e = todo.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, kind):
            return True
        if isinstance(e, BaseExceptionGroup):
            todo.extend(e.exceptions)
        for nxt in (e.__cause__, e.__context__):
            if nxt is not None:
                todo.append(nxt)
    return False
