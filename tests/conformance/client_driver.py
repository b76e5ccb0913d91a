"""A client for the conformance suite's client scenarios, with mcpvisor in the middle.

The suite (``conformance client --scenario S --command CMD``) serves scenario ``S`` on a
local URL and runs ``CMD URL``; ``MCP_CONFORMANCE_SCENARIO`` names the scenario and
``MCP_CONFORMANCE_CONTEXT`` may carry the calls it wants made. This driver puts that URL in
a config as mcpvisor's only upstream (``type: http``, ``exposure: all``, ``namespacing:
none``, and ``--protocol``: ``auto`` as a user would leave it, or the wire the scenario is
about, as a user whose server speaks it would set it), starts ``mcpvisor serve`` over stdio,
and acts as the end client through it with the SDK's ``Client``, doing what a user's session
would: it lists tools, resources and prompts, then makes the calls the scenario is about
(the context's ``toolCalls``; the tool in `CALLS`; the schema echo of ``json-
schema-2020-12-preservation``; otherwise every tool it was shown, the first resource and the
first prompt). It answers elicitation with the form's defaults (or a value per required
field), sampling with a fixed text and roots with one root.

What the suite judges is therefore mcpvisor's upstream side: its handshake or per-request
``_meta``, its headers, its calls, how it relays the server's input requests and how its
HTTP transport resumes a closed SSE stream.

For the ``auth/*`` scenarios mcpvisor is the OAuth client (issue 27): ``serve`` runs the
login itself (``settings.oauth.openBrowser``) with ``$BROWSER`` set to
``tests/servers/follow_browser.py``, which follows the suite's authorization server's
redirect to mcpvisor's loopback listener. The config carries what a user would write in the
server's ``oauth`` entry: the client metadata document URL the suite expects
(`CLIENT_METADATA_URL`), the pre-registered client of the context (``client_id``,
``client_secret``), and for ``auth/client-credentials-*`` the ``client_credentials`` grant
(with the context's private key written to a file for ``private_key_jwt``).

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
from mcp.shared.exceptions import MCPError
from pydantic import FileUrl

# What some scenarios' servers offer and how a client is expected to use it (the suite's code).
CALLS: Final[dict[str, tuple[str, dict[str, Any]]]] = {
    "tools_call": ("add_numbers", {"a": 5, "b": 3}),
    "elicitation-sep1034-client-defaults": ("test_client_elicitation_defaults", {}),
    "sse-retry": ("test_reconnection", {}),
}
SCHEMA_ECHO: Final = ("json_schema_2020_12_tool", "json_schema_echo")
"""``json-schema-2020-12-preservation``: the focal tool whose schema is echoed, and the echo."""
CLIENT_METADATA_URL: Final = "https://conformance-test.local/client-metadata.json"
"""The client ID metadata document the suite's ``auth/basic-cimd`` expects a client to name."""
BROWSER: Final = Path(__file__).resolve().parent.parent / "servers" / "follow_browser.py"
DRIVE_TIMEOUT_S: Final = 40.0
"""The whole drive, start-up included; the suite's own per-client limit is larger."""
SAMPLE_BY_TYPE: Final[dict[str, Any]] = {"string": "x", "integer": 1, "number": 1.5, "boolean": True}


def sample_arguments(schema: dict[str, Any]) -> dict[str, Any]:
    """A value for every required property of ``schema``, as a user filling a form would."""
    props = schema.get("properties") or {}
    return {
        name: SAMPLE_BY_TYPE.get(str((props.get(name) or {}).get("type")), "x")
        for name in schema.get("required") or []
    }


async def accept_form(
    context: ClientRequestContext, params: types.ElicitRequestParams
) -> types.ElicitResult | types.ErrorData:
    """Accept a form as a user who keeps every proposed default (SEP-1034) and fills the
    other required fields."""
    schema = getattr(params, "requested_schema", None) or {}
    content = sample_arguments(schema)
    content.update(
        {name: prop["default"] for name, prop in schema.get("properties", {}).items() if "default" in prop}
    )
    return types.ElicitResult(action="accept", content=content)


async def answer_sampling(
    context: ClientRequestContext, params: types.CreateMessageRequestParams
) -> types.CreateMessageResult:
    return types.CreateMessageResult(
        role="assistant", content=types.TextContent(type="text", text="Paris"), model="driver"
    )


async def list_roots(context: ClientRequestContext) -> types.ListRootsResult:
    root = types.Root(uri=FileUrl("file:///tmp/conformance"), name="conformance")
    return types.ListRootsResult(roots=[root])


MANAGEMENT: Final = frozenset(
    {
        "list-available-tools",
        "build-toolset",
        "list-saved-toolsets",
        "equip-toolset",
        "delete-toolset",
        "unequip-toolset",
        "get-active-toolset",
        "add-tool-annotation",
        "get-server-status",
    }
)
"""mcpvisor's own tools, listed beside the upstream's; the scenarios are about the upstream's."""
LIST_RETRY_S: Final = 0.2
"""mcpvisor answers its first tools/list before a slow upstream is ready; the driver lists
again (bounded by `DRIVE_TIMEOUT_S`) until the upstream's tools or its status are there."""


REFUSALS_SEEN: Final = 2
"""Failed starts after which an ``auth/*`` scenario's server counts as refused for good."""


