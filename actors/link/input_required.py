"""The ``input_required`` driver: a 2026-07-28 upstream asks a handshake-era client for input.

The upstream answers ``resultType: input_required`` with the requests it needs
(sampling, elicitation, roots); a handshake-era client cannot read that, so the proxy
asks the client with server-to-client requests and retries with the answers
(SEP-2322), as the SDK's own client driver does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

import trio

from mcpvisor.actors import wire
from mcpvisor.actors.errors import UpstreamError

if TYPE_CHECKING:
    from mcpvisor.actors.link.ports import CallOrigin, RetryingLink

INPUT_REQUIRED_ROUNDS: Final = 10
"""Rounds of ``input_required`` the proxy drives for a handshake-era client before giving up
(the SDK's DEFAULT_INPUT_REQUIRED_MAX_ROUNDS; TypeScript, C# and Go SDKs use the same)."""

INPUT_REQUIRED_METHODS: Final = frozenset({"tools/call", "prompts/get", "resources/read"})
"""The requests whose answer may be ``input_required`` (SEP-2322)."""

STATE_ONLY_BACKOFF_S: Final = (0.05, 0.1, 0.2, 0.25)
"""Sleeps between rounds that carry only ``requestState`` (the SDK driver's 50 ms doubling to 250 ms)."""



async def drive_input_required(link: RetryingLink, method: str, params: Mapping[str, Any] | None,
                               result: dict[str, Any], origin: CallOrigin | None,
                               timeout: float,  # noqa: ASYNC109 - an idle timeout that progress resets, not a deadline
                               max_time: float) -> dict[str, Any]:
    """A 2026-07-28 upstream asked for input (sampling, elicitation, roots) and the client
    speaks the handshake era: ask the client with server-to-client requests, retry with the
    answers (SEP-2322), as the SDK's own client driver does."""
    if origin is None:
        raise UpstreamError(wire.METHOD_NOT_FOUND,
                            f"server {link.server} needs input from a client, and no client is attached")
    current = dict(params or {})
    state_only = 0
    for _round in range(INPUT_REQUIRED_ROUNDS):
        requests = result.get("inputRequests") or {}
        responses: dict[str, Any] = {}
        if isinstance(requests, Mapping):
            for key, request in requests.items():
                if not isinstance(request, Mapping) or not isinstance(request.get("method"), str):
                    raise UpstreamError(wire.INTERNAL_ERROR,
                                        f"server {link.server} sent a malformed input request")
                responses[str(key)] = await origin.server_request(request["method"], request.get("params"))
        if responses:
            current["inputResponses"] = responses
            state_only = 0
        else:
            current.pop("inputResponses", None)
            await trio.sleep(STATE_ONLY_BACKOFF_S[min(state_only, len(STATE_ONLY_BACKOFF_S) - 1)])
            state_only += 1
        if "requestState" in result:
            current["requestState"] = result["requestState"]
        else:
            current.pop("requestState", None)
        result = await link.request_once(method, current, origin=origin, timeout=timeout, max_time=max_time)
        if result.get("resultType") != "input_required":
            return result
    raise UpstreamError(wire.INTERNAL_ERROR, f"server {link.server} kept asking for input for more than "
                                             f"{INPUT_REQUIRED_ROUNDS} rounds")
