"""A streamable-HTTP MCP server that records what its client sends (STANDARD LIBRARY ONLY).

Serves ``POST /mcp`` with plain JSON answers in both eras: ``initialize`` opens the
handshake era (2025-11-25, a session id), ``server/discover`` answers 2026-07-28, and a
request carrying the 2026-07-28 ``_meta`` envelope gets ``resultType`` (and list results
``ttlMs``/``cacheScope``). It offers:

* tool ``lookup``: a JSON Schema 2020-12 input schema with ``$defs``, a local ``$ref``,
  a remote ``$ref`` to this server's own ``GET /schema.json`` (so a client that
  dereferences it is seen), and an ``x-mcp-header: Region`` parameter; a call answers
  its arguments as JSON text;
* tool ``broken``: an ``x-mcp-header`` that is not a header name (a 2026-07-28 client
  MUST drop the tool);
* resource ``memo://one`` and prompt ``greet``.

``--record PATH`` appends one JSON line per HTTP request: ``{"http": METHOD, "path",
"headers": {name: value} (the ``mcp-*`` ones and ``traceparent``, lower-cased), "body": the JSON body}``.
``lookup_schema()`` is the tool's schema text exactly as served (for byte comparisons).
Prints ``recording ready http://127.0.0.1:PORT/mcp`` on stdout once listening.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODERN = "2026-07-28"
HANDSHAKE = "2025-11-25"
ENVELOPE = "io.modelcontextprotocol/protocolVersion"


def lookup_schema(base: str) -> str:
    """The ``lookup`` tool's input schema, as the exact text the server sends."""
    return (
        '{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object",'
        '"$defs":{"item":{"type":"object","properties":{"sku":{"type":"string"}},'
        '"required":["sku"],"additionalProperties":false}},'
        '"properties":{"region":{"type":"string","x-mcp-header":"Region"},'
        '"item":{"$ref":"#/$defs/item"},'
        f'"remote":{{"$ref":"{base}/schema.json"}},'
        '"tags":{"type":"array","prefixItems":[{"type":"string"}],"items":false}},'
        '"required":["region"]}'
    )


BROKEN = {"name": "broken", "description": "A tool whose x-mcp-header is no header name.",
          "inputSchema": {"type": "object", "properties": {"zone": {"type": "string",
                                                                      "x-mcp-header": "bad name"}}}}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    record_path: str | None = None
    base = ""
    lock = threading.Lock()

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def record(self, body: Any) -> None:
        if not self.record_path:
            return
        headers = {k.lower(): v for k, v in self.headers.items()
                   if k.lower().startswith("mcp-") or k.lower() == "traceparent"}
        line = json.dumps({"http": self.command, "path": self.path, "headers": headers, "body": body})
        with self.lock, open(self.record_path, "a") as f:
            f.write(line + "\n")

    def do_GET(self) -> None:
        self.record(None)
        if self.path == "/schema.json":
            self._send(200, b'{"type":"string"}')
        else:
            self._send(405, b"")

    def do_DELETE(self) -> None:
        self.record(None)
        self._send(200, b"")

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = json.loads(self.rfile.read(length) or b"null")
        self.record(body)
        if not isinstance(body, dict) or "id" not in body:
            self._send(202, b"")
            return
        method = str(body.get("method"))
        params = body.get("params") or {}
        modern = ENVELOPE in (params.get("_meta") or {})
        result = self.answer(method, params, modern)
        if result is None:
            reply = {"jsonrpc": "2.0", "id": body["id"],
                     "error": {"code": -32601, "message": f"Method not found: {method}"}}
        else:
            if modern:
                result = {"resultType": "complete", **result}
            reply = {"jsonrpc": "2.0", "id": body["id"], "result": result}
        self._send(200, json.dumps(reply).encode(), json_body=True,
                   session=method == "initialize")

    def answer(self, method: str, params: dict[str, Any], modern: bool) -> dict[str, Any] | None:
        caps: dict[str, Any] = {"tools": {}, "resources": {}, "prompts": {}}
        cache = {"ttlMs": 0, "cacheScope": "private"} if modern else {}
        if method == "initialize":
            return {"protocolVersion": HANDSHAKE, "capabilities": caps,
                    "serverInfo": {"name": "recording", "version": "1"}}
        if method == "server/discover":
            return {"supportedVersions": [MODERN], "capabilities": caps,
                    "serverInfo": {"name": "recording", "version": "1"}, **cache}
        if method == "ping":
            return {}
        if method == "tools/list":
            lookup = {"name": "lookup", "description": "Look an item up.",
                      "inputSchema": json.loads(lookup_schema(self.base))}
            return {"tools": [lookup, BROKEN], **cache}
        if method == "tools/call":
            text = json.dumps(params.get("arguments") or {}, sort_keys=True)
            return {"content": [{"type": "text", "text": text}]}
        if method == "resources/list":
            return {"resources": [{"uri": "memo://one", "name": "one"}], **cache}
        if method == "resources/templates/list":
            return {"resourceTemplates": [], **cache}
        if method == "resources/read":
            return {"contents": [{"uri": params.get("uri"), "text": "memo"}]}
        if method == "prompts/list":
            return {"prompts": [{"name": "greet", "description": "Say hello."}], **cache}
        if method == "prompts/get":
            return {"messages": [{"role": "user", "content": {"type": "text", "text": "hello"}}]}
        return None

    def _send(self, status: int, data: bytes, *, json_body: bool = False, session: bool = False) -> None:
        self.send_response(status)
        if json_body:
            self.send_header("content-type", "application/json")
        if session:
            self.send_header("mcp-session-id", "recording-session")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--record", metavar="PATH")
    opts = p.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", opts.port), Handler)
    Handler.record_path = opts.record
    Handler.base = f"http://127.0.0.1:{server.server_address[1]}"
    sys.stdout.write(f"recording ready {Handler.base}/mcp\n")
    sys.stdout.flush()
    server.serve_forever()


if __name__ == "__main__":
    main()
