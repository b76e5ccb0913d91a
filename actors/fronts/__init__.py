"""The fronts: how clients reach the proxy, and what guards them.

One module per front, as hypercorn keeps one per protocol:

* `stdio` — MCP on the proxy's own stdin/stdout (what Claude Code launches);
* `http` — streamable HTTP at ``/mcp`` (hypercorn + the SDK's session manager), with the
  frame checks in front of the SDK;
* `ws` — MCP over websocket (subprotocol ``mcp``), the server half;
* `fastpath` / `fastcall` — the lean ``tools/call`` path that routes bytes, not models;
* `sdk` — the shared SDK `Server` every front feeds (lists, resources, prompts, ...);
  `tools` its ``tools/call`` handler; `clients` and `origins` who a message goes to;
* the guards: `auth` (tokens, Host/Origin), `oauth` (JWT access tokens), `limits`
  (requests in flight per session), `frames` (JSON depth, ids, sizes), `outbox` (a
  bounded queue per client), `drain` (answers at shutdown).
"""
