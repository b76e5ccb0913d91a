"""The PostgreSQL store's own guarantees, in process, against a real cluster (tests/pg.py):
replicas starting together migrate once; the journal holds what it cannot write while
the store is down, a bounded amount, and says how many records it dropped; tokens
cannot be stored or read without ``$MCPVISOR_STORE_KEY`` (the error names the variable)
and are sealed at rest; `Supervisor.store_health` says when the store is down, without
the password, and recovers by itself; a bad ``settings.store`` or ``$MCPVISOR_STORE`` is
a config error naming the field or the variable.
"""

from __future__ import annotations

import concurrent.futures
import logging
from pathlib import Path

import pytest
import trio
from mcp.shared.auth import OAuthToken

from mcpvisor.actors.core.model import Toolset
from mcpvisor.config import ConfigError, parse_config
from mcpvisor.journal import _writer
from mcpvisor.journal._writer import CallRecord, open_journal
from mcpvisor.pgstore import StoreKeyError
from mcpvisor.pgstore.journal import PgJournalDB
from mcpvisor.pgstore.schema import LATEST
from mcpvisor.pgstore.store import PgStore
from mcpvisor.redact import secret_values
from mcpvisor.settings import with_env_overrides
from mcpvisor.state import now_iso
from mcpvisor.tree import open_supervisor
from tests.pg import PASSWORD, Cluster, fresh_database
from tests.polling import poll_until

KEY = "k" * 44


def test_three_replicas_starting_at_once_migrate_once(tmp_path: Path, postgres: Cluster) -> None:
    url = fresh_database(postgres, "together")
    stores = [PgStore(url, state_dir=tmp_path, replica=f"r{i}") for i in range(3)]
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        applied = list(pool.map(lambda s: s.migrate(), stores))
    for s in stores:
        s.close()
    assert sorted(len(a) for a in applied) == [0, 0, LATEST]
    assert postgres.psql("SELECT count(*) FROM mcpvisor_schema", "together") == str(LATEST)


