"""OAuth 2.1 access tokens (``settings.auth``) against a small local issuer.

The issuer is a key pair and two JSON documents (RFC 8414 metadata naming its JWKS, and
the JWKS) served by hypercorn on 127.0.0.1 in this process; the proxy is a real
``mcpvisor serve`` subprocess that fetches the keys from it.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

import httpx2
import hypercorn.config
import hypercorn.trio
import jwt
import pytest
import trio
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import RSAAlgorithm
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from trio_websocket import open_websocket_url

from tests.helpers import REAL_IO_BOUND_S, flaky, http_client
from tests.security.proxy import HTTP_HEADERS, INIT, running_proxy, write
from tests.security.test_security_tokens import raw_handshake

pytestmark = pytest.mark.slow

AUDIENCE: Final = "http://127.0.0.1/mcp"
"""The resource the issuer mints tokens for (this proxy), as the audience claim names it."""
KID: Final = "test-key-1"
SCOPE: Final = "mcp"


def new_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@asynccontextmanager
async def local_issuer(key: rsa.RSAPrivateKey) -> AsyncIterator[str]:
    """Serve an issuer's metadata and JWKS on 127.0.0.1; yield its issuer URL."""
    jwk = json.loads(RSAAlgorithm.to_jwk(key.public_key()))
    jwk.update({"kid": KID, "use": "sig", "alg": "RS256"})
    issuer: list[str] = []

    async def metadata(request: Request) -> JSONResponse:
        return JSONResponse(
            {
                "issuer": issuer[0],
                "jwks_uri": issuer[0] + "/jwks",
                "authorization_endpoint": issuer[0] + "/authorize",
                "token_endpoint": issuer[0] + "/token",
                "response_types_supported": ["code"],
            }
        )

    async def jwks(request: Request) -> JSONResponse:
        return JSONResponse({"keys": [jwk]})

    app = Starlette(routes=[Route("/.well-known/oauth-authorization-server", metadata), Route("/jwks", jwks)])
    config = hypercorn.config.Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    config.graceful_timeout = 0.5
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(hypercorn.trio.serve, app, config)
        issuer.append(binds[0].rstrip("/"))
        yield issuer[0]
        nursery.cancel_scope.cancel()


def token(key: rsa.RSAPrivateKey, issuer: str, **claims: Any) -> str:
    now = int(time.time())
    body = {
        "iss": issuer,
        "aud": AUDIENCE,
        "sub": "user-1",
        "client_id": "agent",
        "iat": now,
        "exp": now + 300,
        "scope": SCOPE,
        **claims,
    }
    return jwt.encode(body, key, algorithm="RS256", headers={"kid": KID})


async def test_jwt_access_tokens_good_expired_wrong_audience_wrong_signature(tmp_path: Path) -> None:
    """Only a token signed by the issuer's key, unexpired, for this audience, with the required
    scope gets a session; the 401 points OAuth clients at the Protected Resource Metadata,
    which names the issuer."""
    key, other_key = new_key(), new_key()
    with trio.fail_after(REAL_IO_BOUND_S):
        async with local_issuer(key) as issuer:
            config = write(
                tmp_path / "mcpvisor.json",
                {
                    "mcpServers": {"fl": flaky()},
                    "settings": {"auth": {"issuer": issuer, "audience": AUDIENCE, "requiredScopes": [SCOPE]}},
                },
            )
            async with (
                running_proxy(config, "--transport", "http", "--port", "0") as proxy,
                http_client() as http,
            ):

                async def status(bearer: str) -> httpx2.Response:
                    return await http.post(
                        proxy.url, json=INIT, headers={**HTTP_HEADERS, "Authorization": f"Bearer {bearer}"}
                    )

                good = await status(token(key, issuer))
                assert good.status_code == 200
                assert good.headers.get("mcp-session-id")
                now = int(time.time())
                for bad in (
                    token(key, issuer, exp=now - 3600, iat=now - 7200),  # expired
                    token(key, issuer, aud="https://elsewhere.example/mcp"),  # wrong audience
                    token(other_key, issuer),  # wrong signature
                    token(key, "http://127.0.0.1:1"),
                ):  # wrong issuer
                    refused = await status(bad)
                    assert refused.status_code == 401
                    assert refused.headers["www-authenticate"].startswith("Bearer")
                assert (await status(token(key, issuer, scope="other"))).status_code == 403
                anonymous = await http.post(proxy.url, json=INIT, headers=HTTP_HEADERS)
                assert anonymous.status_code == 401
                challenge = anonymous.headers["www-authenticate"]
                assert (
                    'resource_metadata="http://127.0.0.1/.well-known/oauth-protected-resource/mcp"'
                    in challenge
                )
                base = proxy.url.removesuffix("/mcp")
                prm = (await http.get(base + "/.well-known/oauth-protected-resource/mcp")).json()
                assert prm["resource"] == AUDIENCE
                assert [s.rstrip("/") for s in prm["authorization_servers"]] == [issuer]
                assert prm["scopes_supported"] == [SCOPE]
            assert not any(part in proxy.text() for part in good.request.headers["authorization"].split()[1:])


