"""Config file: what a user notices when loading, mistyping or sharing `.mcp.json`.

Pure parsing, no I/O beyond tmp_path files, no clock: plain sync tests.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest
from rich.pretty import pretty_repr

from mcpvisor.config import (
    DEFAULT_HOST,
    DEFAULT_PORT,
    TRANSPORTS,
    Config,
    ConfigError,
    ExposedTool,
    ServerSpec,
    ToolRef,
    demo_config_path,
    find_config,
    load_config,
    parse_config,
    parse_duration,
    user_config_path,
)

LABEL = Path("mcpvisor.json")


def parse(doc: dict[str, Any] | str | bytes, env: dict[str, str] | None = None) -> Config:
    return parse_config(doc, path=LABEL, env={} if env is None else env)


def problems(doc: dict[str, Any] | str | bytes, env: dict[str, str] | None = None) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse(doc, env)
    assert info.value.path == LABEL
    assert str(info.value) == "\n".join(info.value.problems)
    return info.value.problems


def servers(**entries: Any) -> dict[str, Any]:
    return {"mcpServers": entries}


# -- Claude Code compatibility ---------------------------------------------------------


def test_claude_code_mcp_json_loads_unchanged(tmp_path: Path) -> None:
    """A real-world `.mcp.json` (stdio + env, http + headers, sse) loads with no warnings."""
    doc = {
        "mcpServers": {
            "git": {"command": "uvx", "args": ["mcp-server-git"], "env": {"X": "${HOME}"}},
            "docs": {
                "type": "http",
                "url": "https://example.invalid/mcp",
                "headers": {"Authorization": "Bearer ${DOCS_TOKEN}"},
            },
            "old": {"type": "sse", "url": "http://127.0.0.1:9000/sse"},
        }
    }
    path = tmp_path / ".mcp.json"
    path.write_text(json.dumps(doc))
    config = load_config(path, env={"HOME": "/home/u", "DOCS_TOKEN": "s3cret"})
    assert config.warnings == ()
    assert list(config.servers) == ["git", "docs", "old"]
    git, docs, old = config.servers.values()
    assert (git.transport, git.command, git.args, dict(git.env)) == (
        "stdio",
        "uvx",
        ("mcp-server-git",),
        {"X": "/home/u"},
    )
    assert (docs.transport, dict(docs.headers)) == ("http", {"Authorization": "Bearer s3cret"})
    assert old.transport == "sse"
    assert old.url == "http://127.0.0.1:9000/sse"
    assert git.raw == doc["mcpServers"]["git"]  # as written, before interpolation
    assert config.raw == doc


def test_public_constants_and_paths() -> None:
    assert (DEFAULT_HOST, DEFAULT_PORT) == ("127.0.0.1", 8848)
    assert TRANSPORTS == ("stdio", "http", "sse", "ws", "stdio-docker")
    assert demo_config_path().parts[-2:] == ("demo", "mcpvisor.json")
    assert user_config_path().name == "mcpvisor.json"


def test_defaults_match_the_design() -> None:
    spec = parse(servers(a={"command": "x"})).servers["a"]
    assert (spec.timeout, spec.max_call_time, spec.startup_timeout) == (60.0, 600.0, 30.0)
    assert (spec.health_check_interval, spec.health_check_timeout, spec.max_missed_pings) == (30.0, 5.0, 3)
    assert (spec.restart_delay, spec.restart_delay_max, spec.restart_reset_after) == (0.25, 30.0, 60.0)
    assert (spec.circuit_failures, spec.circuit_open_for, spec.circuit_open_max) == (5, 30.0, 300.0)
    assert (spec.restart_wait, spec.shutdown_grace, spec.protocol, spec.enabled, spec.lazy) == (
        10.0,
        2.0,
        "auto",
        True,
        False,
    )


def test_all_features_resolve() -> None:
    config = parse(
        {
            "$schema": "https://example.invalid/schema.json",
            "mcpServers": {
                "big": {"command": "node", "args": ["big.js"], "lazy": True, "description": "Large"},
                "fs": {
                    "command": "npx",
                    "exposedTools": ["read_file", {"original": "write_file", "exposed": "save"}],
                    "hiddenTools": ["move_file"],
                    "protocol": "legacy",
                },
                "box": {"type": "stdio-docker", "image": "mcp/fetch", "dockerArgs": ["--network", "none"]},
                "off": {"type": "sse", "url": "http://127.0.0.1:9000/sse", "enabled": False},
            },
            "toolsets": {
                "dev": ["big.a", {"namespacedName": "fs.read_file", "alias": "read"}],
                "ops": {"description": "Ops", "tools": [{"refId": "ab12"}]},
            },
        }
    )
    big, fs, box, off = config.servers.values()
    assert big.lazy
    assert big.description == "Large"
    assert fs.exposed_tools == (ExposedTool("read_file", None), ExposedTool("write_file", "save"))
    assert fs.hidden_tools == frozenset({"move_file"})
    assert fs.protocol == "legacy"
    assert (box.transport, box.image, box.docker_args) == ("stdio-docker", "mcp/fetch", ("--network", "none"))
    assert [s.name for s in config.enabled_servers()] == ["big", "fs", "box"]
    assert not off.enabled
    assert config.toolsets["dev"].tools == (
        ToolRef("big.a", None, None),
        ToolRef("fs.read_file", None, "read"),
    )
    assert config.toolsets["ops"].description == "Ops"
    assert config.toolsets["ops"].tools == (ToolRef(None, "ab12", None),)


# -- transports ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "transport"),
    [
        ({"command": "x"}, "stdio"),
        ({"url": "https://h/mcp"}, "http"),
        ({"image": "mcp/fetch"}, "stdio-docker"),
        ({"type": "ws", "url": "wss://h/mcp"}, "ws"),
        ({"transport": "sse", "url": "http://h/sse"}, "sse"),
        ({"type": "sse", "transport": "sse", "url": "http://h/sse"}, "sse"),
    ],
)
def test_transport_given_or_implied(entry: dict[str, Any], transport: str) -> None:
    assert parse(servers(s=entry)).servers["s"].transport == transport


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"type": "stdio"}, 'server "s": transport "stdio" needs field "command"'),
        ({"type": "http"}, 'server "s": transport "http" needs field "url"'),
        ({"type": "stdio-docker"}, 'server "s": transport "stdio-docker" needs field "image"'),
        ({}, 'server "s": needs "command" (stdio), "url" (http, sse, ws) or "image" (stdio-docker)'),
        (
            {"type": "ws", "url": "http://h"},
            'server "s": field "url": "http://h" is not a URL transport "ws"',
        ),
        ({"type": "sse", "url": "ws://h"}, 'server "s": field "url": "ws://h" is not a URL transport "sse"'),
        ({"command": "x", "url": "http://h"}, 'server "s": field "url" does not apply to transport "stdio"'),
        ({"type": "http", "url": "http://h", "env": {}}, 'field "env" does not apply to transport "http"'),
        (
            {"type": "sse", "transport": "ws", "url": "ws://h"},
            'fields "type" ("sse") and "transport" ("ws") disagree',
        ),
        (
            {"type": "stdoi", "command": "x"},
            '"stdoi" is not one of "stdio", "http", "sse", "ws", "stdio-docker"',
        ),
    ],
)
def test_transport_rules(entry: dict[str, Any], message: str) -> None:
    (problem,) = problems(servers(s=entry))
    assert problem.startswith("mcpvisor.json: ")
    assert message in problem


def test_bad_server_name_states_the_rule() -> None:
    (problem,) = problems(servers(**{"my.server": {"command": "x"}}))
    assert 'server name "my.server" is invalid' in problem
    assert "no dots" in problem
    assert "64" in problem


# -- interpolation ---------------------------------------------------------------------


def test_interpolation_defaults_dollar_and_builtins(tmp_path: Path) -> None:
    path = tmp_path / "mcpvisor.json"
    doc = servers(
        a={
            "command": "${MCPVISOR_PYTHON}",
            "args": ["${MCPVISOR_CONFIG_DIR}/s.py", "${MISSING:-fallback}", "$$HOME", "cost: $5"],
            "env": {"EMPTY": "${EMPTY:-d}"},
            "cwd": "sub",
            "description": "${NOT_INTERPOLATED}",
        }
    )
    spec = parse_config(doc, path=path, env={"EMPTY": ""}).servers["a"]
    assert spec.command == sys.executable
    assert spec.args == (f"{tmp_path}/s.py", "fallback", "$HOME", "cost: $5")
    assert dict(spec.env) == {"EMPTY": "d"}
    assert spec.cwd == str(tmp_path / "sub")  # relative to the config file
    assert spec.description == "${NOT_INTERPOLATED}"


def test_missing_variable_names_server_and_field() -> None:
    found = problems(
        servers(
            docs={"url": "https://h/mcp", "headers": {"Authorization": "Bearer ${DOCS_TOKEN}"}},
            git={"command": "x", "env": {"API_KEY": "${API_KEY}"}},
        )
    )
    assert found == [
        'mcpvisor.json: server "docs": field "headers.Authorization": environment variable DOCS_TOKEN '
        "is not set (use ${DOCS_TOKEN:-default} for a default)",
        'mcpvisor.json: server "git": field "env.API_KEY": environment variable API_KEY '
        "is not set (use ${API_KEY:-default} for a default)",
    ]


def test_disabled_server_missing_variable_is_only_a_warning() -> None:
    config = parse(servers(off={"command": "x", "env": {"K": "${NOPE}"}, "enabled": False}))
    assert config.servers["off"].env["K"] == "${NOPE}"
    assert any('field "env.K"' in w and "NOPE" in w for w in config.warnings)


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("enable", {"BOTH": "process", "FILE_ONLY": "file", "PROC_ONLY": "process"}),
        ("dotenv", {"BOTH": "file", "FILE_ONLY": "file", "PROC_ONLY": None}),
        ("process", {"BOTH": "process", "FILE_ONLY": None, "PROC_ONLY": "process"}),
        ("disable", {"BOTH": "${BOTH}", "FILE_ONLY": "${FILE_ONLY}", "PROC_ONLY": "${PROC_ONLY}"}),
    ],
)
def test_env_modes_with_dotenv_file(tmp_path: Path, mode: str, expected: dict[str, str | None]) -> None:
    (tmp_path / ".env").write_text(
        "# comment\nexport BOTH=file\nFILE_ONLY='file'  \nQUOTED=\"a\\nb\" # trailing\nBARE=x # c\n"
    )
    process = {"BOTH": "process", "PROC_ONLY": "process"}
    for var, value in expected.items():
        doc = {"settings": {"envMode": mode}, "mcpServers": {"a": {"command": "x", "args": [f"${{{var}}}"]}}}
        path = tmp_path / "mcpvisor.json"
        path.write_text(json.dumps(doc))
        if value is None:
            with pytest.raises(ConfigError, match=var):
                load_config(path, env=process)
        else:
            assert load_config(path, env=process).servers["a"].args == (value,)


def test_dotenv_quotes_and_comments(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text('QUOTED="a\\nb" # trailing\nBARE=x # c\nbroken line\n')
    path = tmp_path / "mcpvisor.json"
    path.write_text(json.dumps(servers(a={"command": "x", "args": ["${QUOTED}", "${BARE}"]})))
    config = load_config(path, env={})
    assert config.servers["a"].args == ("a\nb", "x")
    assert any("line 3 ignored" in w for w in config.warnings)


# -- durations -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (30, 30.0),
        (1.5, 1.5),
        ("500ms", 0.5),
        ("30s", 30.0),
        ("5m", 300.0),
        ("1h", 3600.0),
        ("1.5s", 1.5),
        ("250", 250.0),
    ],
)
def test_parse_duration_units(value: float | str, seconds: float) -> None:
    assert parse_duration(value, field="t", max_s=3600) == seconds


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (True, "expected a number of seconds"),
        ("5 weeks", 'unknown unit "weeks"'),
        ("soon", '"soon" is not a duration'),
        (-1, "cannot be negative"),
        ("2h", "2h (7200s) is implausibly long (at most 1h)"),
    ],
)
def test_parse_duration_rejects(value: Any, message: str) -> None:
    with pytest.raises(ValueError, match=r"^field \"t\": ") as info:
        parse_duration(value, field="t", max_s=3600)
    assert message in str(info.value)


def test_duration_too_long_suggests_milliseconds() -> None:
    found = problems(
        {"settings": {"healthCheckInterval": "7200s"}, **servers(a={"command": "x", "timeout": 7200})}
    )
    assert found == [
        'mcpvisor.json: settings: field "healthCheckInterval": 7200s is implausibly long (at most 1h); '
        'did you mean "7200ms"?',
        'mcpvisor.json: server "a": field "timeout": 7200s is implausibly long (at most 1h); '
        'did you mean milliseconds? write "7200ms"',
    ]


def test_duration_fields_accept_units_and_bounds() -> None:
    spec = parse(
        servers(a={"command": "x", "timeout": "90s", "healthCheckInterval": 0, "shutdownGrace": "500ms"})
    )
    a = spec.servers["a"]
    assert (a.timeout, a.health_check_interval, a.shutdown_grace) == (90.0, 0.0, 0.5)
    (problem,) = problems(servers(a={"command": "x", "timeout": 0}))
    assert 'field "timeout": 0s is too short (at least 1ms)' in problem


def test_relist_interval_defaults_to_the_health_check_interval_and_is_validated_like_durations() -> None:
    """``relistInterval`` (how often a server that cannot announce list changes is
    re-listed) follows ``healthCheckInterval`` unless set, per server or under settings,
    and is bounded like the other durations."""
    config = parse({"settings": {"healthCheckInterval": "10s"},
                    **servers(a={"command": "x"}, b={"command": "x", "relistInterval": "500ms"})})
    a, b = config.servers.values()
    assert (a.relist_every, b.relist_every) == (10.0, 0.5)
    off = parse({"settings": {"relistInterval": 0}, **servers(a={"command": "x"})})
    assert off.servers["a"].relist_every == 0
    (problem,) = problems(servers(a={"command": "x", "relistInterval": "2h"}))
    assert 'server "a": field "relistInterval": 2h (7200s) is implausibly long (at most 1h)' in problem


# -- misspellings and many problems at once ------------------------------------------------


def test_misspelt_keys_get_a_close_match() -> None:
    found = problems({"settings": {"exposur": "menu"}, **servers(git={"comand": "uvx"})})
    assert found == [
        'mcpvisor.json: settings: unknown field "exposur" (did you mean "exposure"?)',
        'mcpvisor.json: server "git": unknown field "comand" (did you mean "command"?)',
    ]


def test_misspelt_values_get_a_close_match() -> None:
    (problem,) = problems({"settings": {"exposure": "menus"}})
    assert problem == (
        'mcpvisor.json: settings: field "exposure": "menus" is not one of "menu", "all", "discovery" '
        '(did you mean "menu"?)'
    )


def test_every_problem_is_reported_at_once() -> None:
    found = problems(
        {
            "settings": {"maxMessageBytes": 5, "logLevel": "loud"},
            "mcpServers": {
                "a": {"command": 1, "args": ["ok", 2], "lazy": "yes"},
                "b": {"url": "https://h", "headers": {"X": 1}, "exposedTools": [{"orignal": "t"}]},
                "c": "not an object",
            },
            "toolsets": {"dev": ["nodot", {"namespacedName": "a.b", "refId": "x"}]},
        }
    )
    assert found == [
        'mcpvisor.json: settings: field "logLevel": "loud" is not one of "debug", "info", "warning", "error"',
        'mcpvisor.json: settings: field "maxMessageBytes": 5 is out of range '
        "(1024 to 1073741824 bytes, 1 KiB to 1 GiB)",
        'mcpvisor.json: server "a": field "command": expected a string, got an integer',
        'mcpvisor.json: server "a": field "args[1]": expected a string, got an integer',
        'mcpvisor.json: server "a": field "lazy": expected true or false, got a string',
        'mcpvisor.json: server "b": field "headers.X": expected a string, got an integer',
        'mcpvisor.json: server "b": field "exposedTools[0]": unknown field "orignal" '
        '(did you mean "original"?)',
        'mcpvisor.json: server "c": expected an object, got a string',
        'mcpvisor.json: toolset "dev": field "tools[0]": "nodot" is not a "server.tool" name',
        'mcpvisor.json: toolset "dev": field "tools[1]": give exactly one of "namespacedName" or "refId"',
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '{\n  "mcpServers": {\n    "a": {"command": "x"},\n  }\n}',
            "JSON is malformed: trailing comma in object (line 4, column 3)",
        ),
        ('{\n  "mcpServers": ', "JSON is malformed: unexpected end of file (line 2, column 17)"),
        ("", "file is empty"),
        ("[1, 2]", "expected a JSON object at the top level, got a list"),
    ],
)
def test_malformed_json_reports_line_and_column(text: str, message: str) -> None:
    (problem,) = problems(text)
    assert problem.startswith(f"mcpvisor.json: {message}")


def test_load_config_missing_file_names_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope\.json: no such file") as info:
        load_config(tmp_path / "nope.json")
    assert info.value.path == tmp_path / "nope.json"


# -- other clients' files ----------------------------------------------------------------


def test_foreign_keys_warn_and_unknown_top_level_keys_warn() -> None:
    config = parse(
        {
            "projects": {},
            "mcpServer": {},
            "mcpServers": {
                "a": {"command": "x", "disabled": True, "alwaysAllow": ["t"], "autoApprove": []},
                "b": {"command": "x", "disabledTools": ["rm"], "headersHelper": "./h.sh"},
            },
        }
    )
    assert not config.servers["a"].enabled
    assert config.servers["b"].hidden_tools == frozenset({"rm"})
    text = "\n".join(config.warnings)
    for key in ("disabled", "alwaysAllow", "autoApprove", "headersHelper"):
        assert f'field "{key}"' in text
    assert 'field "disabledTools" is treated like "hiddenTools"' in text
    assert 'unknown top-level key "projects" ignored' in text
    assert 'unknown top-level key "mcpServer" ignored (did you mean "mcpServers"?)' in text


def test_a_misspelt_servers_key_with_no_servers_is_an_error_not_an_empty_proxy() -> None:
    """"mcpServer" and no "mcpServers": the proxy would run with no servers at all and look
    fine; it must refuse, naming the key and what was meant."""
    (problem,) = problems({"mcpServer": {"a": {"command": "x"}}})
    assert 'unknown top-level key "mcpServer" (did you mean "mcpServers"?)' in problem
    assert "no servers would run" in problem


def test_vscode_format_gets_a_hint() -> None:
    (problem,) = problems({"servers": {"a": {"command": "x"}}})
    assert "VS Code format: use `mcpvisor import vscode`" in problem


def test_toolset_naming_an_unknown_server_warns() -> None:
    config = parse({**servers(git={"command": "x"}), "toolsets": {"dev": ["gti.status"]}})
    assert any('no server "gti" (did you mean "git"?)' in w for w in config.warnings)


# -- settings and fingerprints -----------------------------------------------------------


def test_settings_defaults_flow_into_servers_unless_overridden() -> None:
    config = parse(
        {
            "settings": {
                "healthCheckInterval": "10s",
                "maxMissedPings": 5,
                "exposure": "all",
                "envMode": "process",
            },
            **servers(a={"command": "x"}, b={"command": "x", "healthCheckInterval": "1m"}),
        }
    )
    a, b = config.servers.values()
    assert (a.health_check_interval, a.max_missed_pings) == (10.0, 5)
    assert (b.health_check_interval, b.max_missed_pings) == (60.0, 5)
    assert config.settings.exposure == "all"
    assert config.settings.env_mode == "process"
    assert dict(config.settings.server_defaults) == {"health_check_interval": 10.0, "max_missed_pings": 5}


def test_settings_cross_checks_and_defaults() -> None:
    assert parse({}).settings.max_message_bytes == 16 * 1024 * 1024
    (problem,) = problems({"settings": {"restartDelay": "1m", "restartDelayMax": "10s"}})
    assert 'field "restartDelay": 1m is longer than "restartDelayMax" (10s)' in problem


def test_fingerprint_follows_what_needs_a_restart() -> None:
    spec = parse(servers(a={"command": "x", "description": "one"})).servers["a"]
    fp = spec.fingerprint()
    assert len(fp) == 16
    assert int(fp, 16) >= 0
    assert msgspec.structs.replace(spec, description="two", enabled=False).fingerprint() == fp
    assert msgspec.structs.replace(spec, command="y").fingerprint() != fp
    assert msgspec.structs.replace(spec, env={"K": "v"}).fingerprint() != fp
    assert ServerSpec(name="other", transport="stdio", command="x").fingerprint() == fp


# -- finding the file --------------------------------------------------------------------


def test_find_config_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("mcpvisor.config.user_config_path", lambda: tmp_path / "user" / "mcpvisor.json")
    path, why = find_config(env={})
    assert path is None
    assert why.startswith("no config found; looked at: ./mcpvisor.json, ./.mcp.json")
    (tmp_path / "user").mkdir()
    (tmp_path / "user" / "mcpvisor.json").write_text("{}")
    assert find_config(env={})[0] == tmp_path / "user" / "mcpvisor.json"
    (tmp_path / ".mcp.json").write_text("{}")
    assert find_config(env={}) == (Path(".mcp.json"), "./.mcp.json in the current directory")
    (tmp_path / "mcpvisor.json").write_text("{}")
    assert find_config(env={}) == (Path("mcpvisor.json"), "./mcpvisor.json in the current directory")
    env = {"MCPVISOR_CONFIG": "missing-env.json"}
    assert find_config(env=env) == (Path("missing-env.json"), "from $MCPVISOR_CONFIG")
    assert find_config("missing-flag.json", env=env) == (Path("missing-flag.json"), "from --config")
    assert find_config(env={}, cwd=tmp_path)[0] == tmp_path / "mcpvisor.json"


def test_an_oauth_entry_is_read_with_its_secret_from_the_environment_and_checked_field_by_field() -> None:
    """``oauth`` (Claude Code's keys) configures the login of an http server; a wrong field
    is named with its server, a stdio server cannot have one."""
    config = parse(
        {"mcpServers": {"linear": {"type": "http", "url": "https://mcp.linear.app/mcp",
                                   "oauth": {"clientId": "abc", "clientSecret": "${LINEAR_SECRET}",
                                             "callbackPort": 8765, "scopes": "read write"}}},
         "settings": {"oauth": {"openBrowser": False}}},
        env={"LINEAR_SECRET": "s3cret-from-env"},
    )
    oauth = config.servers["linear"].oauth
    assert oauth is not None
    assert (oauth.client_id, oauth.client_secret, oauth.callback_port, oauth.scopes) == (
        "abc", "s3cret-from-env", 8765, ("read", "write"))
    assert "s3cret-from-env" not in repr(oauth)
    assert "s3cret-from-env" not in pretty_repr(oauth)  # rich's pretty printer too
    assert config.settings.oauth_open_browser is False
    with pytest.raises(ConfigError) as err:
        parse({"mcpServers": {
            "m2m": {"type": "http", "url": "https://x.example/mcp", "oauth": {"grant": "client_credentials"}},
            "bad": {"type": "http", "url": "https://x.example/mcp",
                    "oauth": {"callbackPort": 70000, "grant": "device", "clientMetadataUrl": "http://x/"}},
            "local": {"command": "x", "oauth": {}},
        }})
    text = str(err.value)
    assert 'server "m2m": field "oauth.clientId" is needed for "grant": "client_credentials"' in text
    assert 'server "bad": field "oauth.callbackPort": 70000 is not a port (1 to 65535)' in text
    assert 'server "bad": field "oauth.grant": "device" is not one of' in text
    assert 'server "bad": field "oauth.clientMetadataUrl": "http://x/" must be an https URL' in text
    assert 'server "local": field "oauth" does not apply to transport "stdio"' in text
