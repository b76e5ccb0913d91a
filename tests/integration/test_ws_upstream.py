"""An upstream reached over websocket (`mcpvisor.actors.link.ws`): a proxy whose server is
another proxy's websocket front lists that server's tools and routes calls and the
upstream's errors to it, as for a stdio upstream.

Both proxies run in this process; the inner one serves a real `flaky.py` subprocess.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from mcpvisor import open_supervisor, serve_ws
from mcpvisor.actors.errors import UpstreamError
from tests.helpers import REAL_IO_BOUND_S, flaky, write_config


async def test_a_websocket_upstream_lists_and_answers(tmp_path: Path) -> None:
    for room in ("inner", "outer"):
        (tmp_path / room).mkdir()
    inner_config = write_config(tmp_path / "inner", {"box": flaky()}, exposure="all")
    with trio.fail_after(REAL_IO_BOUND_S):
        inner_state = tmp_path / "inner" / "state"
        async with open_supervisor(inner_config, state_dir=inner_state, watch=False) as inner:
            await inner.wait_ready()
            async with trio.open_nursery() as nursery:
                url: str = await nursery.start(lambda task_status: serve_ws(inner, "127.0.0.1", 0,
                                                                             task_status=task_status))
                outer_config = write_config(tmp_path / "outer", {"far": {"type": "ws", "url": url}},
                                            exposure="all")
                async with open_supervisor(outer_config, state_dir=tmp_path / "outer" / "state",
                                           watch=False) as outer:
                    await outer.wait_ready()
                    names = {tool["name"] for tool in outer.tools()}
                    assert "far_box_echo" in names  # the inner proxy's name, prefixed again
                    done = await outer.call_tool("far_box_echo", {"text": "over ws"})
                    assert done["content"][0]["text"] == "echo: over ws"
                    with pytest.raises(UpstreamError, match="a and b must be numbers"):
                        await outer.call_tool("far_box_add", {"a": "not a number", "b": 1})
                    assert outer.status()[0].state == "ready"
                nursery.cancel_scope.cancel()
