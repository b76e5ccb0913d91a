"""JSON-RPC envelopes as msgspec structs, and the error frames the proxy writes itself.

Only the envelope is decoded on the proxy's own paths (id, method, and the payload
kept as `msgspec.Raw`), so arguments and results travel as the bytes they came as
(docs/hotpath.md, "Micro costs": 1.2 µs per request instead of 5.5 µs through pydantic).
"""

from __future__ import annotations

from typing import Any, Final

import msgspec
from msgspec import UNSET, Raw, UnsetType

# JSON-RPC 2.0 / MCP error codes, the same as the SDK's (``mcp_types``; a unit test holds
# them equal), written out so that what imports this module (the config, every CLI
# command) does not load the SDK's types, ~120 ms: CONNECTION_CLOSED is the SDK's code for
# a transport that closed under a pending request, REQUEST_TIMEOUT for one that timed out
# locally.
PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
INTERNAL_ERROR: Final = -32603
CONNECTION_CLOSED: Final = -32000
REQUEST_TIMEOUT: Final = -32001
PROTOCOL_VERSION_META_KEY: Final = "io.modelcontextprotocol/protocolVersion"
UPSTREAM_UNAVAILABLE: Final = -32002
"""Ours: the upstream that owns the target is down, restarting or its circuit is open."""
TOO_MANY_IN_FLIGHT: Final = -32003
"""Ours: the session already has its limit of requests in flight. JSON-RPC 2.0 leaves
-32000..-32099 to the implementation; the SDK holds -32000, -32001 and -32020 on, so ours
take -32002 and -32003."""

MODERN_MARKER: Final = PROTOCOL_VERSION_META_KEY.encode()
"""Bytes present in a request only when it carries the 2026-07-28 ``_meta`` envelope.
The per-call paths look for it with ``frame.find(MODERN_MARKER) >= 0``: ``bytes in bytes``
first tries the needle as an integer and raises and clears a TypeError before it
searches (CPython 3.11), twice the cost of ``find``."""

# What a stdio link's own handshake (`mcpvisor.actors.link.session`) offers and accepts,
# the SDK's values written out so that it opens without loading the SDK (a unit test
# holds each equal to the SDK's).
UNSUPPORTED_PROTOCOL_VERSION: Final = -32022
"""A 2026-07-28 server's refusal of a version it does not speak (``data.supported`` lists its own)."""
HANDSHAKE_PROTOCOL_VERSIONS: Final = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
"""The versions ``initialize`` may settle on, oldest first."""
LATEST_HANDSHAKE_VERSION: Final = "2025-11-25"
MODERN_PROTOCOL_VERSIONS: Final = ("2026-07-28",)
"""The versions ``server/discover`` may settle on, oldest first."""
LATEST_MODERN_VERSION: Final = "2026-07-28"


class Envelope(msgspec.Struct, omit_defaults=True, gc=False):
    """Any JSON-RPC message, envelope decoded, payloads left raw.

    Not tracked by the garbage collector (``gc=False``): it holds only strings, numbers
    and raw bytes, so it can be in no cycle, and two are made per proxied call."""

    jsonrpc: str | UnsetType = UNSET
    id: int | str | UnsetType | None = UNSET
    method: str | UnsetType = UNSET
    params: Raw | UnsetType = UNSET
    result: Raw | UnsetType = UNSET
    error: Raw | UnsetType = UNSET


class CallFrame(msgspec.Struct, gc=False):
    """A client frame read as a ``tools/call`` is: the envelope and the params as a map of
    raw values in one decode (an `Envelope` and then its params took two). A frame whose
    params are not an object does not read this way (`ValidationError`); its values are
    raw bytes, so it is in no cycle either."""

    jsonrpc: str | UnsetType = UNSET
    id: int | str | UnsetType | None = UNSET
    method: str | UnsetType = UNSET
    params: dict[str, Raw] | UnsetType = UNSET
    result: Raw | UnsetType = UNSET
    error: Raw | UnsetType = UNSET


