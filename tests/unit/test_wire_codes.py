"""The codes, keys and versions the byte paths write are the SDK's own.

`mcpvisor.actors.wire` and `mcpvisor.actors.eras` write them out instead of importing the
SDK's types (which every CLI command and the stdio fast path would then load, ~190 ms);
this holds each equal to the SDK's, so an SDK that changes one is noticed here, not by a
client that gets a code, key or version the SDK no longer means.
"""

from __future__ import annotations

import typing

import mcp_types
import mcp_types.version
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
