"""HTTP upstreams that misbehave, through a real ``mcpvisor serve`` (issue 23 items 7 and 14,
issue 25 item 8).

The upstream is `tests/servers/rogue_http.py`, a real streamable-HTTP server process on
127.0.0.1; the proxy is a real ``mcpvisor serve`` subprocess reached by a real SDK
client over stdio.

* A server that never answers: the call gets the proxy's timeout error naming the server
  (not "Exceptions from Trio nursery", code 0).
* A server that went away: the *first* call already gets "server X ... down/stopped"
  with the server named, and no ERROR traceback reaches the log.
* A server that answers 200 MB: the call gets an error naming ``maxMessageBytes``; the
  proxy's memory stays bounded (it stops reading at the limit) and it keeps serving.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Final

import pytest
import trio
from mcp.shared.exceptions import MCPError

from tests.chaos.test_chaos_floods import proxy_process
from tests.helpers import flaky, http_fixture, proxy_client, text_of, write_config

pytestmark = pytest.mark.slow

BOUND_S: Final = 240.0
"""A test that starts `mcpvisor serve` and an upstream on a loaded 2-core box."""
CALL_TIMEOUT_S: Final = 3
"""The rogue server's ``timeout`` in these configs: short, so a hang is seen quickly."""
HUGE: Final = 200 * 1024 * 1024
"""What the rogue server answers: issue 23's 200 MB body."""
LIMIT: Final = 4 * 1024 * 1024
"""``settings.maxMessageBytes`` in the oversize tests."""
RSS_GROWTH_BOUND: Final = 100 * 1024 * 1024
"""How much the proxy may grow while refusing a 200 MB answer: the limit plus working
space; reading the whole answer would cost more than twice the answer (~1 GB seen)."""


@asynccontextmanager
async def rogue(*flags: str) -> AsyncIterator[tuple[trio.Process, str]]:
    """Start rogue_http.py with ``flags``; yield the process and its URL; kill it after."""
    async with http_fixture("rogue_http.py", *flags) as started:
        yield started


def log_lines(path: Path) -> list[str]:
    return path.read_text(errors="replace").splitlines() if path.exists() else []


async def test_http_upstream_that_never_answers_gets_the_timeout_error(tmp_path: Path) -> None:
    """A call to an HTTP upstream that never answers ends with the proxy's timeout error,
    naming the server and the limit (a regression shows "Exceptions from Trio nursery",
    code 0); the proxy keeps serving other servers."""
    with trio.fail_after(BOUND_S):
        async with rogue("--on-call", "hang") as (_proc, url):
            config = write_config(tmp_path, {"slow": {"type": "http", "url": url, "timeout": CALL_TIMEOUT_S},
                                             "ok": flaky()})
            async with proxy_client(config) as client:
                with pytest.raises(MCPError) as caught:
                    await client.call_tool("slow_echo", {"text": "hi"})
                assert caught.value.error.code == -32001, caught.value.error
                assert "server slow timed out" in caught.value.error.message
                assert "Trio nursery" not in caught.value.error.message
                result = await client.call_tool("ok_echo", {"text": "still here"})
                assert "still here" in text_of(result)


async def test_http_upstream_gone_is_named_on_the_first_call(tmp_path: Path) -> None:
    """An HTTP upstream that went away mid-call: the first call already gets an error
    naming the server (not an ExceptionGroup's "Exceptions from Trio nursery"), and the
    proxy's log has no ERROR traceback for it."""
    log = tmp_path / "proxy.log"
    with trio.fail_after(BOUND_S):
        async with rogue("--on-call", "exit") as (_proc, url):
            config = write_config(tmp_path, {"gone": {"type": "http", "url": url, "timeout": 30}})
            async with proxy_client(config, "--log-file", str(log)) as client:
                with pytest.raises(MCPError) as caught:
                    await client.call_tool("gone_echo", {"text": "hi"})
                message = caught.value.error.message
                assert "server gone" in message, caught.value.error
                assert "Trio nursery" not in message
                assert caught.value.error.code != 0
    errors = [line for line in log_lines(log) if " ERROR " in line or "Traceback" in line]
    assert not errors, "\n".join(errors)


@pytest.mark.parametrize("announced", [False, True], ids=["chunked", "content-length"])
async def test_http_upstream_answer_over_max_message_bytes_is_refused(tmp_path: Path,
                                                                     announced: bool) -> None:
    """An HTTP upstream answering 200 MB: the call gets an error naming the server and
    ``maxMessageBytes``; the proxy stops reading at the limit, so its RSS grows by less
    than `RSS_GROWTH_BOUND` (reading it all cost about 1 GB); the next call to the same
    server is answered (the link stays up: the framing of HTTP is not lost)."""
    flags = ["--on-call", "huge", "--huge-bytes", str(HUGE)] + (["--content-length"] if announced else [])
    with trio.fail_after(BOUND_S):
        async with rogue(*flags) as (_proc, url):
            config = write_config(tmp_path, {"big": {"type": "http", "url": url, "timeout": 60},
                                             "ok": flaky()}, maxMessageBytes=LIMIT)
            async with proxy_client(config) as client:
                await client.call_tool("ok_echo", {"text": "warm"})
                proxy = proxy_process(config)
                before = proxy.memory_info().rss
                with pytest.raises(MCPError) as caught:
                    await client.call_tool("big_echo", {"text": "hi"})
                after = proxy.memory_info().rss
                message = caught.value.error.message
                assert "server big sent a message larger than maxMessageBytes" in message, caught.value.error
                assert str(LIMIT) in message
                assert after - before < RSS_GROWTH_BOUND, (before, after)
                print(f"proxy RSS over a {HUGE >> 20} MiB answer: "
                      f"{before / 2**20:.0f} -> {after / 2**20:.0f} MiB")
                with pytest.raises(MCPError) as again:
                    await client.call_tool("big_echo", {"text": "again"})
                assert "maxMessageBytes" in again.value.error.message  # answered, not "server big is down"
                result = await client.call_tool("ok_echo", {"text": "still here"})
                assert "still here" in text_of(result)
