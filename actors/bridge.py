"""Server-to-client requests of a handshake-era upstream, asked of a 2026-07-28 client.

A handshake-era upstream asks mid-call (``sampling/createMessage``,
``elicitation/create``, ``roots/list``) and waits for the answer on the same
connection. A 2026-07-28 client cannot receive such a request: it learns what the
server needs from an ``input_required`` result, answers, and retries the original
request with ``inputResponses`` and the echoed ``requestState`` (SEP-2322). The
proxy joins the two: it keeps the upstream call running, answers the client's
request with ``input_required`` carrying the upstream's pending questions, and when
the client retries it hands the answers to the waiting upstream and waits again,
for the result or the next questions.

Owns:

* `ParkedCall`: one upstream call kept waiting between the client's legs (its
  questions not yet shown, its questions waiting for an answer, its outcome);
* `ParkedCalls`: the SDK path's table of them, keyed by the opaque ``requestState``
  token the proxy mints (`new_state_token`: unguessable, so a token is the capability
  to resume the call), each dropped when the call ends and its outcome has been
  delivered, or when the client does not come back in `INPUT_WAIT_S`. Every
  ``input_required`` leg carries a fresh token and the previous one stops working, as a
  server's own state moves on with each round (a replayed or altered state is refused);
* `missing_capability`: the -32021 error a client gets when the upstream asks it
  something it did not declare it can answer (its call is refused, the upstream's
  request cancelled).

A round gathers every question the upstream has put before the client sees it: the
questions a handshake-era server sends together (or before the first is answered) reach
the client as one ``input_required`` result with several ``inputRequests``, once
`GATHER_S` has passed without another joining them. The keys of ``inputRequests`` are the
proxy's, since a handshake-era request carries none: ``<kind>-<n>``, where ``kind`` is the
capability the request needs (``elicitation``, ``sampling``, ``roots``; any other method
with ``/`` as ``-``) and ``n`` counts the call's questions from 1 in the order the upstream
asked them (`question_key`). A question keeps its key until it is answered: a retry that
leaves one unanswered (or answers it with something that is not an object) gets it again,
under the same key, in the next round.

A client may also answer under keys it did not read from the round: the key it expects of
the server (``user_name``), or answers it supplies with its first request, before any round
(SEP-2322 lets a client send ``inputResponses`` on any request). The handshake wire has no
keys to check them against, so the proxy goes by fit (`claim`): an answer under a key the
proxy did not ask is taken as an open question's only when it is the only such answer that
fits that question, and fits no other open question. Fitting is by kind: an elicitation
answer (``action``; when accepted, ``content`` that satisfies the question's
``requestedSchema``: its required fields there, no field it does not name, each of the
type it says), a sampling answer (``role`` and ``content``), a roots answer (``roots``).
Anything ambiguous is taken for nothing and the question is asked (again); other unknown
keys are ignored, as a server ignores responses it did not ask for.

Both the SDK path (`mcpvisor.actors.fronts.sdk`, `mcpvisor.actors.fronts.origins`) and the
stdio fast path (`mcpvisor.actors.fronts.fastpath`, `mcpvisor.actors.fronts.fastcall`) use
`ParkedCall`; the fast path keeps its own table, of its calls by the same token (`FastPath.parked`).
"""

from __future__ import annotations

import itertools
import logging
import secrets
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

import trio

from mcpvisor.actors import wire
from mcpvisor.actors.core.vocabulary import DEFAULT_TIMEOUT_S
from mcpvisor.actors.errors import ProxyError, UpstreamError
from mcpvisor.actors.messages import Reply

__all__ = ["CAPABILITY_OF", "GATHER_MAX_S", "GATHER_S", "INPUT_WAIT_S", "MISSING_REQUIRED_CLIENT_CAPABILITY",
           "STATE_PREFIX", "ParkedCall", "ParkedCalls", "claim", "declared", "fits", "missing_capability",
           "new_state_token", "question_key", "request_state_of", "run_parked"]

logger = logging.getLogger(__name__)

INPUT_WAIT_S: Final = DEFAULT_TIMEOUT_S
"""How long an upstream's question waits for the 2026-07-28 client to come back with the
answer (its retry with ``inputResponses``); then the upstream gets an error for it. The
same as the default call inactivity timeout (`DEFAULT_TIMEOUT_S`): the upstream call
would give up on a silent client after as long on the handshake-era path."""

STATE_PREFIX: Final = "mcpvisor-bridge:"
"""Prefix of the ``requestState`` tokens the proxy mints; a retry carrying another
state (the upstream's own, on a 2026-07-28 upstream) is forwarded as it came."""

