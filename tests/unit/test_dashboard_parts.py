"""The dashboard's parts without I/O: call figures, secrets in entries, the CLI's checks
as field errors, the admission rules, the token file."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

import pytest

from mcpvisor.actors.fronts.auth import StaticTokens, host_rules
from mcpvisor.dashboard import DashboardGuard, ensure_token
from mcpvisor.dashboard._entries import FieldErrors, check_entry, masked, unmask
from mcpvisor.dashboard._guard import COOKIE, cookie_value, set_cookie
from mcpvisor.dashboard._metrics import WINDOW_S, CallWindow

TOKEN = "dashboard-token-0123456789abcdef"
CONFIGURED = "configured-token-0123456789abcdef"
LOCAL = {"host": "127.0.0.1:8848"}


def test_call_figures_cover_the_last_minute() -> None:
    window = CallWindow()
    assert window.summary("a", 0.0) == {"callsPerMinute": 0, "errorsPerMinute": 0, "p50Ms": None}
    window.record("a", 1.0, 0.010, True)
    window.record("a", 2.0, 0.030, False)
    window.record("a", 3.0, 0.020, True)
    assert window.summary("a", 3.0) == {"callsPerMinute": 3, "errorsPerMinute": 1, "p50Ms": 20.0}
    assert window.summary("a", 2.0 + WINDOW_S) == {"callsPerMinute": 2, "errorsPerMinute": 1, "p50Ms": 20.0}
    assert window.summary("a", 10.0 + WINDOW_S)["callsPerMinute"] == 0


def test_secrets_leave_as_stars_and_stars_keep_the_stored_value() -> None:
    stored = {"command": "x", "env": {"KEY": "s3cret", "REF": "${HOME}"}, "lazy": True}
    shown = masked(stored)
    assert shown["env"] == {"KEY": "***", "REF": "${HOME}"}  # a reference is no secret (as `mcp info`)
    edited = unmask({**shown, "env": {"KEY": "***", "NEW": "v"}}, stored)
    assert edited == {"command": "x", "env": {"KEY": "s3cret", "NEW": "v"}, "lazy": True}
    with pytest.raises(FieldErrors) as err:
        unmask({"env": {"OTHER": "***"}}, stored)
    assert list(err.value.fields) == ["env.OTHER"]


def test_bad_entries_get_the_cli_message_under_their_field() -> None:
    with pytest.raises(FieldErrors) as err:
        check_entry("a", {"command": "x", "args": "not a list"})
    assert err.value.fields == {"args": 'field "args": expected a list, got a string'}
    with pytest.raises(FieldErrors) as err:
        check_entry("bad name", {"command": sys.executable})
    assert "name" in err.value.fields
    with pytest.raises(FieldErrors) as err:
        check_entry("a", {"command": "surely-not-a-command-on-path-0xdead"})
    assert err.value.fields == {"command": "command not found on PATH: surely-not-a-command-on-path-0xdead"}
    with pytest.raises(FieldErrors) as err:
        check_entry("a", {"command": "  "})
    assert err.value.fields == {"command": "empty command"}
    assert check_entry("a", {"command": sys.executable, "args": [], "env": {}}) == {"command": sys.executable}
    # a ${VAR} command is for the proxy's environment to resolve
    assert check_entry("a", {"command": "${MY_SERVER}"}) == {"command": "${MY_SERVER}"}


def guard(configured: bool = False) -> DashboardGuard:
    verifier = StaticTokens(lambda: {"ci": CONFIGURED}) if configured else None
    return DashboardGuard(host_rules("127.0.0.1"), TOKEN, verifier)


async def test_on_open_loopback_reading_is_free_and_changes_need_the_token() -> None:
    g = guard()
    assert await g.check("GET", LOCAL) is None
    refused = await g.check("POST", LOCAL)
    assert refused is not None
    assert refused.status == 401
    assert await g.check("POST", {**LOCAL, "authorization": f"Bearer {TOKEN}"}) is None
    assert await g.check("DELETE", {**LOCAL, "cookie": f"theme=dark; {COOKIE}={TOKEN}"}) is None
    wrong = await g.check("PUT", {**LOCAL, "cookie": f"{COOKIE}=guess"})
    assert wrong is not None
    assert wrong.status == 401


async def test_host_and_origin_come_first() -> None:
    g = guard()
    token = {"authorization": f"Bearer {TOKEN}"}
    rebound = await g.check("POST", {"host": "evil.example", **token})
    assert rebound is not None
    assert rebound.status == 421
    foreign = await g.check("POST", {**LOCAL, "origin": "http://evil.example", **token})
    assert foreign is not None
    assert foreign.status == 403
    null = await g.check("POST", {**LOCAL, "origin": "null", **token})  # a data: URL or sandboxed frame
    assert null is not None
    assert null.status == 403
    assert await g.check("POST", {**LOCAL, "origin": "http://127.0.0.1:8848", **token}) is None


async def test_a_configured_token_guards_reading_and_opens_changes() -> None:
    g = guard(configured=True)
    refused = await g.check("GET", LOCAL)
    assert refused is not None
    assert refused.status == 401
    assert await g.check("GET", {**LOCAL, "authorization": f"Bearer {CONFIGURED}"}) is None
    assert await g.check("POST", {**LOCAL, "authorization": f"Bearer {CONFIGURED}"}) is None
    assert await g.check("GET", LOCAL, login=True) is None  # the login route checks its own token


def test_the_cookie_is_httponly_strict_and_secure_under_tls() -> None:
    plain = set_cookie(TOKEN, secure=False)
    assert plain.startswith(f"{COOKIE}={TOKEN};")
    assert "HttpOnly" in plain
    assert "SameSite=Strict" in plain
    assert "Secure" not in plain
    assert "; Secure" in set_cookie(TOKEN, secure=True)
    assert cookie_value({"cookie": f"a=1; {COOKIE}={TOKEN}; b=2"}) == TOKEN
    assert cookie_value({"cookie": "a=1"}) is None


def test_the_token_file_is_private_and_stays(tmp_path: Path) -> None:
    token = ensure_token(tmp_path / "state")
    path = tmp_path / "state" / "dashboard-token"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(token) == 64
    assert ensure_token(tmp_path / "state") == token
    path.chmod(0o644)  # someone else may have read it: a new one replaces it
    replaced = ensure_token(tmp_path / "state")
    assert replaced != token
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
