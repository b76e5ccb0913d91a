"""The harness keys of the config: ``scope`` and ``pool`` per server, ``settings.journal``
and ``settings.journalPayloads``; strict like every other key (a bad value names the field)."""

from __future__ import annotations

from typing import Any

import pytest

from mcpvisor.config import ConfigError, parse_config


def one(entry: dict[str, Any], **settings: Any) -> Any:
    return parse_config({"mcpServers": {"box": {"command": "x", **entry}}, "settings": settings})


def test_scope_and_pool_are_read() -> None:
    """``"scope": "session"`` with ``"pool": 3``; the defaults are shared and no pool."""
    cfg = one({"scope": "session", "pool": 3})
    assert (cfg.servers["box"].scope, cfg.servers["box"].pool) == ("session", 3)
    plain = one({})
    assert (plain.servers["box"].scope, plain.servers["box"].pool) == ("shared", 0)


@pytest.mark.parametrize(("entry", "message"), [
    ({"scope": "sesion"}, 'field "scope": "sesion" is not one of "shared", "session"'),
    ({"pool": 2}, 'field "pool" needs "scope": "session"'),
    ({"scope": "session", "pool": 65}, 'field "pool": 65 is out of range (0 to 64)'),
    ({"scope": "session", "pool": "2"}, '"pool"'),
])
def test_bad_scope_or_pool_is_refused_with_the_field_named(entry: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match="server \"box\"") as info:
        one(entry)
    assert message in str(info.value)


def test_journal_settings_are_read() -> None:
    cfg = one({}, journal="/tmp/runs.db", journalPayloads=True)
    assert (cfg.settings.journal, cfg.settings.journal_payloads) == ("/tmp/runs.db", True)
    assert (one({}).settings.journal, one({}).settings.journal_payloads) == (None, False)
    with pytest.raises(ConfigError, match="journalPayloads"):
        one({}, journalPayloads="yes")
