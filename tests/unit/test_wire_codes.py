"""The codes, keys and versions the byte paths write are the SDK's own, and the frames
they build by hand are the ones the encoder would write.

`mcpvisor.actors.wire` and `mcpvisor.actors.eras` write them out instead of importing the
SDK's types (which every CLI command and the stdio fast path would then load, ~190 ms);
this holds each equal to the SDK's, so an SDK that changes one is noticed here, not by a
client that gets a code, key or version the SDK no longer means.
"""

from __future__ import annotations

import json
import typing

import mcp_types
import mcp_types.version
import msgspec
import pytest

from mcpvisor.actors import eras, wire


@pytest.mark.parametrize("name", ["PARSE_ERROR", "INVALID_REQUEST", "METHOD_NOT_FOUND", "INVALID_PARAMS",
                                  "INTERNAL_ERROR", "CONNECTION_CLOSED", "REQUEST_TIMEOUT",
                                  "PROTOCOL_VERSION_META_KEY", "CLIENT_INFO_META_KEY",
                                  "CLIENT_CAPABILITIES_META_KEY", "LOG_LEVEL_META_KEY",
                                  "SERVER_INFO_META_KEY"])
def test_a_code_or_key_the_proxy_writes_means_what_the_sdk_means(name: str) -> None:
    assert getattr(wire, name) == getattr(mcp_types, name)


@pytest.mark.parametrize("name", ["HANDSHAKE_PROTOCOL_VERSIONS", "MODERN_PROTOCOL_VERSIONS",
                                  "LATEST_HANDSHAKE_VERSION", "LATEST_MODERN_VERSION"])
def test_the_protocol_versions_of_each_era_are_the_sdks(name: str) -> None:
    assert getattr(eras, name) == getattr(mcp_types.version, name)


def test_the_log_levels_are_the_sdks_in_its_order() -> None:
    # Order matters: `verbose_of` and `log_wanted` compare levels by their position.
    assert eras.LOG_LEVELS == typing.get_args(mcp_types.LoggingLevel)


@pytest.mark.parametrize("request_id", [0, 7, -3, 2**53, "1", 'a "quoted" id', "ünïcode \u2028", ""])
@pytest.mark.parametrize("result", [b"{}", b'{"content":[{"type":"text","text":"x"}],"isError":false}',
                                    b'{ "spaced" : [ 1 , 2 ] }', b'{"big":"' + b"y" * (1 << 20) + b'"}'])
def test_a_raw_result_frames_as_the_encoder_would_frame_it(request_id: int | str, result: bytes) -> None:
    """`wire.result_frame` joins an upstream's result bytes into the line instead of encoding
    a dict around them: the line must be the very same, whatever the id, and parse back to the
    id and result the client is owed."""
    raw = msgspec.Raw(result)
    line = wire.result_frame(request_id, raw)
    assert line == wire.encode_line({"jsonrpc": "2.0", "id": request_id, "result": raw})
    assert line.count(b"\n") == 1
    assert line.endswith(b"}\n")
    parsed = json.loads(line)
    assert parsed == {"jsonrpc": "2.0", "id": request_id, "result": json.loads(result)}
