"""bench's first_list scenario on one upstream: its rows have the shape the report reads,
and what it measures is what it says (no timing asserted: the figures are the bench's).

The one upstream reads nothing for 3 s, so a proxy that answered its first ``tools/list``
only after it was up would list its four tools in the cold row; the warm row lists them
from the state directory's memory.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import trio

from mcpvisor.bench.core import Params
from mcpvisor.bench.scenarios_startup import BASE_TOOL_COUNT, MANAGEMENT_TOOLS, run_first_list
from tests.helpers import REAL_IO_BOUND_S


async def test_first_list_cold_lists_what_is_up_and_warm_lists_what_is_remembered(tmp_path: Path) -> None:
    params = dataclasses.replace(Params.quick_run(), startup_rounds=1)
    with trio.fail_after(REAL_IO_BOUND_S):
        result = await run_first_list(params, tmp_path, sizes=(1,))
    assert result.skipped == []
    rows = {row["subject"]: row for row in result.rows}
    assert set(rows) == {"direct", "mcpvisor cold, 1", "mcpvisor warm, 1"}
    every = BASE_TOOL_COUNT + MANAGEMENT_TOOLS
    cold, warm = rows["mcpvisor cold, 1"], rows["mcpvisor warm, 1"]
    assert cold["listed"] == MANAGEMENT_TOOLS  # answered before the slow upstream was up
    assert cold["tools"] == every
    assert cold["complete_s"] is not None
    assert warm["listed"] == every  # remembered from the cold run
    for row in (cold, warm):
        assert row["first_list_s"] is not None
        assert row["slowest_direct_s"] == rows["direct"]["slowest_direct_s"]
    assert [t["subject"] for t in result.targets] == ["mcpvisor cold, 1", "mcpvisor warm, 1"]
