"""The first hour with a real config (issue 25): nine real servers, a slow one, a broken one.

``mcpvisor serve`` runs as a subprocess on its real stdio pipes, with the npm and PyPI
reference servers a new user adds (pinned, installed by tests/setup.sh and the ``test``
extra), a server that takes 12 s to start and one that dies at once. What must hold:

* cold start (empty state directory): ``initialize`` and the first ``tools/list`` are
  answered before the slow server is up (their times are printed: figures, not
  thresholds); the list changes of start-up reach the client as a few notifications,
  none before the answer to that first list; reads, prompts and completions sent right
  after connecting wait for their servers and succeed; a call to the starting server's
  tool waits and goes through; a call to the broken server's tool is refused naming the
  server, its state, the reason and the next try; a misspelt tool of a server that is up
  is answered with that server's names only;
* warm start (same state directory): the first ``tools/list`` already holds the remembered
  tools of every server, the slow one included, and a call to it waits and goes through;
  a server whose args changed, or that left the config, is not listed from memory;
  ``mcpvisor status`` says what is listed from memory and from when.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

import pytest
import trio

from tests.helpers import PY
from tests.integration.real_servers import COLD_WAIT, LineClient, real_config, serve, servers_or_skip, slow

pytestmark = pytest.mark.slow

BOUND_S: Final = 110.0
"""Two starts of a proxy whose slowest server takes 12 s, on a busy 2-core machine."""

SETTLED: Final = frozenset({"ready", "circuit_open", "disabled", "stopped"})

EVERYTHING_DOC: Final = "demo://resource/static/document/architecture.md"


def servers_of(names: list[str]) -> set[str]:
    prefixes = ("fs", "memory", "everything", "thinking", "time", "git", "fetch", "ours", "slow2", "slow",
                "broken")
    return {next(p for p in prefixes if n.startswith(p + "_")) for n in names if "_" in n}


async def settled(client: LineClient) -> None:
    """Wait until every server of the proxy has settled (get-server-status)."""
    while True:
        status = await client.call("tools/call", {"name": "get-server-status", "arguments": {}})
        states = [s["state"] for s in status["result"]["structuredContent"]["servers"]]
        if all(s in SETTLED for s in states):
            return
        await trio.sleep(0.1)  # a subprocess has no event to wait on; bounded by the test's fail_after


def text(answer: dict[str, Any]) -> str:
    return "".join(c.get("text", "") for c in answer["result"]["content"])


async def status_json(state: Path) -> list[dict[str, Any]]:
    done = await trio.run_process([PY, "-m", "mcpvisor", "status", "--state-dir", str(state), "--format",
                                   "json"], capture_stdout=True, capture_stderr=True)
    return json.loads(done.stdout)  # type: ignore[no-any-return]


async def test_cold_then_warm_start_with_nine_real_servers(tmp_path: Path) -> None:
    servers_or_skip()
    state = tmp_path / "state"
    config = real_config(tmp_path, slow_servers={"slow": slow("slow"), "slow2": slow("slow2")},
                         startupWait=COLD_WAIT)
    figures: dict[str, float] = {}
    with trio.fail_after(BOUND_S):
        # --- cold: nothing remembered --------------------------------------------------------
        async with serve(config, state, tmp_path / "cold.log") as c:
            figures["cold initialize"], _ = await c.handshake()
            asked = trio.current_time() - c.t0
            list_id = await c.request("tools/list")
            early = {  # what a one-shot client (the Inspector CLI) sends right after connecting
                "read": await c.request("resources/read", {"uri": EVERYTHING_DOC}),
                "template": await c.request("resources/read", {"uri": "demo://resource/dynamic/text/1"}),
                "prompt": await c.request("prompts/get", {"name": "everything_simple_prompt"}),
                "complete": await c.request("completion/complete", {
                    "ref": {"type": "ref/prompt", "name": "everything_completable_prompt"},
                    "argument": {"name": "department", "value": "Eng"}}),
                "slow": await c.request("tools/call", {"name": "slow_echo", "arguments": {"text": "waited"}}),
            }
            first = await c.answer(list_id)
            first_at = c.answers[list_id][0]
            figures["cold first tools/list"] = first_at - asked
            cold_names = [t["name"] for t in first["result"]["tools"]]
            assert "slow_echo" not in cold_names  # answered before the slow server was up
            assert "get-server-status" in cold_names

            read = await c.answer(early["read"])
            assert read["result"]["contents"][0]["uri"] == EVERYTHING_DOC
            template = await c.answer(early["template"])
            assert "result" in template, template
            assert template["result"]["contents"][0]["uri"] == "demo://resource/dynamic/text/1"
            prompt = await c.answer(early["prompt"])
            assert prompt["result"]["messages"], prompt
            complete = await c.answer(early["complete"])
            assert "result" in complete, complete
            assert "Engineering" in complete["result"]["completion"]["values"]

            broken = await c.call("tools/call", {"name": "broken_echo", "arguments": {"text": "x"}})
            message = broken["error"]["message"]
            assert message.startswith("server broken is down (")
            for part in ("fatal: no API key", "next try at", "circuit open"):
                assert part in message
            assert broken["error"]["data"]["state"] == "circuit_open"

            waited = await c.answer(early["slow"])
            assert text(waited) == "echo: waited"  # it waited for slow to start, then went through

            typo = await c.call("tools/call", {"name": "slow_ecko", "arguments": {}})
            assert typo["result"]["isError"]
            assert "server slow has no such tool" in text(typo)
            suggested = typo["result"]["structuredContent"]["didYouMean"]
            assert suggested
            assert all(name.startswith("slow_") for name in suggested)

            await settled(c)
            final = await c.tools()
            assert servers_of(final) == {"fs", "memory", "everything", "thinking", "time", "git", "fetch",
                                         "ours", "slow", "slow2"}
        changes = c.list_changed()  # the proxy has exited: every notification it sent is in
        assert all(at > first_at for at in changes)  # never before the answer to the pending list
        assert 1 <= len(changes) <= 5, changes  # a few, for ten servers coming up
        figures["cold list_changed"] = len(changes)
        print("\ncold list_changed at (s after the spawn):", [round(at, 2) for at in changes])

        # --- warm: a later start, slow2's args changed, fetch removed ------------------------
        changed = slow("slow2", "--record", str(tmp_path / "slow2.jsonl"))
        real_config(tmp_path, slow_servers={"slow": slow("slow"), "slow2": changed}, drop=("fetch",))
        async with serve(config, state, tmp_path / "warm.log") as c:
            figures["warm initialize"], _ = await c.handshake()
            figures["warm first tools/list"], first = await c.timed("tools/list")
            warm_names = [t["name"] for t in first["result"]["tools"]]
            assert servers_of(warm_names) == {"fs", "memory", "everything", "thinking", "time", "git", "ours",
                                              "slow"}
            assert "slow_echo" in warm_names  # remembered, though slow has not started yet
            rows = [s for proxy in await status_json(state) for s in proxy["servers"]]
            remembered = {s["name"]: s for s in rows if s.get("remembered")}
            assert "slow" in remembered
            assert "slow2" not in remembered  # its args changed
            assert "fetch" not in remembered  # it left the config
            assert remembered["slow"]["state"] == "starting"
            assert remembered["slow"]["toolCount"] == sum(n.startswith("slow_") for n in warm_names)

            waited = await c.call("tools/call", {"name": "slow_echo", "arguments": {"text": "warm"}})
            assert text(waited) == "echo: warm"
            await settled(c)
            final = await c.tools()
            assert set(final) == set(warm_names) | {n.replace("slow_", "slow2_") for n in warm_names
                                                    if n.startswith("slow_")}
        changes = c.list_changed()
        assert 1 <= len(changes) <= 2, changes  # slow2's tools (and nothing else changed)
        figures["warm list_changed"] = len(changes)
    print("\nfirst hour figures (s):", json.dumps({k: round(v, 3) for k, v in figures.items()}))


async def test_a_warm_start_without_the_slow_server_sends_no_list_changed(tmp_path: Path) -> None:
    """Remembered lists that turn out the same when the servers come up: not one
    list_changed (each would make the client re-list for nothing)."""
    servers_or_skip()
    state = tmp_path / "state"
    config = real_config(tmp_path, slow_servers={}, broken=False)
    with trio.fail_after(BOUND_S):
        async with serve(config, state, tmp_path / "cold.log") as c:
            await c.handshake()
            await settled(c)
            remembered = await c.tools()
        async with serve(config, state, tmp_path / "warm.log") as c:
            await c.handshake()
            assert await c.tools() == remembered
            await settled(c)
            assert await c.tools() == remembered
        assert c.list_changed() == []  # the proxy has exited: every notification it sent is in