def crafted_es256_token(issuer: str) -> str:
    """A token whose header says ES256 but names the issuer's RSA key id (public in its JWKS):
    PyJWT raises TypeError, not a PyJWTError, when asked to check it with that key."""
    ec_key = ec.generate_private_key(ec.SECP256R1())
    now = int(time.time())
    claims = {"iss": issuer, "aud": AUDIENCE, "exp": now + 300, "scope": SCOPE}
    return jwt.encode(claims, ec_key, algorithm="ES256", headers={"kid": KID})


@pytest.mark.parametrize("transport", ["http", "ws"])
async def test_a_crafted_jwt_is_a_401_and_the_proxy_keeps_serving(tmp_path: Path, transport: str) -> None:
    """Issue 23 item 2: an ES256 header with the issuer's RSA kid used to make the HTTP front
    answer 500 with a traceback and the websocket front exit the process. It must be an
    ordinary 401 ``invalid_token`` (with a log line), twice in a row, and a good token from
    the same issuer must still get in afterwards."""
    key = new_key()
    with trio.fail_after(REAL_IO_BOUND_S):
        async with local_issuer(key) as issuer:
            config = write(
                tmp_path / "mcpvisor.json",
                {
                    "mcpServers": {"fl": flaky()},
                    "settings": {"auth": {"issuer": issuer, "audience": AUDIENCE, "requiredScopes": [SCOPE]}},
                },
            )
            crafted, good = crafted_es256_token(issuer), token(key, issuer)
            async with running_proxy(config, "--transport", transport, "--port", "0") as proxy:
                if transport == "http":
                    async with http_client() as http:
                        for bearer, want in ((crafted, 401), (crafted, 401), (good, 200)):
                            auth = {"Authorization": f"Bearer {bearer}"}
                            r = await http.post(proxy.url, json=INIT, headers={**HTTP_HEADERS, **auth})
                            assert r.status_code == want, r.text
                            if want == 401:
                                assert 'error="invalid_token"' in r.headers["www-authenticate"]
                                assert "Traceback" not in r.text
                                assert "TypeError" not in r.text
                else:
                    for bearer, want in ((crafted, 401), (crafted, 401), (good, 101)):
                        status, head = await raw_handshake(proxy.port, {"Authorization": f"Bearer {bearer}"})
                        assert status == want, head
                    url = f"ws://127.0.0.1:{proxy.port}/"
                    headers = [(b"Authorization", f"Bearer {good}".encode())]
                    async with open_websocket_url(url, subprotocols=["mcp"], extra_headers=headers) as ws:
                        await ws.send_message(json.dumps(INIT))
                        assert json.loads(await ws.get_message())["result"]["serverInfo"]["name"]
                await proxy.wait_log("refused an access token")
                assert proxy.process.returncode is None
    assert "Traceback" not in proxy.text()
    assert crafted not in proxy.text()
    assert good not in proxy.text()
