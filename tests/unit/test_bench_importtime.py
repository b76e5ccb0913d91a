"""bench's imports scenario reads Python's ``-X importtime`` output: what it adds up and ranks.

The sample is the shape Python prints (an import's line comes after the lines of the imports it
caused, one level deeper, indented two spaces a level), mixed with the proxy's own stderr lines,
and cut while an import was still running, as it is when the bench stops reading at the moment
``serve`` answered.
"""

from __future__ import annotations

from pathlib import Path

from mcpvisor.bench.scenarios_imports import parse_importtime, read_profile, top_packages

SAMPLE = """\
mcpvisor: config: /tmp/bench/imports.json (--config)
import time: self [us] | cumulative | imported package
import time:       100 |        100 |   _json
import time:       200 |        300 | json
import time:        50 |         50 |     pydantic_core._pydantic_core
import time:       150 |        200 |   pydantic_core
import time:       400 |        400 |   pydantic.main
import time:      1000 |       1600 | pydantic
import time:        30 |         30 |       typing_extensions
import time:       300 |        330 |     mcp.types
import time:       500 |        500 |     pydantic.fields
import time:       200 |       1030 |   mcp.server
import time:       100 |       1130 | mcp
2026-11-25 06:00:00 INFO mcpvisor.tree: starting 1 server
import time:        70 |         70 |   mcp.client
"""
"""Top level: json 300, pydantic 1600, mcp 1130; ``mcp.client`` finished under an import that
had not finished when the text was cut (its own line not printed yet)."""


def test_top_level_cumulative_times_add_up_without_counting_nested_imports_twice() -> None:
    profile = parse_importtime(SAMPLE)
    # 300 + 1600 + 1130 at the top, and the 70 of the finished import whose parent was still running;
    # adding every line's cumulative time instead would give 5540 (nested time counted again).
    assert profile.total_us == 3100
    assert profile.modules == 12  # the header and the proxy's own log lines are not imports


def test_packages_rank_by_their_outermost_imports_cumulative_time() -> None:
    ranking = parse_importtime(SAMPLE).packages()
    # pydantic: its own import (1600) plus pydantic.fields first imported under mcp (500);
    # mcp: 1130 plus mcp.client (70), mcp.types not again (inside mcp's own import);
    # pydantic_core: 200 once (its C module is inside it).
    assert ranking == [("pydantic", 2100), ("mcp", 1200), ("json", 300), ("pydantic_core", 200),
                       ("_json", 100), ("typing_extensions", 30)]
    assert top_packages([parse_importtime(SAMPLE)] * 3, k=2) == [("pydantic", 2.1), ("mcp", 1.2)]


def test_a_line_cut_in_the_middle_is_not_read(tmp_path: Path) -> None:
    log = tmp_path / "serve.log"
    log.write_text(SAMPLE)
    cut = SAMPLE.index("| mcp\n") + len("| mc")  # "mc" would pass for a package of its own
    profile = read_profile(log, cut)
    assert profile.modules == 10
    assert profile.total_us == 300 + 1600 + 1030  # mcp.server has finished, mcp has not
    assert [name for name, _ in profile.packages()][:2] == ["pydantic", "mcp"]
