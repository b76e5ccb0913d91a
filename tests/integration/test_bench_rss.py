"""bench's rss scenario with a small fleet: a fresh proxy with 3 upstreams and one with the
fleet's N, each row held to issue 29's bound for its size (no memory figure asserted: the
figures are the bench's), and tools_list_size still measured on the N-upstream proxy.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import trio

from mcpvisor.bench.core import Params
from mcpvisor.bench.drivers import DIRECT, mcpvisor_subject
from mcpvisor.bench.scenarios_fleet import fleet_memory_and_size
from tests.helpers import REAL_IO_BOUND_S


async def test_rss_rows_for_3_and_n_upstreams_each_with_its_own_target(tmp_path: Path) -> None:
    params = dataclasses.replace(Params.quick_run(), fleet=4, fleet_tools=2)
    with trio.fail_after(REAL_IO_BOUND_S):
        rss, size = await fleet_memory_and_size([DIRECT, mcpvisor_subject("mcpvisor")], params, tmp_path,
                                                ["rss", "tools_list_size"])
    assert rss.error is None
    assert rss.skipped == []
    rows = {row["subject"]: row for row in rss.rows}
    assert list(rows) == ["direct", "mcpvisor, 3", "mcpvisor, 4"]
    assert [rows[s]["upstreams"] for s in rows] == [1, 3, 4]
    for subject in ("mcpvisor, 3", "mcpvisor, 4"):
        assert rows[subject]["rss_mb"] > 0
        assert rows[subject]["upstream_rss_mb"] > 0  # the upstreams were found, and left out of rss_mb
    assert [(t["subject"], t["target"]) for t in rss.targets] == [("mcpvisor, 3", "<= 60"),
                                                                   ("mcpvisor, 4", "<= 80")]
    assert rss.params["upstreams"] == [3, 4]
    # the size scenario still lists the N-upstream proxy's tools (and the N lists of direct)
    assert {row["subject"]: row["tools"] for row in size.rows} == {"direct": 8, "mcpvisor": 8 + 9}
