"""What the link's helpers need of a link, and what a link needs of a request's client.

`mcpvisor.actors.link.base.Link` drives ``input_required`` rounds
(`mcpvisor.actors.link.input_required`) and hands its SDK session callbacks that answer
the upstream's own requests (`mcpvisor.actors.link.sdk_session`) and opens its session
(`mcpvisor.actors.link.session`); those helpers call back into
the link. Typing them against these ports, not the `Link` class, keeps the arrows one way
(the link imports its helpers, never the reverse) and says what each helper touches.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol


class CallOrigin(Protocol):
    """The client side of one forwarded request: who gets its mid-call traffic."""

    # Read-only properties: a link only reads them, and `FastCall.progress_token` is a property.
    @property
    def progress_token(self) -> int | str | None:
        """The client's own progress token for this request, if it asked for progress."""

    @property
    def modern(self) -> bool:
        """The client speaks 2026-07-28: it drives ``input_required`` rounds itself."""

    @property
    def log_level(self) -> str | None:
        """A 2026-07-28 client's own log level for this request (``_meta``), if it asked for logs."""

    @property
    def client_capabilities(self) -> Mapping[str, Any] | None:
        """The capabilities the client declared (None: not known; the proxy's own apply)."""

    async def log(self, params: dict[str, Any]) -> None:
        """Deliver an upstream's log message on this request's stream (2026-07-28 clients)."""

    async def progress(self, params: dict[str, Any]) -> None:
        """Deliver a progress notification (``params`` already carries the client's token)."""

    async def server_request(self, method: str, params: dict[str, Any] | None) -> dict[str, Any]:
        """Ask the client (sampling, elicitation, roots); raises `ProxyError` if it cannot."""


class RetryingLink(Protocol):
    """What driving a 2026-07-28 upstream's ``input_required`` rounds needs of its link."""

    @property
    def server(self) -> str:
        """The server's name, for the errors the client sees."""

    async def request_once(self, method: str, params: Mapping[str, Any] | None, *, origin: CallOrigin | None,
                           timeout: float,  # noqa: ASYNC109 - an idle timeout that progress resets
                           max_time: float) -> dict[str, Any]:
        """One request to the upstream, without retrying it."""


class AnsweringLink(Protocol):
    """What the SDK session's callbacks need of their link: a way to ask the right client."""

    async def answer_server_request(self, method: str, params: dict[str, Any] | None) -> dict[str, Any]:
        """Answer a request (sampling, elicitation, roots) the upstream sent."""


class HandshakingLink(Protocol):
    """What opening a session in our own bytes needs of its link (`mcpvisor.actors.link.session`)."""

    async def handshake_request(self, method: str, params: dict[str, Any], *,
                                timeout: float) -> dict[str, Any]:  # noqa: ASYNC109 - the request's own bound
        """One handshake request and its result, never cancelled upstream.

        Raises:
            UpstreamError: the server answered with an error.
            CallTimeout: no answer within ``timeout``.
            UpstreamDied: the connection ended first.
        """

    async def notify(self, method: str, params: Mapping[str, Any] | None) -> None:
        """Send a notification."""
