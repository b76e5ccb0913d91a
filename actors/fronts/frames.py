"""What every front says about a client frame it cannot serve, decided once for all of them.

Owns the sans-IO checks the stdio, websocket and streamable HTTP fronts apply to each
frame a client sends, before anything else reads it:

* `MAX_JSON_DEPTH`: a frame nested deeper is refused (-32600, with its id when it can
  be read) instead of reaching a recursive decoder: msgspec and the standard library
  raise `RecursionError` near Python's recursion limit, which used to end the process;
* `decode_client_frame`: the envelope, or the `Refusal` for a frame that is not JSON
  (-32700; a lone UTF-16 surrogate escape such as ``"\\ud800"`` is refused the same
  way, with the request's id when it can be read), not one JSON object (-32600, batches
  were removed in MCP 2025-06-18), or whose id is not a string or an integer (-32600);
* `request_refusal`: what no front may forward: no method, result or error; a request
  with a null id; a request whose ``jsonrpc`` is not ``"2.0"``.

Duplicate ids in flight are each front's own (its table of requests in flight); the
refusal's wording is `duplicate_id`.
"""

from __future__ import annotations

import re
from typing import Any, Final

import msgspec
from msgspec import UNSET, UnsetType

from mcpvisor.actors import wire

MAX_JSON_DEPTH: Final = 64
"""Deepest nesting of arrays and objects a client frame may have. An MCP message is a
few levels of envelope around arguments or schemas that rarely pass 20; the SDK's own
parser (pydantic's jiter) stops at 200, and msgspec and ``json`` raise `RecursionError`
near Python's limit of 1,000, so the bound sits well below both."""

_STRING: Final = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
"""A JSON string (escapes included), so brackets inside strings are not counted."""
_INNERMOST: Final = re.compile(rb"\[[^\[\]{}]*\]|\{[^\[\]{}]*\}")
"""An array or object with no array or object inside: one level, removed per pass."""
_SURROGATE: Final = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
"""A UTF-16 surrogate escape: paired ones decode, a lone one is not Unicode."""


class Refusal(msgspec.Struct, frozen=True):
    """The JSON-RPC error a front answers a frame with instead of serving it."""

    id: int | str | None
    code: int
    message: str

    def frame(self) -> bytes:
        """The error response, one line with its newline."""
        return wire.error_frame(self.id, self.code, self.message)

    def body(self) -> dict[str, Any]:
        """The error response as a JSON-RPC object (for a front that encodes it itself)."""
        return {"jsonrpc": "2.0", "id": self.id, "error": {"code": self.code, "message": self.message}}


class _LooseEnvelope(msgspec.Struct):
    id: Any = UNSET


_loose_decoder: Final = msgspec.json.Decoder(_LooseEnvelope)


def nesting_exceeds(data: bytes, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether ``data`` nests arrays and objects deeper than ``limit`` levels.

    Costs two ``bytes.count`` calls for any frame with at most ``limit`` brackets (every
    ordinary request); otherwise strings are blanked and the innermost levels removed
    pass by pass, at most ``limit`` passes, all in C. Never recurses. Brackets that never
    close count as nesting, so such garbage is refused as too deep rather than parsed.
    """
    if data.count(b"[") + data.count(b"{") <= limit:
        return False
    text = _STRING.sub(b'""', data)
    for _ in range(limit):
        if text.count(b"[") + text.count(b"{") == 0:
            return False
        text, removed = _INNERMOST.subn(b"", text)
        if not removed:
            break
    return text.count(b"[") + text.count(b"{") > 0


def _readable_id(data: bytes) -> int | str | None:
    """The frame's id if its envelope can be read and the id is valid, else None."""
    try:
        env = wire.decode_envelope(data)
    except (wire.DecodeError, wire.ValidationError, RecursionError):
        return None
    return None if env.id is UNSET else env.id


def decode_client_frame(data: bytes) -> wire.Envelope | Refusal:
    """The envelope of one client frame, or the refusal to answer it with.

    Never raises: deep nesting is checked before any recursive decoder sees the frame.
    """
    if nesting_exceeds(data):
        return Refusal(_readable_id(data), wire.INVALID_REQUEST,
                       f"invalid request: JSON nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        return wire.decode_envelope(data)
    except wire.ValidationError:
        return _shape_refusal(data)
    except wire.DecodeError as exc:
        if _SURROGATE.search(data) is not None:
            # A lone surrogate escape is JSON by grammar but no Unicode string: neither
            # msgspec nor the SDK's parser accepts it, so no upstream could either. The
            # frame with its surrogates replaced tells whether that was the only fault,
            # and gives the id to answer with.
            try:
                env = wire.decode_envelope(_SURROGATE.sub(rb"\\ufffd", data))
            except (wire.DecodeError, wire.ValidationError):
                pass
            else:
                return Refusal(None if env.id is UNSET else env.id, wire.PARSE_ERROR,
                               "parse error: a \\u escape is a lone UTF-16 surrogate (not valid Unicode)")
        return Refusal(None, wire.PARSE_ERROR, f"parse error: {exc}")
    except RecursionError:  # unreachable below MAX_JSON_DEPTH; kept so no frame ends a front
        return Refusal(None, wire.INVALID_REQUEST, "invalid request: JSON nested too deeply")


def _shape_refusal(data: bytes) -> Refusal:
    """Valid JSON the envelope refused: say whether it was the id or the whole shape."""
    try:
        loose = _loose_decoder.decode(data)
    except (wire.DecodeError, wire.ValidationError, RecursionError):
        return Refusal(None, wire.INVALID_REQUEST,
                       "invalid request: expected one JSON-RPC object (batches are not supported)")
    rid = loose.id
    if rid is not UNSET and rid is not None and (type(rid) is bool or not isinstance(rid, int | str)):
        return Refusal(None, wire.INVALID_REQUEST,
                       f"invalid request: id must be a string or an integer, not {_json_type(rid)}")
    valid_id: int | str | None = rid if isinstance(rid, int | str) else None
    return Refusal(valid_id, wire.INVALID_REQUEST,
                   "invalid request: jsonrpc, method, result or error has the wrong type")


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, float):
        return "a number with a fraction or exponent"
    if isinstance(value, list):
        return "an array"
    return "an object"


def request_refusal(env: wire.Envelope) -> Refusal | None:
    """Why no front may forward ``env``, or None when it may.

    Refused: a message with no method, result or error; a request (method and id) with a
    null id (JSON-RPC 2.0: MCP ids MUST NOT be null); a request whose ``jsonrpc`` is not
    ``"2.0"``. Notifications are never refused (MCP: the receiver MUST NOT answer them).
    """
    rid: int | str | UnsetType | None = env.id
    if env.method is UNSET:
        if env.result is UNSET and env.error is UNSET:
            return Refusal(None if rid is UNSET else rid, wire.INVALID_REQUEST,
                           "invalid request: no method, result or error" if rid is not UNSET
                           else "invalid request: no method")
        return None
    if rid is UNSET:
        return None
    if rid is None:
        return Refusal(None, wire.INVALID_REQUEST, "invalid request: id must not be null")
    if env.jsonrpc != "2.0":
        return Refusal(rid, wire.INVALID_REQUEST, 'invalid request: "jsonrpc" must be "2.0"')
    return None


def duplicate_id(rid: int | str) -> Refusal:
    """The refusal of a request whose id is already in flight on its connection."""
    return Refusal(rid, wire.INVALID_REQUEST,
                   f"invalid request: id {rid!r} is already in use by a request in flight")
