"""Which era mcpvisor opens an upstream in (issue 14), with real subprocess servers.

``protocol: auto`` opens a server that speaks both eras in the handshake era (where a
server written the usual way keeps ``ctx.session.create_message``, ``elicit`` and
``send_tool_list_changed``), and 2026-07-28 only for a server that refuses the
handshake; what it found is remembered, so a restart goes straight to that era. A
regression shows as a dual-era server opened in 2026-07-28 (sampling refused by the
upstream's SDK), a modern-only server that never comes up, or a restart that probes again.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio

from mcpvisor import open_supervisor
from mcpvisor.actors.errors import ProxyError
from mcpvisor.actors.upstream import State
from tests.helpers import REAL_IO_BOUND_S, everything, flaky, http_fixture, read_record, write_config

pytestmark = pytest.mark.slow


def _opened(record: Path) -> list[str]:
    """The era-opening requests a server saw, in order."""
    return [e["event"] for e in read_record(record) if e["event"] in ("initialize", "discover")]


async def test_auto_opens_dual_era_servers_in_the_handshake_era_and_modern_only_ones_in_2026(
    tmp_path: Path,
) -> None:
    dual, modern = tmp_path / "dual.jsonl", tmp_path / "modern.jsonl"
    config = write_config(tmp_path, {
        "dual": everything("--record", str(dual)),
        "modern": everything("--modern-only", "--record", str(modern)),
    })
    with trio.fail_after(REAL_IO_BOUND_S):
        async with open_supervisor(config, state_dir=tmp_path / "state", watch=False) as sup:
            assert await sup.wait_ready() == []
            assert {s.name: s.protocol_version for s in sup.status()} == {
                "dual": "2025-11-25", "modern": "2026-07-28"}
            assert _opened(dual) == ["initialize"]
            assert _opened(modern) == ["initialize", "discover"]
            assert text_of_result(await sup.call_tool("modern_echo", {"text": "x"})) == "echo: x"

            # A restart reopens the modern-only server in its era at once: no second handshake.
            up = sup.upstreams["modern"]
            with pytest.raises(ProxyError):
                await sup.call_tool("modern_crash", {})
            while not (up.state is State.READY and up.starts == 2):
                await up.wait_changed()
            assert _opened(modern) == ["initialize", "discover", "discover"]
            assert up.status().protocol_version == "2026-07-28"


def text_of_result(result: dict[str, object]) -> str:
    content = result.get("content")
    assert isinstance(content, list)
    return "".join(str(c.get("text", "")) for c in content if isinstance(c, dict))


async def test_a_dual_era_http_server_is_shown_speaking_both_versions_and_reopened_with_the_handshake(
    tmp_path: Path,
) -> None:
    """A streamable-HTTP server that also answers ``server/discover`` without its session
    is reached in both eras under ``auto``: its status names both versions (its session's
    first); a server reached in one era names that one. The era remembered for its next
    start stays the handshake era it was opened in."""
    record, dual_stdio = tmp_path / "rec.jsonl", tmp_path / "dual.jsonl"
    with trio.fail_after(REAL_IO_BOUND_S):
        async with http_fixture("recording_http.py", "--record", str(record)) as (_, url):
            config = write_config(tmp_path, {"rec": {"type": "http", "url": url},
                                             "dual": everything("--record", str(dual_stdio))})
            async with open_supervisor(config, state_dir=tmp_path / "state", watch=False) as sup:
                assert await sup.wait_ready() == []
                link = sup.upstreams["rec"].link
                assert link is not None
                assert link.side_probed is not None  # under auto, HTTP: the side is looked for
                await link.side_probed.wait()
                shown = {s.name: (s.protocol_version, s.protocol_versions) for s in sup.status()}
                assert shown == {"rec": ("2025-11-25", ("2025-11-25", "2026-07-28")),
                                 "dual": ("2025-11-25", ("2025-11-25",))}
    remembered = json.loads((tmp_path / "state" / "catalog.json").read_text())
    assert remembered["servers"]["rec"]["era"] == "legacy"


async def test_a_refused_or_unusable_handshake_reads_as_what_the_server_said(tmp_path: Path) -> None:
    """Real stdio servers that cannot be opened, under the era choices that meet them: the
    failure a user reads (status, ``mcpvisor status``, the log) names what went wrong, and
    under ``auto`` it is the ``server/discover`` error, which says what the server speaks.
    The handshake offered is the newest handshake-era version, as the SDK's session offered.
    A regression shows as a server opened in an era it did not agree to, or a reason that
    no longer says why."""
    records = {name: tmp_path / f"{name}.jsonl" for name in ("both", "newer_legacy", "newer_auto")}
    config = write_config(tmp_path, {
        # Refuses initialize and knows no server/discover: nothing to open.
        "both": flaky("--refuse-initialize", "--record", str(records["both"]), protocol="auto"),
        # Answers initialize with a 2026-07-28 version, outside the handshake era.
        "newer_legacy": flaky("--legacy-version", "2026-07-28", "--record", str(records["newer_legacy"])),
        "newer_auto": flaky("--legacy-version", "2026-07-28", "--record", str(records["newer_auto"]),
                            protocol="auto"),
        "fine": flaky(protocol="auto"),
    }, startupWait="1s")
    with trio.fail_after(REAL_IO_BOUND_S):
        async with open_supervisor(config, state_dir=tmp_path / "state", watch=False) as sup:
            for name in ("both", "newer_legacy", "newer_auto", "fine"):
                up = sup.upstreams[name]
                while up.status().last_error is None and up.state is not State.READY:
                    await up.wait_changed()
            errors = {s.name: s.last_error for s in sup.status()}
            versions = {s.name: s.protocol_version for s in sup.status()}
    assert errors == {
        "both": "handshake failed: Method not found",
        "newer_legacy": "RuntimeError: Unsupported protocol version from the server: 2026-07-28",
        "newer_auto": "handshake failed: Method not found",
        "fine": None,
    }
    assert versions["fine"] == "2025-11-25"
    for record in records.values():
        offered = {e["protocolVersion"] for e in read_record(record) if e["event"] == "initialize"}
        assert offered == {"2025-11-25"}