GATHER_S: Final = 0.05
"""How long a round waits after the upstream's latest question for another to join it
before the client is shown the round. A handshake-era server that needs several answers
sends its requests back to back (each from its own task); they reach the proxy within
milliseconds, and with nothing on the wire saying "that was the last", a short quiet
period is what tells a round from the next. A single question pays this once per round."""

GATHER_MAX_S: Final = 0.5
"""Bound on one round's gathering, however the upstream keeps trickling questions in."""

TOKEN_BYTES: Final = 16
"""Entropy of a token (128 bits: the token alone resumes the call, so it must not be guessable)."""


CAPABILITY_OF: Final = {"sampling/createMessage": "sampling", "elicitation/create": "elicitation",
                         "roots/list": "roots"}
"""The client capability each server-to-client request needs (MCP: a server MUST NOT send
a request the client did not declare)."""


MISSING_REQUIRED_CLIENT_CAPABILITY: Final = -32021
"""MCP 2026-07-28: a request whose handling needs a client capability the client did not
declare is refused with this code (HTTP 400 on streamable HTTP)."""


def missing_capability(method: str) -> UpstreamError:
    """The refusal of a call whose upstream asked the client ``method``, which its declared
    capabilities do not allow (``data.requiredCapabilities`` names the capability as a
    ClientCapabilities object, e.g. ``{"sampling": {}}``)."""
    needed = CAPABILITY_OF.get(method, method)
    return UpstreamError(MISSING_REQUIRED_CLIENT_CAPABILITY,
                         f"the client did not declare the {needed} capability, which the server needs "
                         f"for this request ({method})",
                         {"requiredCapabilities": {needed: {}}})


def declared(capabilities: object, method: str) -> bool:
    """Whether a 2026-07-28 client's ``_meta`` capabilities allow asking it ``method``."""
    needed = CAPABILITY_OF.get(method)
    return needed is None or (isinstance(capabilities, Mapping) and capabilities.get(needed) is not None)


def question_key(method: str, n: int) -> str:
    """The ``inputRequests`` key of the call's ``n``-th question (from 1), asking ``method``:
    ``elicitation-1``, ``sampling-2``, ``roots-3``; another method with ``/`` as ``-``."""
    kind = CAPABILITY_OF.get(method) or method.replace("/", "-")
    return f"{kind}-{n}"


_JSON_TYPES: Final[dict[str, tuple[type, ...]]] = {
    "string": (str,), "number": (int, float), "integer": (int,), "boolean": (bool,),
}
"""The primitive types an elicitation's ``requestedSchema`` may give a field (MCP restricts
it to a flat object of these)."""

ELICIT_ACTIONS: Final = frozenset({"accept", "decline", "cancel"})


def _satisfies(content: object, schema: object) -> bool:
    """Whether an accepted elicitation's ``content`` satisfies ``requestedSchema``: every
    required field present, no field the schema does not name, each of its type."""
    if not isinstance(content, Mapping) or not isinstance(schema, Mapping):
        return False
    properties = schema.get("properties")
    properties = properties if isinstance(properties, Mapping) else {}
    required = schema.get("required")
    if isinstance(required, list) and any(name not in content for name in required):
        return False
    for name, value in content.items():
        field = properties.get(name)
        if not isinstance(field, Mapping):
            return False
        kinds = _JSON_TYPES.get(str(field.get("type")))
        if kinds is not None and not isinstance(value, kinds):
            return False
        if kinds is not None and bool not in kinds and isinstance(value, bool):  # JSON's true is no number
            return False
        if isinstance(field.get("enum"), list) and value not in field["enum"]:
            return False
    return True


def fits(question: Mapping[str, Any], answer: object) -> bool:
    """Whether ``answer`` is shaped as an answer to ``question`` (a request to the client:
    ``method``, ``params``); see the module's note on answers under unknown keys."""
    if not isinstance(answer, Mapping):
        return False
    method, params = question.get("method"), question.get("params") or {}
    if method == "elicitation/create":
        action = answer.get("action")
        if action not in ELICIT_ACTIONS:
            return False
        return action != "accept" or _satisfies(answer.get("content") or {}, params.get("requestedSchema"))
    if method == "sampling/createMessage":
        return "role" in answer and isinstance(answer.get("content"), Mapping | list)
    if method == "roots/list":
        return isinstance(answer.get("roots"), list)
    return False


