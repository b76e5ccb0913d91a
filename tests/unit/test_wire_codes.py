"""The codes and keys the byte paths write are the SDK's own.

`mcpvisor.actors.wire` writes them out instead of importing the SDK's types (which every
CLI command would then load, ~120 ms); this holds the two equal, so an SDK that changes
one is noticed here, not by a client that gets a code the SDK no longer means.
"""

from __future__ import annotations

import mcp_types
import pytest

from mcpvisor.actors import wire


@pytest.mark.parametrize("name", ["PARSE_ERROR", "INVALID_REQUEST", "METHOD_NOT_FOUND", "INVALID_PARAMS",
                                  "INTERNAL_ERROR", "CONNECTION_CLOSED", "REQUEST_TIMEOUT",
                                  "PROTOCOL_VERSION_META_KEY"])
def test_a_code_or_key_the_proxy_writes_means_what_the_sdk_means(name: str) -> None:
    assert getattr(wire, name) == getattr(mcp_types, name)
