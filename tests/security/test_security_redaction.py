"""Every secret source is redacted everywhere, at start and after a hot reload (issue 23 item 12).

A real ``mcpvisor serve --log-level debug`` starts with ``$MCPVISOR_TOKEN`` set and a
journal that keeps payloads; a hot reload then adds a server whose env, ``--api-key``
argument and URL-style key it prints on its stderr. Neither the log, nor the status
views, nor the journal may hold one of those values; the upstream never inherits the
front's token; the journal's files are private (0600).
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import stat
import subprocess
from pathlib import Path
from typing import Any, Final

import pytest
import trio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.helpers import PY, REAL_IO_BOUND_S, SERVERS_DIR, flaky, http_client, text_of
from tests.security.proxy import running_proxy, write

pytestmark = pytest.mark.slow

FRONT_TOKEN: Final = "front-token-0123456789abcdefGHIJ"
ENV_SECRET: Final = "leaky-env-secret-5551234"
ARG_SECRET: Final = "leaky-arg-secret-7778899"
PREFIXED_KEY: Final = "sk-proj-Zx81Qw7Lm2Np4Rt6Vb9Kc3Hd"
SECRETS: Final = (FRONT_TOKEN, ENV_SECRET, ARG_SECRET, PREFIXED_KEY)


def leaky() -> dict[str, Any]:
    return {
        "command": PY,
        "args": [
            str(SERVERS_DIR / "leaky.py"), "--api-key", ARG_SECRET, PREFIXED_KEY, "--print-env", "LEAKY_KEY"
        ],
        "env": {"LEAKY_KEY": ENV_SECRET},
    }


def add_leaky(config: Path) -> None:
    doc = json.loads(config.read_text())
    doc["mcpServers"]["leaky"] = leaky()
    config.write_text(json.dumps(doc))


def journal_rows(path: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(path) as db:
        return db.execute("SELECT tool, arguments, result, error FROM calls").fetchall()


async def test_a_server_added_by_reload_leaks_nothing_into_log_status_or_journal(tmp_path: Path) -> None:
    """The added server prints its env value, its ``--api-key`` value and an ``sk-`` key on
    stderr and says them back through a tool: the log shows ``[redacted]`` where they were,
    the status tool and the journal hold none of them, the server does not see
    ``$MCPVISOR_TOKEN``, and the journal's files are mode 0600."""
    journal = tmp_path / "calls.db"
    config = write(
        tmp_path / "mcpvisor.json",
        {
            "mcpServers": {"fl": flaky()},
            "settings": {"exposure": "all", "journal": str(journal), "journalPayloads": True},
        },
    )
    answers: list[str] = []
    with trio.fail_after(REAL_IO_BOUND_S):
        async with running_proxy(
            config, "--transport", "http", "--port", "0", env={"MCPVISOR_TOKEN": FRONT_TOKEN}
        ) as proxy:
            seen = len(proxy.log)
            add_leaky(config)
            proxy.process.send_signal(signal.SIGHUP)
            await proxy.wait_log("config reloaded", after=seen)
            await proxy.wait_log("LEAKY_KEY=", after=seen)
            async with (
                http_client(headers={"Authorization": f"Bearer {FRONT_TOKEN}"}) as authed,
                Client(
                    streamable_http_client(proxy.url, http_client=authed), mode="legacy", cache=None
                ) as client,
            ):
                environment = await client.call_tool("leaky_environment", {"name": "MCPVISOR_TOKEN"})
                assert text_of(environment) == "unset"
                said = await client.call_tool("leaky_say", {"text": f"my key is {PREFIXED_KEY}"})
                answers.append(text_of(said))
                answers.append((await client.call_tool("get-server-status", {})).model_dump_json())
            await proxy.wait_log("leaky says", after=seen)
    log = proxy.text()
    starting = next(line for line in proxy.log if "leaky starting with arguments" in line)
    assert "[redacted]" in starting
    assert "[redacted]" in next(line for line in proxy.log if "LEAKY_KEY=" in line)
    leaked = [s for s in SECRETS if s in log]
    assert not leaked, leaked
    status = answers[1]
    assert "leaky" in status
    assert not [s for s in SECRETS if s in status]
    rows = journal_rows(journal)
    assert any(tool == "say" for tool, *_ in rows), rows
    stored = json.dumps(rows)
    assert "my key is" in stored
    assert not [s for s in SECRETS if s in stored]
    for path in (journal, journal.with_name(journal.name + "-wal"), journal.with_name(journal.name + "-shm")):
        if path.exists():
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path