def claim(questions: Mapping[str, Mapping[str, Any]], answers: Mapping[str, Any]) -> dict[str, str]:
    """Which answer (by its key) each open question (by its key) takes when the answers are
    under keys the proxy did not ask: an answer that is the only one fitting a question and
    fits no other open question. Ambiguous pairs are left out: those questions are asked."""
    fitting = {q: [a for a, answer in answers.items() if fits(question, answer)]
               for q, question in questions.items()}
    taken: dict[str, str] = {}
    for q, candidates in fitting.items():
        if len(candidates) == 1 and sum(candidates[0] in c for c in fitting.values()) == 1:
            taken[q] = candidates[0]
    return taken


def new_state_token() -> str:
    """A fresh ``requestState`` token for a parked call (unguessable: see `TOKEN_BYTES`)."""
    return STATE_PREFIX + secrets.token_urlsafe(TOKEN_BYTES)


def request_state_of(params: Mapping[str, Any] | None) -> str | None:
    """The proxy's own ``requestState`` in a retried request's params, if it carries one."""
    state = (params or {}).get("requestState")
    return state if isinstance(state, str) and state.startswith(STATE_PREFIX) else None


class ParkedCall:
    """One upstream call that asks the client questions across ``input_required`` legs.

    The upstream side calls `ask` (from the link's server-request handler) and `finish`
    (when the call ends); the client side calls `next_leg` for what to answer the
    client's current leg, and `answer` with the responses of the client's retry.
    """

    def __init__(self, token: str, offered: Mapping[str, Any] | None = None) -> None:
        self.token = token
        self._offered: dict[str, Any] = dict(offered) if isinstance(offered, Mapping) else {}
        """Answers the client sent with its first request, before any round: each is taken by
        the question it alone fits (`claim`) before that question is shown."""
        self.rekeyed: Callable[[str, str], None] | None = None
        """Told (old, new) each time a leg gives the call a fresh token (its table re-keys it)."""
        self._keys = itertools.count(1)
        self._unasked: dict[str, dict[str, Any]] = {}
        """Questions the client has not been shown yet (or must be shown again), by key."""
        self._questions: dict[str, dict[str, Any]] = {}
        """Every open question, by key (what a round shows again when it went unanswered)."""
        self._minted: set[str] = set()
        """Every key this call has asked under: an answer under one of them (a client that
        sends its earlier rounds' answers again) is never taken for another question."""
        self._waiting: dict[str, Reply[dict[str, Any]]] = {}
        self._changed = trio.Event()
        self.outcome: dict[str, Any] | ProxyError | None = None
        self.done = False
        self.delivered = trio.Event()
        self.scope: trio.CancelScope | None = None

    def refuse(self, error: ProxyError) -> None:
        """The call cannot go on (the upstream asked what the client cannot answer): the
        client's current or next leg gets ``error`` and the upstream call is stopped."""
        if self.outcome is None:
            self.finish(error)
        if self.scope is not None:
            self.scope.cancel()

    def cancel(self) -> None:
        """The client abandoned the call: stop the upstream call (it is told to cancel) and
        answer its open questions at once."""
        if self.scope is not None:
            self.scope.cancel()
        self._fail_waiting(UpstreamError(wire.INTERNAL_ERROR, "the client cancelled the call"))

    def _fail_waiting(self, error: UpstreamError) -> None:
        for reply in self._waiting.values():
            reply.fail(error)

    async def ask(self, method: str, params: dict[str, Any] | None,
                  asked: Callable[[], Awaitable[None]] | None = None) -> dict[str, Any]:
        """Put one of the upstream's questions to the client; the answer of its retry.

        ``asked`` runs once the question is queued (the fast path uses it to answer the
        client's open leg once the round is `gathered`).

        Raises:
            UpstreamError: the client did not come back within `INPUT_WAIT_S`, or the
                call ended first (REQUEST_TIMEOUT / the client's own error).
        """
        key = question_key(method, next(self._keys))
        self._minted.add(key)
        request: dict[str, Any] = {"method": method}
        if params is not None:
            request["params"] = params
        reply: Reply[dict[str, Any]] = Reply()
        self._unasked[key] = request
        self._questions[key] = request
        self._waiting[key] = reply
        self._wake()
        try:
            if asked is not None:
                await asked()
            with trio.fail_after(INPUT_WAIT_S):
                return await reply.wait()
        except trio.TooSlowError:
            raise UpstreamError(wire.REQUEST_TIMEOUT,
                                f"the client did not answer {method} within {INPUT_WAIT_S:g}s") from None
        finally:
            self._unasked.pop(key, None)
            self._questions.pop(key, None)
            self._waiting.pop(key, None)

    def finish(self, outcome: dict[str, Any] | ProxyError) -> None:
        """The upstream call ended (result or error): the next leg gets it."""
        self.outcome = outcome
        self._fail_waiting(UpstreamError(wire.INTERNAL_ERROR, "the call has ended"))
        self._wake()

    def answer(self, responses: Mapping[str, Any] | None) -> None:
        """The client retried with ``inputResponses``: hand each to the question it answers
        (an unknown key is ignored, as a server ignores responses it did not ask for). A
        question shown and left unanswered, or answered with something that is not an
        object, is shown again, under its key, in the next round."""
        unknown: dict[str, Any] = {}
        for key, response in (responses or {}).items():
            if key in self._waiting and isinstance(response, Mapping):
                self._waiting.pop(key).set(dict(response))
            elif key not in self._minted:
                unknown[key] = response
        shown = {key: self._questions[key] for key in self._waiting if key not in self._unasked}
        for key, used in claim(shown, unknown).items():
            self._waiting.pop(key).set(dict(unknown[used]))
        for key in self._waiting:
            if key not in self._unasked:
                self._unasked[key] = self._questions[key]

    def take_leg(self) -> dict[str, Any] | ProxyError | None:
        """What the client's current leg answers now: the outcome, an ``input_required``
        result with the questions not yet shown, or None (nothing yet: wait)."""
        if self.outcome is not None:
            self.done = True
            self.delivered.set()
            return self.outcome
        if self._offered and self._unasked:
            for key, used in claim(self._unasked, self._offered).items():
                self._waiting.pop(key).set(dict(self._offered.pop(used)))
                del self._unasked[key]
        if not self._unasked:
            return None
        requests = dict(self._unasked)
        self._unasked.clear()
        old, self.token = self.token, new_state_token()
        if self.rekeyed is not None:
            self.rekeyed(old, self.token)
        return {"resultType": "input_required", "inputRequests": requests, "requestState": self.token}

    async def gathered(self) -> None:
        """Return once the questions not yet shown have gone `GATHER_S` without another
        joining them (at most `GATHER_MAX_S` in all), or the call has ended."""
        with trio.move_on_after(GATHER_MAX_S):
            while self.outcome is None:
                changed = self._changed
                with trio.move_on_after(GATHER_S) as quiet:
                    await changed.wait()
                if quiet.cancelled_caught:
                    return

    async def next_leg(self) -> dict[str, Any] | ProxyError:
        """Wait until the current leg has something to answer (see `take_leg`): the
        outcome, or a round of questions once it is `gathered`."""
        while True:
            if self.outcome is None and self._unasked:
                await self.gathered()
            leg = self.take_leg()
            if leg is not None:
                return leg
            await self._changed.wait()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = trio.Event()


