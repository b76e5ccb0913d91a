"""No secret reaches a log line, an error message or a status view, at any log level.

A real ``mcpvisor serve --log-level debug`` runs a config holding planted secrets (a
token, env values, header values), is driven through refusals, a successful call, a
failing upstream and the status tool, and neither its log nor anything it answered
may contain one of them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Final

import pytest
import trio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from tests.helpers import REAL_IO_BOUND_S, flaky, http_client, text_of
from tests.security.proxy import HTTP_HEADERS, INIT, running_proxy, write

pytestmark = pytest.mark.slow

TOKEN: Final = "planted-token-secret-DDDD3333"
ENV_TOKEN: Final = "planted-env-token-EEEE4444"
ENV_VALUE: Final = "planted-env-secret-AAAA1111"
HEADER_VALUE: Final = "planted-header-secret-BBBB2222"
API_KEY: Final = "planted-api-key-CCCC9999"
SECRETS: Final = (TOKEN, ENV_TOKEN, ENV_VALUE, HEADER_VALUE, API_KEY)


async def test_a_debug_log_of_a_run_whose_config_holds_secrets_contains_none_of_them(tmp_path: Path) -> None:
    """Refused and accepted requests, an unreachable upstream sent its headers, a call and the
    status tool: the debug log and every answer are free of the planted values."""
    config = write(
        tmp_path / "mcpvisor.json",
        {
            "mcpServers": {
                "fl": flaky(env={"PLANTED_KEY": ENV_VALUE}),
                "remote": {
                    "type": "http",
                    "url": "http://127.0.0.1:9/mcp",
                    "headers": {"Authorization": f"Bearer {HEADER_VALUE}", "X-Api-Key": "${API_KEY}"},
                },
            },
            "settings": {"exposure": "all", "authTokens": {"ci": TOKEN}, "startupWait": "5s"},
        },
    )
    log_file = tmp_path / "proxy.log"
    answers: list[str] = []
    with trio.fail_after(REAL_IO_BOUND_S):
        async with running_proxy(
            config,
            "--transport",
            "http",
            "--port",
            "0",
            "--log-file",
            str(log_file),
            env={"MCPVISOR_TOKEN": ENV_TOKEN, "API_KEY": API_KEY},
        ) as proxy:
            async with http_client() as http:
                for header in (f"Bearer {TOKEN[:-1]}", f"Bearer {TOKEN}x", f"Basic {TOKEN}", ""):
                    r = await http.post(
                        proxy.url, json=INIT, headers={**HTTP_HEADERS, "Authorization": header}
                    )
                    assert r.status_code == 401
                    answers.append(r.text + json.dumps(dict(r.headers)))
            async with (
                http_client(headers={"Authorization": f"Bearer {ENV_TOKEN}"}) as authed,
                Client(
                    streamable_http_client(proxy.url, http_client=authed), mode="legacy", cache=None
                ) as client,
            ):
                assert text_of(await client.call_tool("fl_echo", {"text": "x"})) == "echo: x"
                for name, args in (
                    ("get-server-status", {}),
                    ("remote_anything", {}),
                    ("fl_crash", {"status": 3}),
                ):
                    try:
                        answers.append((await client.call_tool(name, args)).model_dump_json())
                    except MCPError as exc:  # the crash: an error that names the server, nothing else
                        answers.append(json.dumps(exc.error.model_dump()))
    text = proxy.text() + "\n" + log_file.read_text() + "\n".join(answers)
    assert "DEBUG" in text  # the run really logged at debug level
    leaked = [s for s in SECRETS if s in text]
    assert not leaked, leaked
