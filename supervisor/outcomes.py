"""What a finished tool call came to: the one classification the journal and the metrics share.

Owns `OUTCOMES` and `outcome_of`. Its own module, with nothing heavy imported, so that
the metrics every HTTP front records do not load the journal (SQLite and its writer)
before the front's first answers.
"""

from __future__ import annotations

from typing import Final

import trio

from mcpvisor.actors import wire
from mcpvisor.actors.harness import CancelledByClient

__all__ = ["IS_ERROR", "OUTCOMES", "outcome_of"]

OUTCOMES: Final = ("ok", "tool_error", "timeout", "server_down", "cancelled", "error")
"""What a call came to: a result, a result with ``isError``, the call's timeout, the
server down or dead under it, cancelled by the client, any other protocol error."""

IS_ERROR: Final = b'"isError":true'
"""A result that says it failed, as compact JSON writes it."""


def outcome_of(error: BaseException | None, result_bytes: bytes | None) -> str:
    """Classify a call (see `OUTCOMES`)."""
    if error is None:
        return "tool_error" if result_bytes is not None and IS_ERROR in result_bytes else "ok"
    if isinstance(error, trio.Cancelled | CancelledByClient):
        return "cancelled"
    code = getattr(error, "code", None)
    if code is None:  # the SDK's MCPError keeps it on .error
        code = getattr(getattr(error, "error", None), "code", None)
    if code == wire.REQUEST_TIMEOUT:
        return "timeout"
    if code in (wire.UPSTREAM_UNAVAILABLE, wire.CONNECTION_CLOSED):
        return "server_down"
    return "error"