class ParkedCalls:
    """The calls a 2026-07-28 client can resume, by their ``requestState`` token."""

    def __init__(self) -> None:
        self._calls: dict[str, ParkedCall] = {}

    def __len__(self) -> int:
        return len(self._calls)

    def open(self, offered: Mapping[str, Any] | None = None) -> ParkedCall:
        """A new parked call under a fresh token (call `close` when it is delivered);
        ``offered``: the ``inputResponses`` of the client's first request, if any."""
        call = ParkedCall(new_state_token(), offered)
        self._calls[call.token] = call
        call.rekeyed = self._rekey
        return call

    def _rekey(self, old: str, new: str) -> None:
        call = self._calls.pop(old, None)
        if call is not None:
            self._calls[new] = call

    def get(self, token: str) -> ParkedCall | None:
        return self._calls.get(token)

    def close(self, call: ParkedCall) -> None:
        self._calls.pop(call.token, None)


async def run_parked(parked: ParkedCall, forward: Callable[[], Awaitable[dict[str, Any]]],
                     forget: Callable[[], None], *,
                     task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Run one bridged upstream call to its end, beside the client's legs.

    The outcome (result or `ProxyError`, or the refusal `ParkedCall.refuse` set) goes to
    the client's current or next leg; if no leg takes it within `INPUT_WAIT_S` (the client
    left), it is dropped. ``forget`` runs
    at the end in every case. Cancelling the parked call (`ParkedCall.cancel`) abandons
    the upstream request, which tells the upstream to cancel (`mcpvisor.actors.link.base`).
    """
    try:
        with trio.CancelScope() as scope:
            parked.scope = scope
            task_status.started()
            try:
                outcome: dict[str, Any] | ProxyError = await forward()
            except ProxyError as exc:
                outcome = exc
            except Exception as exc:  # a bug must not take the front's nursery down
                logger.exception("bridged call failed")
                outcome = ProxyError(f"internal error: {type(exc).__name__}: {exc}")
            parked.finish(outcome)
        parked.scope = None
        if parked.outcome is not None:  # none when the client cancelled: nobody will ask
            with trio.move_on_after(INPUT_WAIT_S):
                await parked.delivered.wait()
    finally:
        parked.scope = None
        forget()
