"""TLS on a direct bind: ``--certfile/--keyfile`` serve https:// and wss://.

The certificate is self-signed for 127.0.0.1, made by the test; the clients trust exactly
it, so a handshake that succeeds proves the proxy served that certificate.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import ssl
from pathlib import Path

import pytest
import trio
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from trio_websocket import open_websocket_url

from tests.helpers import REAL_IO_BOUND_S, http_client
from tests.security.proxy import HTTP_HEADERS, INIT, running_proxy, write

pytestmark = pytest.mark.slow

TOKEN = "tls-token-0123456789abcdef0123"


def self_signed(directory: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False
        )
        .sign(key, hashes.SHA256())
    )
    certfile, keyfile = directory / "cert.pem", directory / "key.pem"
    certfile.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    keyfile.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    keyfile.chmod(0o600)
    return certfile, keyfile


@pytest.mark.parametrize("transport", ["http", "ws"])
async def test_certfile_and_keyfile_serve_tls_with_the_token_still_required(
    tmp_path: Path, transport: str
) -> None:
    """The proxy answers over TLS with the given certificate (https / wss), and the token
    still guards it."""
    certfile, keyfile = self_signed(tmp_path)
    trust = ssl.create_default_context(cafile=str(certfile))
    config = write(tmp_path / "mcpvisor.json", {"mcpServers": {}, "settings": {"authToken": TOKEN}})
    with trio.fail_after(REAL_IO_BOUND_S):
        async with running_proxy(
            config,
            "--transport",
            transport,
            "--port",
            "0",
            "--certfile",
            str(certfile),
            "--keyfile",
            str(keyfile),
        ) as proxy:
            if transport == "http":
                assert proxy.url.startswith("https://127.0.0.1:")
                async with http_client(verify=trust) as http:
                    assert (await http.post(proxy.url, json=INIT, headers=HTTP_HEADERS)).status_code == 401
                    ok = await http.post(
                        proxy.url, json=INIT, headers={**HTTP_HEADERS, "Authorization": f"Bearer {TOKEN}"}
                    )
                    assert ok.status_code == 200
            else:
                assert proxy.url.startswith("wss://127.0.0.1:")
                async with open_websocket_url(
                    proxy.url,
                    ssl_context=trust,
                    subprotocols=["mcp"],
                    extra_headers=[(b"Authorization", f"Bearer {TOKEN}".encode())],
                ) as ws:
                    await ws.send_message(json.dumps(INIT))
                    assert "result" in json.loads(await ws.get_message())
