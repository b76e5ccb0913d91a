"""A client for the conformance suite's client scenarios, with mcpvisor in the middle.

The suite (``conformance client --scenario S --command CMD``) serves scenario ``S`` on a
local URL and runs ``CMD URL``; ``MCP_CONFORMANCE_SCENARIO`` names the scenario. This
driver puts that URL in a config as mcpvisor's only upstream (``type: http``, protocol
``auto`` as a user would leave it, ``exposure: all``, ``namespacing: none``), starts
``mcpvisor serve`` over stdio, and acts as the end client through it with the SDK's
``Client``: it lists the tools and calls the one the scenario is about. What the suite
judges is therefore mcpvisor's upstream side: its handshake, its calls, how it relays the
server's elicitation and how its HTTP transport resumes a closed SSE stream.

Usage: ``python tests/conformance/client_driver.py --work DIR URL``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Final

import anyio
import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp.client.session import ClientRequestContext

# What each scenario's server offers and how a client is expected to use it (the suite's code).
CALLS: Final[dict[str, tuple[str, dict[str, Any]]]] = {
    "tools_call": ("add_numbers", {"a": 5, "b": 3}),
    "elicitation-sep1034-client-defaults": ("test_client_elicitation_defaults", {}),
    "sse-retry": ("test_reconnection", {}),
}
DRIVE_TIMEOUT_S: Final = 40.0
"""The whole drive, start-up included; the suite's own per-client limit is larger."""


async def accept_with_defaults(
    context: ClientRequestContext, params: types.ElicitRequestParams
) -> types.ElicitResult | types.ErrorData:
    """Accept a form as a user who keeps every proposed default (SEP-1034)."""
    schema = getattr(params, "requested_schema", None) or {}
    content = {
        name: prop["default"] for name, prop in schema.get("properties", {}).items() if "default" in prop
    }
    return types.ElicitResult(action="accept", content=content)


def write_config(url: str, work: Path) -> Path:
    work.mkdir(parents=True, exist_ok=True)
    config = work / "mcpvisor.json"
    settings = {"exposure": "all", "namespacing": "none", "startupWait": "30s"}
    upstream = {"type": "http", "url": url}
    config.write_text(json.dumps({"mcpServers": {"suite": upstream}, "settings": settings}))
    return config


async def drive(url: str, work: Path, scenario: str) -> None:
    config = write_config(url, work)
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "mcpvisor", "serve", "--config", str(config), "--state-dir", str(work / "state")],
        env=dict(os.environ),
    )
    with anyio.fail_after(DRIVE_TIMEOUT_S):
        async with Client(
            params, mode="legacy", cache=None, elicitation_callback=accept_with_defaults
        ) as client:
            names = [t.name for t in (await client.list_tools()).tools]
            print(f"tools through mcpvisor: {names}", file=sys.stderr)
            call = CALLS.get(scenario)
            if call is not None:
                result = await client.call_tool(*call)
                print(f"{call[0]} -> {result.model_dump(mode='json', exclude_none=True)}", file=sys.stderr)
                if result.is_error:
                    raise SystemExit(f"{call[0]} failed through mcpvisor")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--work", required=True, type=Path, help="directory for the config and state")
    parser.add_argument("url", help="the scenario server's URL (the suite appends it)")
    opts = parser.parse_args()
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    anyio.run(drive, opts.url, opts.work, scenario)


if __name__ == "__main__":
    main()
