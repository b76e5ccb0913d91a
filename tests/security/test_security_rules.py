"""The sans-IO admission rules (`mcpvisor.actors.fronts.auth`) and the strictness of the new settings.

No I/O: these pin the decisions the subprocess tests rely on, case by case.
"""

from __future__ import annotations

import pytest
from rich.pretty import pretty_repr

from mcpvisor.actors.fronts.auth import Gate, StaticTokens, bearer_token, host_name, host_rules
from mcpvisor.config import ConfigError, parse_config

TOKEN = "rule-token-0123456789abcdef"


@pytest.mark.parametrize(
    ("header", "name"),
    [
        ("127.0.0.1:8848", "127.0.0.1"),
        ("LOCALHOST", "localhost"),
        ("[::1]:80", "[::1]"),
        ("::1", "[::1]"),
        ("box.lan", "box.lan"),
    ],
)
def test_host_names_are_compared_without_port_and_case(header: str, name: str) -> None:
    assert host_name(header) == name


def test_on_loopback_only_loopback_names_and_allowed_hosts_pass() -> None:
    rules = host_rules("127.0.0.1", machine_addresses=["192.0.2.2"], allowed_hosts=["box.lan"])
    assert rules.host_ok("127.0.0.1:8848")
    assert rules.host_ok("localhost")
    assert rules.host_ok("box.lan:8848")
    assert not rules.host_ok("192.0.2.2:8848")  # the machine's address is not loopback
    assert not rules.host_ok("evil.example")
    assert not rules.host_ok(None)


def test_beyond_loopback_the_machine_addresses_pass_too() -> None:
    rules = host_rules("0.0.0.0", machine_addresses=["192.0.2.2", "fd00::2", "vm"])
    assert rules.host_ok("192.0.2.2:8848")
    assert rules.host_ok("[fd00::2]:8848")
    assert rules.host_ok("vm:8848")
    assert not rules.host_ok("0.0.0.0:8848")
    assert not rules.host_ok("evil.example:8848")


def test_no_origin_passes_a_foreign_one_does_not_and_allowed_origins_do() -> None:
    rules = host_rules("127.0.0.1", allowed_origins=["https://App.Example/"])
    assert rules.origin_ok(None)
    assert rules.origin_ok("http://localhost:3000")
    assert rules.origin_ok("https://app.example")
    assert not rules.origin_ok("http://evil.example")
    assert not rules.origin_ok("https://app.example:8443")  # an exact origin, not a host pattern
    assert not rules.origin_ok("null")


def test_the_sdk_lists_express_the_same_rules() -> None:
    hosts, origins = host_rules("127.0.0.1", allowed_origins=["https://app.example"]).sdk_lists()
    assert "127.0.0.1:*" in hosts
    assert "localhost" in hosts
    assert "http://localhost:*" in origins
    assert "https://app.example" in origins


@pytest.mark.parametrize(
    ("header", "token"),
    [("Bearer abc", "abc"), ("bearer abc", "abc"), ("Basic abc", None), ("Bearer ", None), (None, None)],
)
def test_bearer_header_parsing(header: str | None, token: str | None) -> None:
    assert bearer_token(header) == token


async def test_static_tokens_name_the_client_and_follow_the_current_set() -> None:
    current = {"ci": TOKEN, "laptop": TOKEN[::-1]}
    tokens = StaticTokens(lambda: current, scopes=["mcp"])
    found = await tokens.verify_token(TOKEN)
    assert found is not None
    assert found.client_id == "ci"
    assert found.scopes == ["mcp"]
    assert await tokens.verify_token(TOKEN + "x") is None
    del current["ci"]  # a hot reload removed it
    assert await tokens.verify_token(TOKEN) is None


async def test_the_gate_checks_token_then_host_then_origin() -> None:
    gate = Gate(host_rules("0.0.0.0"), StaticTokens(lambda: {"ci": TOKEN}))
    ok = {"host": "127.0.0.1:1", "authorization": f"Bearer {TOKEN}"}
    who, refusal = await gate.admit(ok)
    assert refusal is None
    assert who is not None
    for headers, status in (
        ({**ok, "authorization": "Bearer nope"}, 401),
        ({"host": "127.0.0.1"}, 401),
        ({**ok, "host": "evil.example"}, 421),
        ({**ok, "origin": "http://evil.example"}, 403),
    ):
        _, refusal = await gate.admit(headers)
        assert refusal is not None
        assert refusal.status == status
        if status == 401:
            assert dict(refusal.headers)["WWW-Authenticate"].startswith("Bearer ")


def problems(settings: dict[str, object], env: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as err:
        parse_config({"mcpServers": {}, "settings": settings}, env=env or {})
    return str(err.value)


def test_the_new_settings_are_checked_as_strictly_as_the_rest() -> None:
    text = problems(
        {
            "authTokn": "x",
            "maxSessions": 0,
            "sessionIdleTimeout": "2 weeks",
            "allowedOrigins": ["ftp://x/y"],
            "allowedHosts": ["http://box.lan/"],
            "authTokens": [1],
        }
    )
    assert 'unknown field "authTokn" (did you mean "authToken"?)' in text
    assert 'field "maxSessions": 0 is out of range' in text
    assert 'field "sessionIdleTimeout"' in text
    assert 'field "allowedOrigins[0]"' in text
    assert 'field "allowedHosts[0]"' in text
    assert 'field "authTokens": expected an object' in text


def test_a_weak_or_missing_token_is_refused_without_echoing_it() -> None:
    assert "shorter than 16" in problems({"authToken": "hunter2hunter2"})
    assert "hunter2hunter2" not in problems({"authToken": "hunter2hunter2"})
    assert "CI_TOKEN" in problems({"authTokens": {"ci": "${CI_TOKEN}"}})
    assert 'field "auth.issuer"' in problems({"auth": {"issuer": "http://idp.example", "audience": "x"}})
    assert 'unknown field "scopes"' in problems(
        {"auth": {"issuer": "https://idp.example", "audience": "x", "scopes": []}}
    )


def test_settings_resolve_with_interpolation_and_defaults() -> None:
    config = parse_config(
        {"mcpServers": {}, "settings": {"authToken": "${T}", "authTokens": {"ci": TOKEN}}},
        env={"T": TOKEN[::-1]},
    )
    assert dict(config.settings.auth_tokens) == {"default": TOKEN[::-1], "ci": TOKEN}
    assert config.settings.max_sessions == 1000
    assert config.settings.session_idle_timeout == 600
    assert TOKEN not in repr(config.settings)
    assert TOKEN not in pretty_repr(config.settings)  # rich's pretty printer too
