"""2026-07-28 caching directives (``ttlMs``, ``cacheScope``) on list results, through the
proxy's HTTP front with the real SDK client and a real upstream subprocess.

The upstream (the everything fixture opened at 2026-07-28) says its lists may be cached
for 60 s by anyone (``--list-ttl``): a 2026-07-28 client of the proxy is told exactly that,
not a ttl the proxy made up; a handshake-era client is told nothing (the fields do not exist
in its era); and the same proxy in front of the fixture left at the SDK's default
(``ttlMs: 0``, private) passes that on.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
from mcp import Client

from mcpvisor import open_supervisor, serve_http
from tests.helpers import REAL_IO_BOUND_S, everything, write_config

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning")]


@asynccontextmanager
async def proxy_url(tmp_path: Path, servers: dict[str, Any]) -> AsyncIterator[str]:
    config = write_config(tmp_path, servers, namespacing="prefix")
    async with open_supervisor(config, state_dir=tmp_path / "state", watch=False) as sup, \
            trio.open_nursery() as nursery:
        await sup.wait_ready()
        yield await nursery.start(serve_http, sup, "127.0.0.1", 0)
        nursery.cancel_scope.cancel()


async def test_a_modern_client_is_told_the_upstreams_ttl_a_handshake_client_nothing(tmp_path: Path) -> None:
    cached = everything("--list-ttl", "60000", protocol="2026-07-28")
    with trio.fail_after(REAL_IO_BOUND_S):
        async with proxy_url(tmp_path, {"ev": cached}) as url:
            async with Client(url, mode="2026-07-28", cache=None) as modern:
                tools = await modern.list_tools()
                prompts = await modern.list_prompts()
            assert any(t.name == "ev_echo" for t in tools.tools)
            assert (tools.ttl_ms, tools.cache_scope) == (60000, "public")
            assert (prompts.ttl_ms, prompts.cache_scope) == (60000, "public")
            async with Client(url, mode="legacy", cache=None) as legacy:
                old = await legacy.list_tools()
            assert any(t.name == "ev_echo" for t in old.tools)
            assert not {"ttl_ms", "cache_scope"} & old.model_fields_set


async def test_a_list_partly_from_a_server_that_sent_no_ttl_gets_none(tmp_path: Path) -> None:
    servers = {"ev": everything("--list-ttl", "60000", protocol="2026-07-28"),
               "old": everything("--name", "old", protocol="legacy")}
    with trio.fail_after(REAL_IO_BOUND_S):
        async with proxy_url(tmp_path, servers) as url, Client(url, mode="2026-07-28", cache=None) as modern:
            tools = await modern.list_tools()
    assert {"ev_echo", "old_echo"} <= {t.name for t in tools.tools}
    assert (tools.ttl_ms, tools.cache_scope) == (0, "private")  # the front's own: nothing invented