async def test_the_journal_holds_a_bounded_amount_while_the_store_is_down_and_says_what_it_dropped(
        tmp_path: Path, postgres: Cluster, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """With the store down, the batch being written is held and retried, the queue fills to
    its bound (8 here) and the rest is dropped and counted; once the store is back the held
    and queued records are written and the log says how many were dropped."""
    url = fresh_database(postgres, "journal")
    store = PgStore(url, state_dir=tmp_path)
    await trio.to_thread.run_sync(store.migrate)
    store.close()
    monkeypatch.setattr(_writer, "QUEUE_RECORDS", 8)
    caplog.set_level(logging.WARNING, logger="mcpvisor.journal._writer")

    def record() -> CallRecord:
        return CallRecord(finished=trio.current_time(), server="s", tool="t", latency=0.001)

    with trio.fail_after(120):
        async with open_journal("unused", opener=lambda: PgJournalDB(url, "r9", payloads=False)) as journal:
            await trio.to_thread.run_sync(postgres.stop)
            try:
                journal.record_nowait(record())
                await poll_until(lambda: "could not write" in caplog.text)  # that one is held
                for _ in range(40):
                    journal.record_nowait(record())
            finally:
                await trio.to_thread.run_sync(postgres.start)
            await poll_until(lambda: "writing again" in caplog.text)
    assert (journal.written, journal.dropped) == (9, 32)
    assert "writing again; 32 records were dropped meanwhile" in caplog.text
    assert postgres.psql("SELECT count(*) FROM mcpvisor_calls WHERE replica = 'r9'", "journal") == "9"
    assert PASSWORD not in caplog.text


async def test_tokens_need_the_key_and_are_sealed_at_rest(tmp_path: Path, postgres: Cluster,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    url = fresh_database(postgres, "sealed")
    store = PgStore(url, state_dir=tmp_path)
    await trio.to_thread.run_sync(store.migrate)
    tokens = OAuthToken(access_token="at-" + "x" * 30, refresh_token="rt-" + "y" * 30, token_type="Bearer")
    try:
        monkeypatch.delenv("MCPVISOR_STORE_KEY", raising=False)
        with pytest.raises(StoreKeyError, match=r"\$MCPVISOR_STORE_KEY is not set"):
            await store.tokens("prot").save_tokens(tokens, 1.0)
        monkeypatch.setenv("MCPVISOR_STORE_KEY", KEY)
        await store.tokens("prot").save_tokens(tokens, 1.0)
        assert (await store.tokens("prot").load()).tokens == tokens
        sealed = postgres.psql("SELECT encode(sealed, 'escape') FROM mcpvisor_oauth", "sealed")
        assert "at-xxx" not in sealed
        assert "rt-yyy" not in sealed
        monkeypatch.setenv("MCPVISOR_STORE_KEY", "w" * 44)
        with pytest.raises(StoreKeyError, match="cannot be decrypted"):
            await store.tokens("prot").load()
    finally:
        store.close()


async def test_store_health_says_when_the_store_is_down_and_replicas_agree_again_after(
        tmp_path: Path, postgres: Cluster) -> None:
    """While the store is down `store_health` names it (no password); once it is back the
    health is good again by itself, and a change made through one replica reaches the
    other, whose listener reconnected on its own."""
    url = fresh_database(postgres, "health")
    cfg = {"mcpServers": {}, "settings": {"store": url}}
    with trio.fail_after(120):
        async with open_supervisor(cfg, state_dir=tmp_path / "a", watch=False) as a, \
                open_supervisor(cfg, state_dir=tmp_path / "b", watch=False) as b:
            assert await a.store_health() is None
            await trio.to_thread.run_sync(postgres.stop)
            try:
                await poll_until(lambda: _down(a))
                reason = await a.store_health()
                assert reason is not None
                assert f"the store at postgresql://127.0.0.1:{postgres.port}/health is unreachable" in reason
                assert PASSWORD not in reason
            finally:
                await trio.to_thread.run_sync(postgres.start)
            await poll_until(lambda: _up(a))
            now = now_iso()
            late = Toolset(name="late", tools=(), description=None, created_at=now, updated_at=now)
            await trio.to_thread.run_sync(a.store.save_toolset, late)
            await trio.to_thread.run_sync(a.store.set_equipped, "late")
            await poll_until(lambda: b.toolsets.equipped is not None and b.toolsets.equipped.name == "late")


async def _down(sup: object) -> bool:
    return await sup.store_health() is not None  # type: ignore[attr-defined]


async def _up(sup: object) -> bool:
    return await sup.store_health() is None  # type: ignore[attr-defined]


async def test_files_have_no_store_to_be_down(tmp_path: Path) -> None:
    async with open_supervisor({"mcpServers": {}}, state_dir=tmp_path, watch=False) as sup:
        assert await sup.store_health() is None
        assert sup.shared is None


def test_a_store_that_is_not_postgresql_is_a_config_error_naming_the_field() -> None:
    with pytest.raises(ConfigError, match=r'settings: field "store": .* is not a PostgreSQL URL') as caught:
        parse_config({"mcpServers": {}, "settings": {"store": "mysql://admin:hunter2-secret@db/x"}})
    assert "hunter2-secret" not in str(caught.value)
    settings = parse_config({"mcpServers": {}}).settings
    with pytest.raises(ConfigError, match=r"\$MCPVISOR_STORE is .* not a PostgreSQL URL") as caught:
        with_env_overrides(settings, {"MCPVISOR_STORE": "sqlite:///u:hunter2-secret@x"})
    assert "hunter2-secret" not in str(caught.value)
    url = "postgresql://u@db:5432/mcpvisor"
    assert with_env_overrides(settings, {"MCPVISOR_STORE": url}).store == url
    with_password = parse_config({"mcpServers": {}, "settings": {"store": "postgresql://u:pw-Zq81xv0k@db/x"}})
    assert "pw-Zq81xv0k" in secret_values(with_password)  # what logs and status views are scrubbed of
    assert "pw-Zq81xv0k" not in repr(with_password.settings)
    assert with_env_overrides(settings, {}).store is None
