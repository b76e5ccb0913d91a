"""A server's new tools reach a client through mcpvisor (issue 14, item 2), real processes.

`tests/servers/usual.py` is an SDK 2.3 `MCPServer` written the usual way: its tool adds a
tool with ``add_tool`` and calls ``ctx.session.send_tool_list_changed()``. A direct
handshake-era client sees the new tool at once; through mcpvisor it must too (opened in
the handshake era, where that notification exists), with re-listing off so only the
notification can explain it. With ``--quiet`` the server tells nobody: re-listing on the
``relistInterval`` cadence finds the tool. A regression shows as a client that never
hears ``list_changed`` and never sees the tool.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from tests.helpers import PY, REAL_IO_BOUND_S, SERVERS_DIR, Recorder, embedded_client, text_of, write_config

pytestmark = pytest.mark.slow


def usual(*flags: str, **extra: Any) -> dict[str, Any]:
    return {"command": PY, "args": [str(SERVERS_DIR / "usual.py"), *flags], **extra}


@pytest.mark.parametrize(("flags", "relist"), [((), 0), (("--quiet",), "300ms")], ids=["announced", "quiet"])
async def test_a_tool_the_server_adds_reaches_the_client(tmp_path: Path, flags: tuple[str, ...],
                                                         relist: Any) -> None:
    config = write_config(tmp_path, {"usual": usual(*flags, relistInterval=relist)})
    rec = Recorder()
    with trio.fail_after(REAL_IO_BOUND_S):
        async with embedded_client(config, recorder=rec) as client:
            before = {t.name for t in (await client.list_tools()).tools}
            assert "usual_echo" in before
            changed = rec.changed
            assert text_of(await client.call_tool("usual_add_greeter", {"name": "hello"})) == "added hello"
            await changed.wait()
            after = {t.name for t in (await client.list_tools()).tools}
            assert after - before == {"usual_hello"}
            assert text_of(await client.call_tool("usual_hello", {"who": "ada"})) == "hello: hello ada"