async def test_a_front_token_reaches_no_upstream_under_the_name_it_came_in(tmp_path: Path) -> None:
    """``"authToken": "${MY_FRONT_TOKEN}"``: the upstream does not inherit ``$MY_FRONT_TOKEN``
    (nor ``$MCPVISOR_TOKEN``, nor the shared store's key), while an ordinary variable of the
    proxy's environment still reaches it; a server given the token on purpose in its ``env`` has it."""
    named_token = "front-token-by-another-name-31337"
    given = {**leaky(), "env": {"LEAKY_KEY": ENV_SECRET, "ON_PURPOSE": "${MY_FRONT_TOKEN}"}}
    config = write(
        tmp_path / "mcpvisor.json",
        {
            "mcpServers": {"leaky": leaky(), "given": given},
            "settings": {"exposure": "all", "authToken": "${MY_FRONT_TOKEN}"},
        },
    )
    env = {"MY_FRONT_TOKEN": named_token, "MCPVISOR_TOKEN": FRONT_TOKEN, "AN_ORDINARY_VAR": "x",
           "MCPVISOR_STORE_KEY": "the-shared-store-key-of-the-replicas-0123"}
    seen: dict[str, str] = {}
    with trio.fail_after(REAL_IO_BOUND_S):
        async with (
            running_proxy(config, "--transport", "http", "--port", "0", env=env) as proxy,
            http_client(headers={"Authorization": f"Bearer {named_token}"}) as authed,
            Client(
                streamable_http_client(proxy.url, http_client=authed), mode="legacy", cache=None
            ) as client,
        ):
            for tool, name in (
                ("leaky_environment", "MY_FRONT_TOKEN"),
                ("leaky_environment", "MCPVISOR_TOKEN"),
                ("leaky_environment", "MCPVISOR_STORE_KEY"),
                ("leaky_environment", "AN_ORDINARY_VAR"),
                ("given_environment", "ON_PURPOSE"),
            ):
                seen[f"{tool}:{name}"] = text_of(await client.call_tool(tool, {"name": name}))
    assert seen == {
        "leaky_environment:MY_FRONT_TOKEN": "unset",
        "leaky_environment:MCPVISOR_TOKEN": "unset",
        "leaky_environment:MCPVISOR_STORE_KEY": "unset",
        "leaky_environment:AN_ORDINARY_VAR": "set",
        "given_environment:ON_PURPOSE": "set",
    }


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PY, "-m", "mcpvisor", *args],
        capture_output=True,
        text=True,
        timeout=REAL_IO_BOUND_S,
        check=False,
        env={**os.environ, **(env or {})},
    )


def test_mcp_list_get_and_json_show_keys_in_args_and_urls_masked(tmp_path: Path) -> None:
    """``mcp get`` (text and ``--format json``) and ``mcp list`` show ``--api-key``'s value,
    a ``--token=`` value, an ``sk-`` key and an ``?api_key=`` query value as ``***``; the
    other arguments and the URL's host stay readable."""
    config = write(
        tmp_path / "mcpvisor.json",
        {
            "mcpServers": {
                "cli": {
                    "command": PY,
                    "args": ["-c", "pass", "--api-key", ARG_SECRET, f"--token={ENV_SECRET}", PREFIXED_KEY],
                },
                "web": {"type": "http", "url": f"http://127.0.0.1:9/mcp?api_key={ENV_SECRET}&region=eu"},
            }
        },
    )
    outputs = []
    commands = (
        ("mcp", "get", "cli"),
        ("mcp", "get", "web", "--format", "json"),
        ("mcp", "list", "--timeout", "2"),
    )
    for args in commands:
        done = run_cli(*args, "--config", str(config))
        outputs.append(done.stdout + done.stderr)
    text = "\n".join(outputs)
    assert not [s for s in SECRETS if s in text], text
    assert "--api-key" in outputs[0]
    assert "***" in outputs[0]
    assert "region=eu" in outputs[1]
    assert "127.0.0.1:9" in outputs[2]
