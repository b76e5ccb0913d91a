"""An MCP server behind OAuth, with its own authorization server (STANDARD LIBRARY ONLY).

One HTTP server on 127.0.0.1 plays both parts of the MCP authorization spec:

* the resource server: ``POST /mcp`` (plain JSON answers, the 2025-11-25 handshake era;
  tool ``whoami`` answers ``"logged in"``) answers 401 with ``WWW-Authenticate: Bearer
  resource_metadata=...`` unless the request carries a live access token;
* the authorization server: Protected Resource Metadata (RFC 9728) at
  ``/.well-known/oauth-protected-resource/mcp``, metadata (RFC 8414) at
  ``/.well-known/oauth-authorization-server``, Dynamic Client Registration at
  ``/register``, ``/authorize`` (no person: it redirects at once with a code, the state
  and ``iss``), ``/token`` (``authorization_code`` with PKCE S256, ``refresh_token``
  with rotation, ``client_credentials`` for a client registered with a secret) and
  ``/revoke`` (RFC 7009).

Tokens are random; access tokens live ``--expires-in`` seconds (default 3600).

``--discovery`` picks how much of that a client can discover (a server written to an
older authorization spec): ``full`` (default, the above); ``as`` (2025-03-26 with
metadata: the 401 is a bare ``WWW-Authenticate: Bearer``, no Protected Resource
Metadata, the authorization server metadata at the origin); ``none`` (2025-03-26
without metadata: only the default endpoints ``/register``, ``/authorize``, ``/token``
at the origin, and no ``iss`` in the redirect, as nothing advertises one); ``closed``
(a 401 without a challenge and no way to log in at all: every OAuth path is 404).

For tests, ``GET /admin/stats`` answers what happened (grants by type, registrations,
revocations, 401s, the live tokens) and two POSTs change the world:
``/admin/expire`` (every access token dies: the next call is refused with a token the
client thinks valid) and ``/admin/revoke-grants`` (every refresh token dies: the next
refresh gets ``invalid_grant``).

Prints ``oauth ready http://127.0.0.1:PORT/mcp`` on stdout once listening.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import secrets
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

HANDSHAKE = "2025-11-25"


class World:
    """Everything the server knows, behind one lock (requests run on threads)."""

    def __init__(self, expires_in: int) -> None:
        self.lock = threading.Lock()
        self.expires_in = expires_in
        self.clients: dict[str, dict[str, Any]] = {}
        self.codes: dict[str, dict[str, Any]] = {}
        self.access: dict[str, float] = {}
        self.refresh: dict[str, str] = {}
        """refresh token -> client id"""
        self.stats: dict[str, Any] = {"authorization_code": 0, "refresh_token": 0, "client_credentials": 0,
                                      "register": 0, "revoked": 0, "unauthorized": 0, "invalid_grant": 0}

    def issue(self, client_id: str, *, refresh: bool = True) -> dict[str, Any]:
        access = "at-" + secrets.token_urlsafe(24)
        self.access[access] = time.time() + self.expires_in
        token: dict[str, Any] = {"access_token": access, "token_type": "Bearer",
                                 "expires_in": self.expires_in}
        if refresh:
            rt = "rt-" + secrets.token_urlsafe(24)
            self.refresh[rt] = client_id
            token["refresh_token"] = rt
        return token


WORLD = World(3600)


DISCOVERY = ("full", "as", "none", "closed")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    base = ""
    discovery = "full"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    # -- plumbing ---------------------------------------------------------------------
    def _send(self, status: int, body: Any = None, headers: dict[str, str] | None = None) -> None:
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        if body is not None:
            self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("content-length") or 0))

    def _form(self) -> dict[str, str]:
        return {k: v[0] for k, v in parse_qs(self._body().decode()).items()}

    def _client(self, form: dict[str, str]) -> dict[str, Any] | None:
        """The client a token or revoke request authenticates as (basic, post or none)."""
        auth = self.headers.get("authorization", "")
        if auth.lower().startswith("basic "):
            cid, _, secret = base64.b64decode(auth[6:]).decode().partition(":")
        else:
            cid, secret = form.get("client_id", ""), form.get("client_secret", "")
        client = WORLD.clients.get(cid)
        if client is None or (client.get("client_secret") and client["client_secret"] != secret):
            return None
        return client

    # -- routes -----------------------------------------------------------------------
    def _serves(self, path: str) -> bool:
        """``path`` exists in this ``--discovery`` mode."""
        if path == "/.well-known/oauth-protected-resource/mcp":
            return self.discovery == "full"
        if path == "/.well-known/oauth-authorization-server":
            return self.discovery in ("full", "as")
        if path in ("/register", "/authorize", "/token", "/revoke"):
            return self.discovery != "closed"
        return True

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        if not self._serves(path):
            self._send(404, {"error": "not_found"})
        elif path == "/.well-known/oauth-protected-resource/mcp":
            self._send(200, {"resource": f"{self.base}/mcp", "authorization_servers": [self.base]})
        elif path == "/.well-known/oauth-authorization-server":
            self._send(200, {
                "issuer": self.base, "authorization_endpoint": f"{self.base}/authorize",
                "token_endpoint": f"{self.base}/token", "registration_endpoint": f"{self.base}/register",
                "revocation_endpoint": f"{self.base}/revoke", "response_types_supported": ["code"],
                "grant_types_supported": ["authorization_code", "refresh_token", "client_credentials"],
                "code_challenge_methods_supported": ["S256"],
                "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post",
                                                          "none"],
                "authorization_response_iss_parameter_supported": True,
            })
        elif path == "/authorize":
            self._authorize()
        elif path == "/admin/stats":
            with WORLD.lock:
                self._send(200, {**WORLD.stats, "access": sorted(WORLD.access),
                                 "refresh": sorted(WORLD.refresh)})
        elif path == "/mcp":
            if self._authorized():
                self._send(405)
        else:
            self._send(404, {"error": "not_found"})

    def do_DELETE(self) -> None:
        self._send(200 if self._authorized() else 401)

    def do_POST(self) -> None:
        path = urlsplit(self.path).path
        if not self._serves(path):
            self._body()
            self._send(404, {"error": "not_found"})
        elif path == "/register":
            meta = json.loads(self._body() or b"{}")
            with WORLD.lock:
                WORLD.stats["register"] += 1
                cid = "client-" + secrets.token_hex(6)
                client = {**meta, "client_id": cid, "client_id_issued_at": int(time.time())}
                if meta.get("token_endpoint_auth_method", "client_secret_basic") != "none":
                    client["client_secret"] = "cs-" + secrets.token_urlsafe(16)
                    client.setdefault("token_endpoint_auth_method", "client_secret_basic")
                WORLD.clients[cid] = client
            self._send(201, client)
        elif path == "/token":
            self._token(self._form())
        elif path == "/revoke":
            form = self._form()
            with WORLD.lock:
                token = form.get("token", "")
                if WORLD.access.pop(token, None) is not None or WORLD.refresh.pop(token, None) is not None:
                    WORLD.stats["revoked"] += 1
            self._send(200)
        elif path == "/admin/expire":
            with WORLD.lock:
                WORLD.access.clear()
            self._send(200, {})
        elif path == "/admin/revoke-grants":
            with WORLD.lock:
                WORLD.access.clear()
                WORLD.refresh.clear()
            self._send(200, {})
        elif path == "/admin/client":
            # A pre-registered confidential client (client_credentials tests).
            meta = json.loads(self._body() or b"{}")
            with WORLD.lock:
                WORLD.clients[meta["client_id"]] = meta
            self._send(200, {})
        elif path == "/mcp":
            self._mcp()
        else:
            self._send(404, {"error": "not_found"})

    def _authorized(self) -> bool:
        auth = self.headers.get("authorization", "")
        token = auth[7:] if auth.lower().startswith("bearer ") else ""
        with WORLD.lock:
            live = WORLD.access.get(token, 0.0) > time.time()
            if not live:
                WORLD.stats["unauthorized"] += 1
        if not live:
            challenge = {
                "full": f'Bearer resource_metadata="{self.base}/.well-known/oauth-protected-resource/mcp"',
                "as": "Bearer", "none": "Bearer"}.get(self.discovery)
            self._body()
            headers = {"www-authenticate": challenge} if challenge else None
            self._send(401, {"error": "invalid_token"}, headers)
        return live

    def _authorize(self) -> None:
        q = {k: v[0] for k, v in parse_qs(urlsplit(self.path).query).items()}
        client = WORLD.clients.get(q.get("client_id", ""))
        if client is None or q.get("code_challenge_method") != "S256" or "code_challenge" not in q:
            self._send(400, {"error": "invalid_request"})
            return
        code = "code-" + secrets.token_urlsafe(16)
        with WORLD.lock:
            WORLD.codes[code] = {"client_id": client["client_id"], "challenge": q["code_challenge"],
                                 "redirect_uri": q.get("redirect_uri")}
        issued = {"code": code, "state": q.get("state", "")}
        if self.discovery in ("full", "as"):  # RFC 9207: the issuer its metadata names
            issued["iss"] = self.base
        query = urlencode(issued)
        target = f"{q['redirect_uri']}?{query}"
        self._send(302, None, {"location": target})

    def _token(self, form: dict[str, str]) -> None:
        grant = form.get("grant_type")
        with WORLD.lock:
            client = self._client(form)
            if client is None:
                self._send(401, {"error": "invalid_client"})
                return
            cid = client["client_id"]
            if grant == "authorization_code":
                code = WORLD.codes.pop(form.get("code", ""), None)
                verifier = form.get("code_verifier", "")
                hashed = hashlib.sha256(verifier.encode()).digest()
                digest = base64.urlsafe_b64encode(hashed).decode().rstrip("=")
                if code is None or code["client_id"] != cid or code["challenge"] != digest \
                        or code["redirect_uri"] != form.get("redirect_uri"):
                    WORLD.stats["invalid_grant"] += 1
                    self._send(400, {"error": "invalid_grant"})
                    return
            elif grant == "refresh_token":
                if WORLD.refresh.pop(form.get("refresh_token", ""), None) != cid:
                    WORLD.stats["invalid_grant"] += 1
                    self._send(400, {"error": "invalid_grant"})
                    return
            elif grant == "client_credentials":
                if not client.get("client_secret"):
                    self._send(400, {"error": "unauthorized_client"})
                    return
            else:
                self._send(400, {"error": "unsupported_grant_type"})
                return
            WORLD.stats[grant] += 1
            token = WORLD.issue(cid, refresh=grant != "client_credentials")
        self._send(200, token, {"cache-control": "no-store"})

    def _mcp(self) -> None:
        if not self._authorized():
            return
        body = json.loads(self._body() or b"null")
        if not isinstance(body, dict) or "id" not in body:
            self._send(202)
            return
        method = str(body.get("method"))
        result: dict[str, Any] | None
        if method == "initialize":
            result = {"protocolVersion": HANDSHAKE, "capabilities": {"tools": {}},
                      "serverInfo": {"name": "oauth-protected", "version": "1"}}
        elif method == "ping":
            result = {}
        elif method == "tools/list":
            result = {"tools": [{"name": "whoami", "description": "Who the token says you are.",
                                 "inputSchema": {"type": "object"}}]}
        elif method == "tools/call":
            result = {"content": [{"type": "text", "text": "logged in"}]}
        else:
            result = None
        if result is None:
            reply = {"jsonrpc": "2.0", "id": body["id"], "error": {"code": -32601, "message": f"no {method}"}}
        else:
            reply = {"jsonrpc": "2.0", "id": body["id"], "result": result}
        self._send(200, reply, {"mcp-session-id": "oauth-session"} if method == "initialize" else None)


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--expires-in", type=int, default=3600, help="access token lifetime in seconds")
    p.add_argument("--discovery", choices=DISCOVERY, default="full",
                   help="what a client can discover (see the module's docstring)")
    opts = p.parse_args()
    WORLD.expires_in = opts.expires_in
    Handler.discovery = opts.discovery
    server = ThreadingHTTPServer(("127.0.0.1", opts.port), Handler)
    Handler.base = f"http://127.0.0.1:{server.server_address[1]}"
    sys.stdout.write(f"oauth ready {Handler.base}/mcp\n")
    sys.stdout.flush()
    server.serve_forever()


if __name__ == "__main__":
    main()
