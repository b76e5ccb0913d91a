"""The OAuth token files (`mcpvisor.tokens.FileTokenStore`) on a real state directory:
what two proxies sharing it see, and what a refused refresh may delete."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import trio
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

from mcpvisor import redact
from mcpvisor.tokens import FileTokenStore

BOUND_S = 30.0


def token(n: int) -> OAuthToken:
    return OAuthToken(access_token=f"access-token-{n:04d}", refresh_token=f"refresh-token-{n:04d}",
                      expires_in=600)


async def test_two_proxies_share_one_file_and_a_stale_refusal_deletes_nothing(tmp_path: Path) -> None:
    """Proxy B sees what proxy A stored; when A is refused a refresh token that B has
    already replaced, A's `forget_tokens` keeps B's tokens; refused the current one, the
    tokens go (the client registration stays)."""
    with trio.fail_after(BOUND_S):
        a, b = FileTokenStore(tmp_path, "linear"), FileTokenStore(tmp_path, "linear")
        client = OAuthClientInformationFull(client_id="c-1", redirect_uris=None, issuer="https://as.example")
        await a.save_client(client)
        await a.save_tokens(token(1), obtained_at=1000.0)
        seen = await b.load()
        assert seen.tokens == token(1)
        assert seen.obtained_at == 1000.0
        await b.save_tokens(token(2), obtained_at=1500.0)  # B refreshed: token 1's refresh is spent
        assert await a.forget_tokens(refresh_token="refresh-token-0001") is False
        assert (await a.load()).tokens == token(2)
        assert await a.forget_tokens(refresh_token="refresh-token-0002") is True
        left = await b.load()
        assert left.tokens is None
        assert left.client is not None
        assert left.client.client_id == "c-1"


async def test_the_file_is_private_keyed_by_issuer_and_its_tokens_are_scrubbed(tmp_path: Path) -> None:
    """0600 in a 0700 directory; the record sits under the issuer that registered the
    client; a token read or written is scrubbed from every log line of the process."""
    with trio.fail_after(BOUND_S):
        store = FileTokenStore(tmp_path, "linear")
        await store.save_client(OAuthClientInformationFull(client_id="c-1", redirect_uris=None,
                                                           issuer="https://as.example"))
        await store.save_tokens(token(7), obtained_at=1.0)
        assert stat.S_IMODE(store.path.stat().st_mode) == 0o600
        assert stat.S_IMODE(store.path.parent.stat().st_mode) == 0o700
        doc = json.loads(store.path.read_text())
        assert doc["issuer"] == "https://as.example"
        assert doc["issuers"]["https://as.example"]["tokens"]["access_token"] == "access-token-0007"
        assert redact.scrub_known("sent access-token-0007") == f"sent {redact.REDACTED}"
        gone = await store.forget()
        assert gone.tokens == token(7)
        assert not store.path.exists()
