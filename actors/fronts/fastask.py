"""What the fast path asks a client on an upstream's behalf, and the client's answers.

Owns `ClientAsks`, a base class of `mcpvisor.actors.fronts.fastpath.FastPath`: sending the
client a request an upstream made mid-call (sampling, elicitation, roots) under an id of
ours (`SERVER_REQUEST_PREFIX`), waiting for its answer within the call's time, and taking
the answer when it comes (a late one is dropped); whether the handshake-era client
declared the capability a request needs; `settle_reply`, a client's answer as the result
or error its waiter gets (the HTTP fast path takes answers that come as POSTs with it).

Separate from `mcpvisor.actors.fronts.fastpath`, which takes the client's calls to the
upstreams: this is the other direction. A base class rather than an object the
connection holds, so a call asks through its connection as before, with no object in
between. Loads no SDK, as the rest of the stdio fast path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import trio
from msgspec import UNSET

from mcpvisor.actors import wire
from mcpvisor.actors.bridge import CAPABILITY_OF
from mcpvisor.actors.errors import UpstreamError
from mcpvisor.actors.messages import Reply

if TYPE_CHECKING:
    import itertools
    from collections.abc import Callable

SERVER_REQUEST_PREFIX: Final = "mvs-"
"""Ids of requests the proxy sends the client on an upstream's behalf (sampling, elicitation, roots)."""


class ClientAsks:
    """A connection's requests to its client (`FastPath` sets these attributes)."""

    requests: dict[str, Reply[Any]]
    client_capabilities: dict[str, Any]
    _ids: itertools.count[int]

    if TYPE_CHECKING:
        async def send(self, frame: bytes) -> None: ...

    def client_response(self, env: wire.Envelope, line: bytes) -> bool:
        """The client answered a request we sent on an upstream's behalf."""
        rid = env.id
        if type(rid) is not str or not rid.startswith(SERVER_REQUEST_PREFIX):
            return False
        reply = self.requests.pop(rid, None)
        if reply is None:
            return True  # late answer to a request nobody waits for any more
        settle_reply(reply, env)
        return True

    def client_capable(self, method: str) -> bool:
        """Whether the handshake-era client declared the capability ``method`` needs."""
        needed = CAPABILITY_OF.get(method)
        return needed is None or needed in self.client_capabilities

    async def ask_client(self, method: str, params: dict[str, Any] | None,
                         max_time: Callable[[], float]) -> dict[str, Any]:
        """Send the client ``method`` on an upstream's behalf and wait for its answer.

        Raises `UpstreamError` (``REQUEST_TIMEOUT``) if no answer comes within
        ``max_time()`` seconds of sending; a later answer is dropped (`client_response`).
        """
        rid = f"{SERVER_REQUEST_PREFIX}{next(self._ids)}"
        reply: Reply[dict[str, Any]] = Reply()
        self.requests[rid] = reply
        try:
            await self.send(wire.request_frame(rid, method, params))
            with trio.fail_after(max_time()):
                return await reply.wait()
        except trio.TooSlowError:
            raise UpstreamError(wire.REQUEST_TIMEOUT, f"the client did not answer {method}") from None
        finally:
            self.requests.pop(rid, None)


def settle_reply(reply: Reply[Any], env: wire.Envelope) -> None:
    """A client's answer (``env``) to a request sent to it on an upstream's behalf: its
    result, or its error, to whoever waits on ``reply``; a malformed one as an error."""
    if env.error is not UNSET:
        try:
            err = wire.decode_error(env.error)
            reply.fail(UpstreamError(err.code, err.message, err.data))
        except (wire.DecodeError, wire.ValidationError):
            reply.fail(UpstreamError(wire.INTERNAL_ERROR, "the client sent a malformed error"))
    else:
        try:
            reply.set(wire.decode_dict(env.result) if env.result is not UNSET else {})
        except (wire.DecodeError, wire.ValidationError):
            reply.fail(UpstreamError(wire.INTERNAL_ERROR, "the client sent a malformed result"))
