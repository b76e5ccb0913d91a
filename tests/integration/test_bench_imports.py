"""bench's imports scenario for real, one launch of each command: its rows have the shape the
report reads, and they measure what they say (no timing asserted: the figures are the bench's).

The SDK alone imports the most; ``mcpvisor serve`` answers a client's ``initialize`` and
``tools/list`` without it, over HTTP (its HTTP server on top) and over stdio, and the bare
interpreter imports least; what every ``serve`` needs (trio and msgspec) sits between serve and
the bare interpreter, trio first. A profile read from the wrong process, or an empty one, would break
that order.
"""

from __future__ import annotations

from pathlib import Path

import trio

from mcpvisor.bench.core import Params
from mcpvisor.bench.scenarios_imports import TARGET_MS, run_imports
from tests.helpers import REAL_IO_BOUND_S


async def test_imports_profiles_serve_over_stdio_and_http_and_the_sdk_and_python(tmp_path: Path) -> None:
    with trio.fail_after(REAL_IO_BOUND_S):
        result = await run_imports(Params.quick_run(), tmp_path, runs=1)
    assert result.skipped == []
    rows = {row["subject"]: row for row in result.rows}
    assert list(rows) == ["mcpvisor-stdio", "mcpvisor-http", "mcp (the SDK alone)", "trio and msgspec",
                          "python -c pass"]
    stdio, http, sdk, floor, bare = rows.values()
    for row in rows.values():
        assert row["import_ms"] > 0
        assert row["start_ms"] > 0
    assert sdk["modules"] > http["modules"] > stdio["modules"] > floor["modules"] > bare["modules"]
    assert floor["top_packages"][0][0] == "trio"
    # serve answers its first client without the SDK on either front; the SDK alone is, first of all, mcp
    assert "mcp" not in [name for name, _ in http["top_packages"]]
    assert "mcp" not in [name for name, _ in stdio["top_packages"]]
    assert sdk["top_packages"][0][0] == "mcp"
    assert [(t["subject"], t["target"]) for t in result.targets] == [
        ("mcpvisor-stdio", f"<= {TARGET_MS:g}"), ("mcpvisor-http", f"<= {TARGET_MS:g}")]
    assert all(t["met"] == (t["value"] <= TARGET_MS) for t in result.targets)
