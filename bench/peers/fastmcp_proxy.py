"""Run FastMCP's proxy over an ``mcpServers`` config, headless (runs in the fastmcp peer venv).

FastMCP documents ``create_proxy(config)`` over a Claude-style ``{"mcpServers": {...}}``
dict, then ``run()`` on stdio or streamable HTTP. Given a config, that proxy opens a fresh
backend session per request (a new ``initialize`` handshake for every call); given an
already connected ``Client``, it reuses that session for every request. The bench runs the
faster of the two (``--session shared``, the default here), so the comparison is with
FastMCP at its best; ``--session fresh`` is the documented default.

Usage: ``python fastmcp_proxy.py CONFIG.json [--transport stdio|http] [--port N] [--session shared|fresh]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

os.environ.setdefault("FASTMCP_SHOW_SERVER_BANNER", "false")
os.environ.setdefault("FASTMCP_LOG_LEVEL", "WARNING")
os.environ.setdefault("FASTMCP_CHECK_FOR_UPDATES", "off")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("config")
    parser.add_argument("--transport", choices=("stdio", "http"), default="stdio")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--session", choices=("shared", "fresh"), default="shared")
    opts = parser.parse_args()
    with open(opts.config, encoding="utf-8") as f:
        config = json.load(f)

    import anyio
    from fastmcp import Client
    from fastmcp.server import create_proxy

    kwargs = ({"transport": "stdio", "show_banner": False} if opts.transport == "stdio" else
              {"transport": "http", "host": "127.0.0.1", "port": opts.port, "path": "/mcp",
               "show_banner": False})

    if opts.session == "fresh":
        create_proxy(config, name="fastmcp-proxy").run(**kwargs)
        return 0

    async def serve() -> None:
        async with Client(config) as client:
            await create_proxy(client, name="fastmcp-proxy").run_async(**kwargs)

    anyio.run(serve)
    return 0


if __name__ == "__main__":
    sys.exit(main())
