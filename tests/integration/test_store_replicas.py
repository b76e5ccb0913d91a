"""Replicas over one PostgreSQL store (issue 30): real ``mcpvisor serve --transport http``
subprocesses sharing a real PostgreSQL (Debian's, a throw-away cluster from tests/pg.py).

Each replica has its own state directory, so whatever they agree on went through the
store: a toolset built and equipped through one is what a client of another sees (and
that client hears ``list_changed``), a note added on one is in the other's description,
their calls land in one journal table naming each replica, a login stored once (by
``mcpvisor mcp login``) is used by all, and the store restarted mid-run costs no call:
a state change during the outage fails with an error naming the store (never its
password) and works again once it is back. ``mcpvisor store migrate|check`` run against
the same cluster. And the whole set-up of issue 30 once: three replicas over the store
behind the shipped HAProxy file.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any, Final

import httpx2
import pytest
import trio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.helpers import (
    PY,
    REAL_IO_BOUND_S,
    SERVERS_DIR,
    Recorder,
    everything,
    http_client,
    http_fixture,
    text_of,
    write_config,
)
from tests.integration.replicas import Load, haproxy, need, stateless_load
from tests.pg import PASSWORD, Cluster, fresh_database
from tests.polling import poll_until
from tests.security.proxy import Proxy, run_serve, running_proxy

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

TOKEN: Final = "lead-" + "c" * 40
KEY: Final = "store-key-" + "k" * 40
"""$MCPVISOR_STORE_KEY of every replica (the tests check it never reaches a log)."""
BROWSER: Final = str(SERVERS_DIR / "follow_browser.py")


@asynccontextmanager
async def replica(config: Path, url: str, name: str, tmp_path: Path) -> AsyncIterator[Proxy]:
    """``mcpvisor serve --transport http`` as replica ``name`` of the store at ``url``, with
    its own state directory."""
    env = {"MCPVISOR_STORE": url, "MCPVISOR_REPLICA": name, "MCPVISOR_STORE_KEY": KEY,
           "MCPVISOR_STATE_DIR": str(tmp_path / f"state-{name}")}
    async with running_proxy(config, "--transport", "http", "--port", "0", env=env) as running:
        yield running


@asynccontextmanager
async def client(url: str, rec: Recorder | None = None) -> AsyncIterator[Client]:
    kwargs = rec.kwargs() if rec is not None else {}
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60) as http, \
            Client(streamable_http_client(url, http_client=http), mode="legacy", cache=None, **kwargs) as c:
        yield c


async def names(c: Client) -> set[str]:
    return {t.name for t in (await c.list_tools()).tools}


async def call(c: Client, tool: str, arguments: dict[str, Any]) -> str:
    result = await c.call_tool(tool, arguments)
    assert not result.is_error, text_of(result)
    return text_of(result)


def cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PY, "-m", "mcpvisor", *args], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=REAL_IO_BOUND_S)


def assert_no_secret(*texts: str) -> None:
    for text in texts:
        assert PASSWORD not in text
        assert KEY not in text


async def test_replicas_share_toolsets_and_notes_and_write_one_journal(
        tmp_path: Path, postgres: Cluster) -> None:
    """A toolset built and equipped through replica r1 is what r2's client sees, and r2's
    client is told (``list_changed``); a note added through r1 is in r2's description;
    deleting the toolset on r1 gives r2's client every tool back; calls through both land
    in the store's one journal table, each row naming its replica, which ``mcpvisor
    journal`` summarises; neither replica wrote a state file."""
    url = fresh_database(postgres, "replicas")
    config = write_config(tmp_path, {"ev": everything()}, namespacing="prefix", authTokens={"lead": TOKEN},
                          journal=str(tmp_path / "calls.db"))
    rec = Recorder()
    with trio.fail_after(REAL_IO_BOUND_S):
        async with replica(config, url, "r1", tmp_path) as r1, replica(config, url, "r2", tmp_path) as r2:
            async with client(r1.url) as c1, client(r2.url, rec) as c2:
                assert {"ev_echo", "ev_add"} <= await names(c2)
                await call(c1, "build-toolset", {"name": "shared", "tools": [{"namespacedName": "ev.echo"}]})
                changed = rec.changed
                await call(c1, "equip-toolset", {"name": "shared"})
                await changed.wait()  # r2's client is told, though the equip was r1's
                seen = await names(c2)
                assert "ev_echo" in seen
                assert "ev_add" not in seen
                assert seen == await names(c1)

                changed = rec.changed
                await call(c1, "add-tool-annotation", {"toolRef": {"namespacedName": "ev.echo"},
                                                       "notes": [{"name": "style", "note": "Greet first."}]})
                await changed.wait()
                echo = next(t for t in (await c2.list_tools()).tools if t.name == "ev_echo")
                assert "Greet first." in (echo.description or "")

                for c, text in ((c1, "one"), (c2, "two"), (c2, "three")):
                    assert await call(c, "ev_echo", {"text": text}) == f"echo: {text}"

                changed = rec.changed
                await call(c1, "delete-toolset", {"name": "shared"})  # it was equipped: back to every tool
                await changed.wait()
                assert {"ev_echo", "ev_add"} <= await names(c2)
            logs = r1.text() + r2.text()
    assert not (tmp_path / "state-r1" / "state.json").exists()
    assert not (tmp_path / "state-r2" / "state.json").exists()
    assert not (tmp_path / "calls.db").exists()  # the journal went to the store
    summary = await trio.to_thread.run_sync(functools.partial(cli, "journal", "--format", "json", env={
        "MCPVISOR_STORE": url}))
    assert summary.returncode == 0, summary.stderr
    doc = json.loads(summary.stdout)
    assert doc["replicas"] == {"r1": 1, "r2": 2}
    assert doc["path"] == f"postgresql://127.0.0.1:{postgres.port}/replicas"
    assert_no_secret(logs, summary.stdout, summary.stderr)


async def test_the_store_restarted_mid_run_costs_no_call_and_state_changes_work_again(
        tmp_path: Path, postgres: Cluster) -> None:
    """With the store stopped, calls keep flowing; an equip fails with an error naming the
    store (host, port, database: never the password) and changes nothing; once the store
    is back the same equip works at once (no restart), and the calls made meanwhile were
    held and written to the journal."""
    url = fresh_database(postgres, "outage")
    config = write_config(tmp_path, {"ev": everything()}, namespacing="prefix", authTokens={"lead": TOKEN},
                          journal=str(tmp_path / "calls.db"), toolsets={"fixed": ["ev.add"]})
    with trio.fail_after(REAL_IO_BOUND_S):
        async with replica(config, url, "r1", tmp_path) as r1, client(r1.url) as c1:
            await call(c1, "build-toolset", {"name": "mine", "tools": [{"namespacedName": "ev.echo"}]})
            await trio.to_thread.run_sync(postgres.stop)
            try:
                for i in range(5):
                    assert await call(c1, "ev_echo", {"text": f"down {i}"}) == f"echo: down {i}"
                refused = await c1.call_tool("equip-toolset", {"name": "mine"})
                assert refused.is_error
                said = text_of(refused)
                assert f"the store at postgresql://127.0.0.1:{postgres.port}/outage is unreachable" in said
                assert "ev_add" in await names(c1)  # nothing changed
                # The journal tries within its batch window and holds the calls: the outage
                # lasts until it has said so (calls this quick can end well within that window).
                await r1.wait_log("could not write (the store at postgresql://")
            finally:
                await trio.to_thread.run_sync(postgres.start)
            await call(c1, "equip-toolset", {"name": "mine"})
            seen = await names(c1)
            assert "ev_echo" in seen
            assert "ev_add" not in seen
            await r1.wait_log("writing again; 0 records were dropped meanwhile")  # then wrote them
            logs = r1.text()
    assert_no_secret(said, logs)
    assert postgres.psql("SELECT count(*) FROM mcpvisor_calls WHERE arg_bytes IS NOT NULL "
                         "AND tool = 'echo' AND replica = 'r1'", "outage") == "5"
    assert json.loads(postgres.psql("SELECT doc FROM mcpvisor_state", "outage"))["equipped"] == "mine"


async def test_one_login_serves_every_replica_and_store_check_tries_the_key(
        tmp_path: Path, postgres: Cluster) -> None:
    """Two replicas wait for the OAuth login of a real protected server; ``mcpvisor mcp
    login`` stores the tokens once, in the store, encrypted; both replicas then connect
    with them, no second login. ``mcpvisor store check`` decrypts a token with the right
    key (exit 0) and says the key is wrong with another (exit 1); no token, key or
    password reaches a log or an output."""
    url = fresh_database(postgres, "logins")
    env = {"MCPVISOR_STORE": url, "MCPVISOR_STORE_KEY": KEY}
    with trio.fail_after(REAL_IO_BOUND_S):
        async with http_fixture("oauth_protected.py") as (_, upstream):
            config = write_config(tmp_path, {"prot": {"type": "http", "url": upstream, "protocol": "legacy",
                                                      "restartWait": "30s"}},
                                  namespacing="none", authTokens={"lead": TOKEN},
                                  oauth={"openBrowser": False})
            async with AsyncExitStack() as stack:
                replicas = [await stack.enter_async_context(replica(config, url, name, tmp_path))
                            for name in ("r1", "r2")]
                clients = [await stack.enter_async_context(client(r.url)) for r in replicas]
                for c in clients:
                    await poll_until(functools.partial(state_is, c, "needs_login"))
                login = await trio.to_thread.run_sync(functools.partial(
                    cli, "mcp", "login", "prot", "--config", str(config),
                    env={**env, "BROWSER": BROWSER, "MCPVISOR_STATE_DIR": str(tmp_path / "state-cli")}))
                assert login.returncode == 0, login.stderr
                for c in clients:  # woken by the store's notification, not by a restart
                    await poll_until(functools.partial(state_is, c, "ready"))
                    assert text_of(await c.call_tool("whoami", {})) == "logged in"
                logs = "".join(r.text() for r in replicas)
            async with http_client() as http:
                stats = (await http.get(upstream.removesuffix("/mcp") + "/admin/stats")).json()
    assert stats["authorization_code"] == 1  # one login for both
    tokens = set(stats["access"])
    assert tokens
    sealed = postgres.psql("SELECT encode(sealed, 'escape') FROM mcpvisor_oauth", "logins")
    assert "access_token" not in sealed
    assert not any(t in sealed for t in tokens)
    assert not (tmp_path / "state-cli" / "oauth").exists()

    check = await trio.to_thread.run_sync(functools.partial(cli, "store", "check", env=env))
    assert check.returncode == 0, check.stdout + check.stderr
    assert "key: ok" in check.stdout
    wrong = await trio.to_thread.run_sync(functools.partial(
        cli, "store", "check", env={**env, "MCPVISOR_STORE_KEY": "another-key-" + "w" * 40}))
    assert wrong.returncode == 1
    assert "cannot be decrypted with $MCPVISOR_STORE_KEY" in wrong.stdout
    outputs = logs + login.stdout + login.stderr + check.stdout + wrong.stdout
    assert_no_secret(outputs)
    assert not any(t in outputs for t in tokens)


async def state_is(c: Client, state: str) -> bool:
    result = await c.call_tool("get-server-status", {})
    servers: list[dict[str, Any]] = (result.structured_content or {}).get("servers", [])
    return any(s["name"] == "prot" and s["state"] == state for s in servers)


def test_store_migrate_applies_once_and_check_names_what_is_missing(tmp_path: Path,
                                                                   postgres: Cluster) -> None:
    """``store migrate`` on an empty database applies migration 1 and says so; again, says
    there is nothing to do; ``toolset create`` saves into the store; ``store check``
    without the key exits 1 naming the variable; a store that cannot be reached is named
    without its password by ``store check`` and by a ``serve`` that will not start
    without it (exit 1)."""
    url = fresh_database(postgres, "operators")
    first = cli("store", "migrate", env={"MCPVISOR_STORE": url})
    assert first.returncode == 0, first.stderr
    assert f"postgresql://127.0.0.1:{postgres.port}/operators: applied migration 1:" in first.stdout
    again = cli("store", "migrate", env={"MCPVISOR_STORE": url})
    assert again.returncode == 0
    assert "nothing to do" in again.stdout
    made = cli("toolset", "create", "offline", "--tool", "ev.echo", "--no-check", "--config",
               str(write_config(tmp_path, {"ev": everything()})),
               env={"MCPVISOR_STORE": url, "MCPVISOR_STATE_DIR": str(tmp_path / "state")})
    assert made.returncode == 0, made.stderr
    assert f"in postgresql://127.0.0.1:{postgres.port}/operators" in made.stdout
    assert "offline" in json.loads(postgres.psql("SELECT doc FROM mcpvisor_state", "operators"))["toolsets"]
    keyless = cli("store", "check", env={"MCPVISOR_STORE": url, "MCPVISOR_STORE_KEY": ""})
    assert keyless.returncode == 1
    assert "$MCPVISOR_STORE_KEY is not set" in keyless.stdout
    closed = url.replace(f":{postgres.port}/", ":1/")
    down = cli("store", "check", env={"MCPVISOR_STORE": closed})
    assert down.returncode == 1
    assert "the store at postgresql://127.0.0.1:1/operators is unreachable" in down.stderr
    serve = run_serve(write_config(tmp_path, {}), "--transport", "http", "--port", "0",
                      env={"MCPVISOR_STORE": closed})
    assert serve.returncode == 1
    assert "mcpvisor: the store at postgresql://127.0.0.1:1/operators is unreachable" in serve.stderr
    assert_no_secret(first.stdout, again.stdout, made.stdout, keyless.stdout, down.stdout, down.stderr,
                     serve.stderr)


async def test_three_replicas_over_one_store_behind_haproxy_agree_and_share_one_journal(
        tmp_path: Path, postgres: Cluster) -> None:
    """Issue 30's set-up whole: one PostgreSQL, three replicas, the shipped HAProxy file in
    front. A handshake-era client through HAProxy sticks to one replica; a toolset built
    and equipped on another replica (directly, as an operator would) reaches it: it hears
    ``list_changed`` and its list narrows. 2026-07-28 calls through HAProxy go round the
    three, and the store's one journal table names every replica with its calls."""
    need("haproxy")
    url = fresh_database(postgres, "fleet")
    config = write_config(tmp_path, {"ev": everything()}, namespacing="prefix",
                          journal=str(tmp_path / "calls.db"))
    sessions: list[str] = []

    async def remember_session(response: httpx2.Response) -> None:
        sid = response.headers.get("mcp-session-id")
        if sid and sid not in sessions:
            sessions.append(sid)

    rec = Recorder()
    with trio.fail_after(REAL_IO_BOUND_S):
        async with AsyncExitStack() as stack:
            fleet = [await stack.enter_async_context(replica(config, url, f"mcpvisor-{n}", tmp_path))
                     for n in (1, 2, 3)]
            base = await stack.enter_async_context(haproxy(tmp_path, [r.port for r in fleet]))
            http = await stack.enter_async_context(httpx2.AsyncClient(
                timeout=60, event_hooks={"response": [remember_session]}))
            through = await stack.enter_async_context(Client(
                streamable_http_client(f"{base}/mcp", http_client=http), mode="legacy", cache=None,
                **rec.kwargs()))
            assert {"ev_echo", "ev_add"} <= await names(through)
            (sid,) = sessions  # one session, every request of it on one replica
            home = sid.partition(".")[0]
            other = next(r for n, r in enumerate(fleet, 1) if f"mcpvisor-{n}" != home)
            async with client(other.url) as direct:
                await call(direct, "build-toolset", {"name": "team",
                                                     "tools": [{"namespacedName": "ev.echo"}]})
                changed = rec.changed
                await call(direct, "equip-toolset", {"name": "team"})
            await changed.wait()  # told through HAProxy, by its own replica
            seen = await names(through)
            assert "ev_echo" in seen
            assert "ev_add" not in seen
            load = Load()
            await stateless_load(f"{base}/mcp", 60, 6, load, tool="ev_echo")
            assert (load.done, load.failed) == (60, 0), load.failures
            logs = "".join(r.text() for r in fleet)
    rows = postgres.psql("SELECT replica || '=' || count(*) FROM mcpvisor_calls WHERE tool = 'echo' "
                         "GROUP BY replica ORDER BY replica", "fleet").split()
    counts = dict(row.split("=") for row in rows)
    assert set(counts) == {"mcpvisor-1", "mcpvisor-2", "mcpvisor-3"}, counts  # round robin: every one served
    assert sum(int(n) for n in counts.values()) == 60
    assert_no_secret(logs)
