"""The command line a ``stdio`` or ``stdio-docker`` server is started with.

Shared by the upstream actor and ``mcpvisor mcp test`` / ``mcp list`` (`mcpvisor.probe`), so
both start a server the same way; here, apart from the HTTP client transports
(`mcpvisor.actors.transports`), so starting a stdio server loads no HTTP client.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mcpvisor.actors.core.spec import ServerSpec


def stdio_argv(spec: ServerSpec) -> list[str]:
    """The command line of a ``stdio`` or ``stdio-docker`` server."""
    if spec.transport == "stdio":
        return [spec.command or "", *spec.args]
    return docker_argv(spec)


def docker_argv(spec: ServerSpec) -> list[str]:
    argv = ["docker", "run", "-i", "--rm", "--init"]
    for key in spec.env:
        argv += ["-e", key]
    argv += list(spec.docker_args)
    argv.append(spec.image or "")
    argv += list(spec.args)
    return argv
