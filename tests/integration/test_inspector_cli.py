"""The MCP Inspector's CLI prints through mcpvisor what it prints for the server itself.

A user checks a server with ``mcp-inspector --cli COMMAND --method ...`` (npm
``@modelcontextprotocol/inspector``, pinned in tests/npm-servers, installed by
tests/setup.sh): one process that connects, asks one thing, prints the answer as JSON and
exits. Pointed at ``mcpvisor serve --demo`` over stdio, as the README says, and at a
running ``serve`` of the same config over streamable HTTP, its answers to a tool call, a
resource read and a prompt must be, byte for byte, what it prints for the demo servers
run directly (the proxy's names for the tool and the prompt aside: ``calc_add`` for
``add``). The one-shot client connects while the proxy's servers are still starting, the
case the proxy's own start-up waits are for: the resource read and the prompt go to a proxy
that never ran before (nothing remembered; they wait for their server). The Inspector looks
a tool up in ``tools/list`` before calling it, and a first list is answered at once with
what is known, so the tool call goes to a proxy whose state directory remembers the demo's
tools from an earlier run (as from a user's second start on): the tool is listed at once and
the call waits for its server.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Final

import pytest
import trio

from mcpvisor.config import demo_config_path
from tests.helpers import PY, proxy_client
from tests.integration.real_servers import NPM_BIN
from tests.security.proxy import running_proxy

pytestmark = pytest.mark.slow

INSPECTOR: Final = NPM_BIN / "mcp-inspector"
BOUND_S: Final = 120.0
"""Nine Inspector runs, three at a time, each starting node and a server or the proxy and
its three demo servers, on a loaded 2-core machine."""
AT_ONCE: Final = 3

ASKS: Final = {
    # label: (demo server, what the Inspector asks it directly, what it asks the proxy)
    "tool call": ("calc", ["--method", "tools/call", "--tool-name", "add", "--tool-arg", "a=2", "b=3"],
                  ["--method", "tools/call", "--tool-name", "calc_add", "--tool-arg", "a=2", "b=3"]),
    "resource read": ("notes", ["--method", "resources/read", "--uri", "notes://all"],
                      ["--method", "resources/read", "--uri", "notes://all"]),
    "prompt": ("notes", ["--method", "prompts/get", "--prompt-name", "summarize_notes"],
               ["--method", "prompts/get", "--prompt-name", "notes_summarize_notes"]),
}


def inspector_or_skip() -> Path:
    if not INSPECTOR.exists():
        problem = "the MCP Inspector is not installed: run tests/setup.sh"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true: {problem}")
        pytest.skip(problem)
    return INSPECTOR


async def remember_the_demo(state_dir: Path) -> None:
    """Run the demo proxy once on ``state_dir`` until its servers are up, so that the next
    proxy on it lists their tools from memory at once."""
    async with proxy_client(demo_config_path(), env={"MCPVISOR_STATE_DIR": str(state_dir)}) as client:
        assert "calc_add" in {tool.name for tool in (await client.list_tools()).tools}
    assert "calc" in json.loads((state_dir / "catalog.json").read_text())["servers"]


async def test_the_inspector_cli_prints_the_same_answers_through_mcpvisor(tmp_path: Path) -> None:
    inspector = str(inspector_or_skip())
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCPVISOR_")}
    printed: dict[tuple[str, str], bytes] = {}
    limiter = trio.CapacityLimiter(AT_ONCE)

    async def ask(key: tuple[str, str], target: list[str], args: list[str], state: str | None) -> None:
        # The Inspector starts a stdio server with a few variables of its own environment
        # (HOME, PATH, ...: the SDK's default), so a proxy's state directory is handed
        # over with ``-e``, not through the Inspector's environment.
        handed = ["-e", f"MCPVISOR_STATE_DIR={tmp_path / state}"] if state else []
        async with limiter:
            done = await trio.run_process([inspector, "--cli", *handed, *target, *args], capture_stdout=True,
                                          capture_stderr=True, stdin=b"", check=False,
                                          env=env | {"HOME": str(tmp_path)})
        assert done.returncode == 0, (key, done.stdout, done.stderr[-2000:])
        if key == ("tool call", "stdio"):  # its answer came from the remembered list, not a race
            assert b"calc: listing 4 remembered tools" in done.stderr, done.stderr[-2000:]
        printed[key] = done.stdout

    with trio.fail_after(BOUND_S):
        async with trio.open_nursery() as nursery:
            for state in ("http-state", "stdio-0"):  # the tool call's proxies: see the module's doc
                nursery.start_soon(remember_the_demo, tmp_path / state)
        async with running_proxy(demo_config_path(), "--transport", "http", "--host", "127.0.0.1",
                                 "--port", "0", env={"MCPVISOR_STATE_DIR": str(tmp_path / "http-state")}
                                 ) as proxy, trio.open_nursery() as nursery:
            for n, (label, (server, direct, proxied)) in enumerate(ASKS.items()):
                nursery.start_soon(ask, (label, "direct"), [PY, "-m", f"mcpvisor.demo.{server}"], direct,
                                   None)
                # Each stdio proxy its own state: stdio-0 (the tool call's) remembers the demo,
                # the others start cold.
                nursery.start_soon(ask, (label, "stdio"), [PY, "-m", "mcpvisor", "serve", "--demo"], proxied,
                                   f"stdio-{n}")
                nursery.start_soon(ask, (label, "http"), ["--transport", "http", "--server-url", proxy.url],
                                   proxied, None)
    for label in ASKS:
        answer = printed[(label, "direct")]
        assert answer.lstrip().startswith(b"{"), (label, answer)  # an answer, not an error
        assert printed[(label, "stdio")] == answer, label
        assert printed[(label, "http")] == answer, label
