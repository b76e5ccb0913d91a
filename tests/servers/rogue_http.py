"""A streamable-HTTP MCP server that misbehaves on ``tools/call`` (STANDARD LIBRARY ONLY).

Serves ``POST /mcp`` with plain JSON answers (no SSE, no session id), handshake era only:
``initialize``, ``notifications/*`` (202), ``ping``, ``tools/list`` (one tool, ``echo``)
answer normally; ``tools/call`` does what ``--on-call`` says:

* ``echo`` (default): answers ``echo: <text>``;
* ``hang``: never answers (the POST stays open until the client gives up);
* ``huge``: answers a result of ``--huge-bytes`` bytes (default 200 MB), written in
  chunks as it goes (``Transfer-Encoding: chunked`` unless ``--content-length``);
* ``exit``: the process exits at once, the request unanswered (a server that went away).

``GET /mcp`` is 405 (no standalone stream); ``DELETE /mcp`` is 200. Prints
``rogue ready http://127.0.0.1:PORT/mcp`` on stdout once listening (``--port 0`` picks one).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

CHUNK = 1 << 20
TOOL = {"name": "echo", "description": "Echo text.",
        "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    opts: argparse.Namespace

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._plain(405, b"")

    def do_DELETE(self) -> None:
        self._plain(200, b"")

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        message = json.loads(self.rfile.read(length) or b"{}")
        method, rid = message.get("method"), message.get("id")
        if rid is None:
            self._plain(202, b"")
            return
        if method == "initialize":
            version = message.get("params", {}).get("protocolVersion", "2025-11-25")
            self._answer(rid, {"protocolVersion": version, "capabilities": {"tools": {}},
                               "serverInfo": {"name": "rogue", "version": "1"}})
        elif method == "ping":
            self._answer(rid, {})
        elif method == "tools/list":
            self._answer(rid, {"tools": [TOOL]})
        elif method == "tools/call":
            self._call(rid, message.get("params", {}))
        else:
            self._error(rid, -32601, f"unknown method {method}")

    def _call(self, rid: Any, params: dict[str, Any]) -> None:
        mode = self.opts.on_call
        if mode == "hang":
            threading.Event().wait()
        if mode == "exit":
            os._exit(3)
        if mode == "huge":
            self._huge(rid)
            return
        text = (params.get("arguments") or {}).get("text", "")
        self._answer(rid, {"content": [{"type": "text", "text": f"echo: {text}"}], "isError": False})

    def _huge(self, rid: Any) -> None:
        size = self.opts.huge_bytes
        head = json.dumps({"jsonrpc": "2.0", "id": rid})[:-1].encode() + b', "result": {"content": [' \
            b'{"type": "text", "text": "'
        tail = b'"}], "isError": false}}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        chunked = not self.opts.content_length
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Content-Length", str(len(head) + size + len(tail)))
        self.end_headers()
        try:
            self._write(head, chunked)
            left = size
            block = b"x" * CHUNK
            while left > 0:
                self._write(block[: min(CHUNK, left)], chunked)
                left -= CHUNK
            self._write(tail, chunked)
            if chunked:
                self.wfile.write(b"0\r\n\r\n")
        except OSError:
            pass  # the client hung up, as it should

    def _write(self, data: bytes, chunked: bool) -> None:
        if chunked:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        else:
            self.wfile.write(data)

    def _answer(self, rid: Any, result: dict[str, Any]) -> None:
        self._json({"jsonrpc": "2.0", "id": rid, "result": result})

    def _error(self, rid: Any, code: int, message: str) -> None:
        self._json({"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message}})

    def _json(self, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _plain(self, status: int, data: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def main() -> None:
    p = argparse.ArgumentParser(description="A misbehaving streamable-HTTP MCP test server (stdlib only).")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--on-call", choices=["echo", "hang", "huge", "exit"], default="echo")
    p.add_argument("--huge-bytes", type=int, default=200 * 1024 * 1024)
    p.add_argument("--content-length", action="store_true", help="huge: announce the length up front")
    opts = p.parse_args()
    Handler.opts = opts
    server = ThreadingHTTPServer(("127.0.0.1", opts.port), Handler)
    server.daemon_threads = True
    sys.stdout.write(f"rogue ready http://127.0.0.1:{server.server_address[1]}/mcp\n")
    sys.stdout.flush()
    server.serve_forever()


if __name__ == "__main__":
    main()
