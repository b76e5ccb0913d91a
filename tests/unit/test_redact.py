"""What `mcpvisor.redact` takes for a secret, and what it leaves readable."""

from __future__ import annotations

import pytest

from mcpvisor.dashboard._entries import masked, unmask
from mcpvisor.redact import MASK, looks_secret, redact_args, redact_url


@pytest.mark.parametrize(
    ("args", "shown"),
    [
        (["--api-key", "abc123xyz"], ["--api-key", MASK]),
        (["--token=hunter2hunter2"], [f"--token={MASK}"]),
        (["-e", "GITHUB_TOKEN=ghx"], ["-e", f"GITHUB_TOKEN={MASK}"]),
        (["ghp_0123456789abcdefghijKLMN"], [MASK]),
        (["--api-key", "${API_KEY}"], ["--api-key", "${API_KEY}"]),
        (["--port", "8080", "@scope/server-files", "/home/me/My Docs"], None),
        (["--key-file", "/etc/key.pem", "--verbose"], None),
    ],
)
def test_args_that_carry_keys_are_masked_and_the_rest_stays(args: list[str], shown: list[str] | None) -> None:
    """A key after a key-ish flag, in ``--flag=``, in ``NAME=``, or with a known prefix is
    masked; ``${VAR}`` references, ports, package names and paths are shown as written."""
    assert redact_args(args) == (args if shown is None else shown)


def test_urls_lose_passwords_and_key_query_values_only() -> None:
    assert redact_url("https://me:pw@api.example/mcp?api_key=zzz123&region=eu") == (
        f"https://me:{MASK}@api.example/mcp?api_key={MASK}&region=eu"
    )
    assert redact_url("http://127.0.0.1:9/mcp") == "http://127.0.0.1:9/mcp"


@pytest.mark.parametrize(
    ("value", "secret"),
    [
        ("sk-proj-Zx81Qw7Lm2Np4Rt6Vb9Kc3Hd", True),
        ("aB3dE5gH7jK9mN1pQ3sT5vX7zA9cE1gI", True),
        ("0123456789abcdef0123456789abcdef01234567", False),  # a git sha
        ("550e8400-e29b-41d4-a716-446655440000", False),  # a UUID
        ("ModelContextProtocolServerFilesystem2", False),  # an identifier
    ],
)
def test_what_looks_like_a_key(value: str, secret: bool) -> None:
    assert looks_secret(value) is secret


def test_a_dashboard_edit_that_sends_masked_args_back_keeps_the_stored_ones() -> None:
    stored = {"command": "srv", "args": ["--api-key", "real-key-123"], "url": None}
    shown = masked(stored)
    assert shown["args"] == ["--api-key", MASK]
    assert unmask(shown, stored)["args"] == ["--api-key", "real-key-123"]
    edited = ["--api-key", "new-key-456"]
    assert unmask({**shown, "args": edited}, stored)["args"] == edited
