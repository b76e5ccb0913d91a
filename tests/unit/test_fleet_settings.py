"""What a replica behind a load balancer is told: ``settings.drainTimeout`` and its name
(``serve --replica``, ``$MCPVISOR_REPLICA``), each checked with an error that names where
the bad value came from."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from mcpvisor._config_types import REPLICA_ENV, replica_name
from mcpvisor.config import ConfigError, parse_config
from tests.security.proxy import run_serve, write

LABEL = Path("fleet.json")


def settings_of(**settings: Any) -> Any:
    return parse_config({"mcpServers": {}, "settings": settings}, path=LABEL, env={}).settings


def test_drain_timeout_defaults_to_30_s_and_takes_a_duration() -> None:
    assert settings_of().drain_timeout == 30.0
    assert settings_of(drainTimeout="5s").drain_timeout == 5.0
    assert settings_of(drainTimeout=90).drain_timeout == 90.0
    assert settings_of(drainTimeout="1500ms").drain_timeout == 1.5


@pytest.mark.parametrize(("value", "says"), [
    ("2h", "implausibly long"),
    (0, "drainTimeout"),
    ("soon", "drainTimeout"),
])
def test_a_bad_drain_timeout_names_the_file_and_the_field(value: Any, says: str) -> None:
    with pytest.raises(ConfigError) as info:
        settings_of(drainTimeout=value)
    assert str(LABEL) in str(info.value)
    assert "drainTimeout" in str(info.value)
    assert says in str(info.value)


def test_the_replica_name_comes_from_the_flag_then_the_environment() -> None:
    assert replica_name({}) is None
    assert replica_name({REPLICA_ENV: "  "}) is None
    assert replica_name({REPLICA_ENV: "eu-1"}) == "eu-1"
    assert replica_name({REPLICA_ENV: "eu-1"}, "eu-2") == "eu-2"
    with pytest.raises(ConfigError, match=r"--replica: 'a\.b' is not a replica name; .*no dots"):
        replica_name({}, "a.b")
    with pytest.raises(ConfigError, match=r"\$MCPVISOR_REPLICA: 'x y' is not a replica name"):
        replica_name({REPLICA_ENV: "x y"})
    assert replica_name({REPLICA_ENV: "r" * 63}) == "r" * 63  # the longest Kubernetes pod name
    with pytest.raises(ConfigError, match="1-63 characters"):
        replica_name({REPLICA_ENV: "r" * 64})


def test_serve_refuses_a_bad_replica_name_before_it_starts_anything(tmp_path: Path) -> None:
    config = write(tmp_path / "mcpvisor.json", {"mcpServers": {}})
    done: subprocess.CompletedProcess[str] = run_serve(config, "--transport", "http", "--port", "0",
                                                        "--replica", "r.1")
    assert done.returncode == 2
    assert "--replica: 'r.1' is not a replica name" in done.stderr
    done = run_serve(config, "--transport", "http", "--port", "0", env={REPLICA_ENV: "bad/name"})
    assert done.returncode == 2
    assert "$MCPVISOR_REPLICA: 'bad/name' is not a replica name" in done.stderr


def test_a_reload_applies_a_new_drain_timeout_without_a_restart() -> None:
    """The drain reads it at SIGTERM: an edited file's value is the one the next stop uses."""
    from mcpvisor.reload_plan import live_settings, plan_reload

    old = parse_config({"mcpServers": {}, "settings": {"drainTimeout": "30s"}}, path=LABEL, env={})
    new = parse_config({"mcpServers": {}, "settings": {"drainTimeout": "5s"}}, path=LABEL, env={})
    assert live_settings(old.settings, new.settings).drain_timeout == 5.0
    assert "drainTimeout" not in plan_reload({}, old.settings, new).needs_restart
