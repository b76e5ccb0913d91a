"""The runtime inside the supervision tree: one life of an upstream, its link and
transport, the router, client sessions and the fast path.

Imports nothing from `mcpvisor` (a test checks it); the sans-IO cores are in
`mcpvisor.actors.core`.
"""

__version__ = "0.1.0"
"""mcpvisor's version (pyproject.toml's), sent as clientInfo to upstreams; `mcpvisor`
re-exports it."""