class CancelParams(msgspec.Struct, omit_defaults=True):
    requestId: int | str | None = None
    reason: str | UnsetType = UNSET


class ErrorBody(msgspec.Struct, omit_defaults=True):
    code: int
    message: str
    data: Any = None


_envelope_decoder: Final = msgspec.json.Decoder(Envelope)
_call_decoder: Final = msgspec.json.Decoder(CallFrame)
_encoder: Final = msgspec.json.Encoder()
_dict_decoder: Final = msgspec.json.Decoder(dict[str, Any])
_raw_map_decoder: Final = msgspec.json.Decoder(dict[str, Raw])
_cancel_decoder: Final = msgspec.json.Decoder(CancelParams)
_error_decoder: Final = msgspec.json.Decoder(ErrorBody)

decode_envelope = _envelope_decoder.decode
decode_call = _call_decoder.decode
decode_dict = _dict_decoder.decode
decode_raw_map = _raw_map_decoder.decode
decode_cancel = _cancel_decoder.decode
decode_error = _error_decoder.decode
encode = _encoder.encode
DecodeError = msgspec.DecodeError
ValidationError = msgspec.ValidationError


def _as_text(value: object) -> str:
    """What `encode_line` writes, when told to take anything, for a value JSON has no type for."""
    return str(value)


_lenient_encoder: Final = msgspec.json.Encoder(enc_hook=_as_text)


def encode_line(obj: Any, *, anything: bool = False) -> bytes:
    """One JSON line (a JSON-RPC frame, a control-socket reply) with its newline.

    With ``anything``, a value JSON has no type for (a path, an opaque object in a status
    report) is written as its text instead of failing; frames on the wire never need it.
    """
    return (_lenient_encoder if anything else _encoder).encode(obj) + b"\n"


def error_frame(request_id: int | str | None, code: int, message: str, data: Any = None) -> bytes:
    """A complete JSON-RPC error response line."""
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return encode_line({"jsonrpc": "2.0", "id": request_id, "error": error})


RESULT_HEAD: Final = b'{"jsonrpc":"2.0","id":'
RESULT_KEY: Final = b',"result":'
FRAME_END: Final = b"}\n"


def result_frame(request_id: int | str, result: Any) -> bytes:
    """A complete JSON-RPC result response line (``result`` may be `msgspec.Raw`).

    A `Raw` result (the upstream's bytes, a 1 MiB one included) is copied once, into the
    line, rather than into an encoded object and again to add the newline: half the time
    for a small result, half the copying for a large one."""
    if type(result) is Raw:
        return b"".join((RESULT_HEAD, _encoder.encode(request_id), RESULT_KEY, result, FRAME_END))
    return encode_line({"jsonrpc": "2.0", "id": request_id, "result": result})


def notification_frame(method: str, params: Any = None) -> bytes:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        msg["params"] = params
    return encode_line(msg)


def request_frame(request_id: int | str, method: str, params: Any = None) -> bytes:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        msg["params"] = params
    return encode_line(msg)


def tool_error_result(text: str, structured: dict[str, Any] | None = None) -> dict[str, Any]:
    """A ``CallToolResult`` with ``isError`` set: a tool-level failure the model can read."""
    result: dict[str, Any] = {"content": [{"type": "text", "text": text}], "isError": True}
    if structured is not None:
        result["structuredContent"] = structured
    return result


# The ``_meta`` keys of the 2026-07-28 envelope and of a result's stamp, the same strings as
# the SDK's (``mcp_types``; a unit test holds them equal), written out for the reason the
# codes above are: the byte paths read and write them without loading the SDK's types.
CLIENT_INFO_META_KEY: Final = "io.modelcontextprotocol/clientInfo"
CLIENT_CAPABILITIES_META_KEY: Final = "io.modelcontextprotocol/clientCapabilities"
LOG_LEVEL_META_KEY: Final = "io.modelcontextprotocol/logLevel"
SERVER_INFO_META_KEY: Final = "io.modelcontextprotocol/serverInfo"