def refused_login(server: dict[str, Any]) -> bool:
    """mcpvisor will not get in by itself: after its own browser login (its second start)
    it waits for ``mcpvisor mcp login``, or the authorization it was shown is wrong and it
    backs off (what an ``auth/*`` scenario about a client that must refuse expects)."""
    state = server.get("state")
    if state == "needs_login":
        return server.get("starts", 0) >= 2 and str(server.get("reason", "")).startswith(
            "server suite needs a login")
    return state in ("backing_off", "circuit_open") and server.get("restarts", 0) >= REFUSALS_SEEN


async def upstream_tools(client: Client, scenario: str = "") -> list[types.Tool]:
    """The scenario server's tools as mcpvisor lists them, once its upstream is ready (none
    when mcpvisor refused to log in)."""
    while True:
        tools = [t for t in (await client.list_tools()).tools if t.name not in MANAGEMENT]
        status = (await client.call_tool("get-server-status", {})).structured_content or {}
        servers = status.get("servers") or [{}]
        toolless = servers[0].get("state") == "ready" and servers[0].get("toolCount") == 0
        if tools or toolless:
            return tools
        if scenario.startswith("auth/") and refused_login(servers[0]):
            print(f"mcpvisor did not log in: {servers[0].get('reason')}", file=sys.stderr)
            return []
        await anyio.sleep(LIST_RETRY_S)


def oauth_entry(scenario: str, context: dict[str, Any], work: Path) -> dict[str, Any] | None:
    """The server's ``oauth`` entry for an ``auth/*`` scenario (None for the others)."""
    if not scenario.startswith("auth/"):
        return None
    entry: dict[str, Any] = {}
    if "client_id" in context:
        entry["clientId"] = context["client_id"]
    if "client_secret" in context:
        entry["clientSecret"] = context["client_secret"]
    if scenario.startswith("auth/client-credentials"):
        entry["grant"] = "client_credentials"
        if "private_key_pem" in context:
            work.mkdir(parents=True, exist_ok=True)
            key = work / "client-key.pem"
            key.write_text(context["private_key_pem"])
            entry["privateKeyFile"] = str(key)
            entry["tokenEndpointAuthMethod"] = "private_key_jwt"
    else:
        entry["clientMetadataUrl"] = CLIENT_METADATA_URL
    return entry


def write_config(url: str, work: Path, protocol: str = "auto", oauth: dict[str, Any] | None = None) -> Path:
    work.mkdir(parents=True, exist_ok=True)
    config = work / "mcpvisor.json"
    settings: dict[str, Any] = {"exposure": "all", "namespacing": "none", "startupWait": "30s",
                                "oauth": {"openBrowser": True}}
    upstream: dict[str, Any] = {"type": "http", "url": url, "protocol": protocol}
    if oauth is not None:
        upstream["oauth"] = oauth
    config.write_text(json.dumps({"mcpServers": {"suite": upstream}, "settings": settings}))
    return config


def planned_calls(scenario: str, context: dict[str, Any], tools: list[types.Tool]) -> list[tuple[str, Any]]:
    """The tools/call requests the scenario is about, in order."""
    if context.get("toolCalls"):
        return [(call["name"], call.get("arguments") or {}) for call in context["toolCalls"]]
    if scenario in CALLS:
        return [CALLS[scenario]]
    by_name = {tool.name: tool for tool in tools}
    focal, echo = SCHEMA_ECHO
    if focal in by_name and echo in by_name:
        return [(echo, {"schema": by_name[focal].input_schema})]
    return [(tool.name, sample_arguments(tool.input_schema)) for tool in tools]


async def drive(url: str, work: Path, scenario: str, context: dict[str, Any], protocol: str = "auto") -> None:
    config = write_config(url, work, protocol, oauth_entry(scenario, context, work))
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "mcpvisor", "serve", "--config", str(config), "--state-dir", str(work / "state")],
        env={**os.environ, "BROWSER": str(BROWSER)},
    )
    with anyio.fail_after(DRIVE_TIMEOUT_S):
        async with Client(
            params,
            mode="legacy",
            cache=None,
            elicitation_callback=accept_form,
            sampling_callback=answer_sampling,
            list_roots_callback=list_roots,
        ) as client:
            tools = await upstream_tools(client, scenario)
            print(f"tools through mcpvisor: {[t.name for t in tools]}", file=sys.stderr)
            resources = (await client.list_resources()).resources
            prompts = (await client.list_prompts()).prompts
            for name, arguments in planned_calls(scenario, context, tools):
                try:
                    result = await client.call_tool(name, arguments)
                except MCPError as exc:  # the suite judges what reached it; go on with the rest
                    print(f"{name} -> error {exc.error.code}: {exc.error.message}", file=sys.stderr)
                    continue
                print(f"{name} -> {result.model_dump(mode='json', exclude_none=True)}", file=sys.stderr)
            if resources:
                await client.read_resource(resources[0].uri)
            if prompts:
                prompt = prompts[0]
                await client.get_prompt(
                    prompt.name, {arg.name: "x" for arg in prompt.arguments or [] if arg.required}
                )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--work", required=True, type=Path, help="directory for the config and state")
    parser.add_argument("--protocol", default="auto", choices=("auto", "legacy", "2026-07-28"),
                        help="the upstream's protocol setting in mcpvisor's config")
    parser.add_argument("url", help="the scenario server's URL (the suite appends it)")
    opts = parser.parse_args()
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    anyio.run(drive, opts.url, opts.work, scenario, context, opts.protocol)


if __name__ == "__main__":
    main()
