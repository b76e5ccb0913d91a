"""The benchmark upstream's tools behind the SDK's own streamable HTTP server: the HTTP baseline.

The HTTP scenarios compare "client -> proxy's HTTP front -> stdio upstream" with "client ->
an HTTP MCP server answering the same tools", so the ratio is the proxy's cost and not the
cost of HTTP itself. This is the lightest HTTP MCP server the SDK makes: a low-level
`Server` whose tools answer like `bench/upstream.py`, its Starlette app, hypercorn's trio
worker, loopback only.

Usage: ``python bench/http_upstream.py --port N [--name NAME] [--tools N] [--bare]``.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from typing import Any

import trio

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent.parent))

from mcpvisor.bench.upstream import BASE_TOOLS, generated_tool

KEEP_ALIVE_S = 3600.0


def build_app(name: str, extra: int, bare: bool) -> Any:
    from mcp import types
    from mcp.server.lowlevel import Server
    from mcp.server.transport_security import TransportSecuritySettings

    tools = ([] if bare else BASE_TOOLS) + [generated_tool(name, i) for i in range(extra)]
    listed = types.ListToolsResult.model_validate({"tools": tools})

    def text(value: str) -> types.CallToolResult:
        return types.CallToolResult(content=[types.TextContent(type="text", text=value)])

    async def on_list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return listed

    async def on_call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        args = params.arguments or {}
        if params.name == "echo":
            return text(str(args.get("text", "")))
        if params.name == "payload":
            return text("x" * int(args["size"]))
        if params.name == "sleep":
            await trio.sleep(float(args["ms"]) / 1000.0)
            return text(f"slept {args['ms']}")
        if params.name == "work":
            end = time.perf_counter() + float(args["ms"]) / 1000.0
            while time.perf_counter() < end:
                pass
            return text(f"worked {args['ms']}")
        return text(f"{params.name}: {args}")

    server: Any = Server(name, version="1.0.0", on_list_tools=on_list_tools, on_call_tool=on_call_tool)
    security = TransportSecuritySettings(enable_dns_rebinding_protection=True,
                                         allowed_hosts=["127.0.0.1:*", "localhost:*"],
                                         allowed_origins=["http://127.0.0.1:*", "http://localhost:*"])
    return server.streamable_http_app(streamable_http_path="/mcp", host="127.0.0.1",
                                      transport_security=security)


async def serve(app: Any, port: int) -> None:
    import hypercorn.config
    import hypercorn.trio

    config = hypercorn.config.Config()
    config.bind = [f"127.0.0.1:{port}"]
    config.accesslog = None
    config.errorlog = logging.getLogger("hypercorn.error")
    config.graceful_timeout = 1.0
    # The bench interleaves subjects, so this server's client can sit idle for a while between
    # rounds; hypercorn's 5 s keep-alive would close the connection under it and race the next call.
    config.keep_alive_timeout = KEEP_ALIVE_S
    await hypercorn.trio.serve(app, config)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--name", default="bench")
    parser.add_argument("--tools", type=int, default=0)
    parser.add_argument("--bare", action="store_true")
    opts = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    try:
        trio.run(serve, build_app(opts.name, opts.tools, opts.bare), opts.port)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
