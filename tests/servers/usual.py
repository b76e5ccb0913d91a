"""An MCP server written the usual way with the SDK 2.3 `MCPServer` (stdio, asyncio).

Its tool ``add_greeter {name}`` adds a tool ``name`` with ``add_tool`` and tells the
client with ``ctx.session.send_tool_list_changed()``, as the SDK's examples do; like any
`MCPServer` it advertises ``tools.listChanged: false`` all the same. ``--quiet``: it adds
the tool and tells nobody (a server that cannot announce changes: only re-listing
finds the new tool). Tool ``echo {text}`` answers ``echo: text``. Prints ``usual ready``
on stderr.
"""

from __future__ import annotations

import argparse
import sys
import warnings

from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPDeprecationWarning

warnings.simplefilter("ignore", MCPDeprecationWarning)


def build(quiet: bool) -> MCPServer:
    server = MCPServer("usual")

    @server.tool()
    def echo(text: str) -> str:
        """Echo the text back as 'echo: {text}'."""
        return f"echo: {text}"

    @server.tool()
    async def add_greeter(name: str, ctx: Context) -> str:
        """Add a tool `name` that greets; announce it unless the server is --quiet."""

        def greet(who: str) -> str:
            return f"{name}: hello {who}"

        server.add_tool(greet, name=name, description=f"Greets, as {name}.")
        if not quiet:
            await ctx.session.send_tool_list_changed()
        return f"added {name}"

    return server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quiet", action="store_true", help="add tools without announcing them")
    opts = parser.parse_args()
    print("usual ready", file=sys.stderr, flush=True)
    build(opts.quiet).run("stdio")


if __name__ == "__main__":
    main()
