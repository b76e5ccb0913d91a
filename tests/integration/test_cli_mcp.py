"""``mcpvisor mcp ...`` through the CLI's entry point.

Each test works in its own temp directory with its own config, state directory, HOME and
XDG dirs, with stdin not a terminal (so the CLI must never prompt) unless a test gives it
one. Probes run against the fixture servers (tests/servers). `Cli` runs
`mcpvisor.cli.main` in this process (a new interpreter costs seconds on a 2-core
machine); ``real=True`` runs ``python -m mcpvisor`` as a subprocess instead, for the
checks that are about the process itself (exit status, concurrent writers, a terminal).
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from mcpvisor.config import load_config

SERVERS = Path(__file__).parents[1] / "servers"
FLAKY = str(SERVERS / "flaky.py")
PY = sys.executable
STEP_BOUND_S = 60.0
"""One CLI run on a loaded 2-core machine (a probe imports the MCP SDK: seconds when busy)."""

pytestmark = pytest.mark.timeout(300)  # several CLI runs, each bounded by STEP_BOUND_S


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


class Cli:
    """`python -m mcpvisor` in an isolated directory: its own config, state, HOME and XDG dirs."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.cwd = root / "work"
        self.home = root / "home"
        for d in (self.cwd, self.home):
            d.mkdir(parents=True, exist_ok=True)
        self.env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("MCPVISOR_CONFIG", "MCPVISOR_STATE_DIR", "MCPVISOR_EXPOSURE", "NO_COLOR")
        }
        self.env.update(
            MCPVISOR_STATE_DIR=str(root / "state"),
            XDG_CONFIG_HOME=str(root / "xdg"),
            XDG_STATE_HOME=str(root / "xdg-state"),
            HOME=str(self.home),
        )

    @property
    def config(self) -> Path:
        return self.cwd / "mcpvisor.json"

    def doc(self, path: Path | None = None) -> Any:
        return json.loads((path or self.config).read_text())

    def argv(self, *args: str) -> list[str]:
        return [PY, "-m", "mcpvisor", *args]

    def __call__(self, *args: str, stdin: str = "", env: dict[str, str] | None = None,
                 real: bool = False) -> Result:
        if not real:
            return self._in_process(args, stdin, {**self.env, **(env or {})})
        done = subprocess.run(
            self.argv(*args),
            cwd=self.cwd,
            env={**self.env, **(env or {})},
            input=stdin,
            capture_output=True,
            text=True,
            timeout=STEP_BOUND_S,
            check=False,
        )
        return Result(done.returncode, done.stdout, done.stderr)

    def _in_process(self, args: tuple[str, ...], stdin: str, env: dict[str, str]) -> Result:
        """``main(args)`` with this test's cwd, environment and stdin, output captured."""
        from mcpvisor.cli import main

        out, err = io.StringIO(), io.StringIO()
        saved_env, saved_cwd, saved_stdin = dict(os.environ), os.getcwd(), sys.stdin
        os.environ.clear()
        os.environ.update(env)
        os.chdir(self.cwd)
        sys.stdin = io.StringIO(stdin)
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                try:
                    code = main(list(args))
                except SystemExit as exc:  # argparse: --help, usage errors
                    code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        finally:
            sys.stdin = saved_stdin
            os.chdir(saved_cwd)
            os.environ.clear()
            os.environ.update(saved_env)
            for handler in logging.getLogger().handlers[:]:  # a command's log handler wrote to `err`
                if getattr(handler, "stream", None) is err:
                    logging.getLogger().removeHandler(handler)
        return Result(code, out.getvalue(), err.getvalue())

    def write(self, doc: Any, path: Path | None = None, indent: int = 2) -> Path:
        target = path or self.config
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(doc, indent=indent) + "\n")
        return target


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    return Cli(tmp_path)


def flaky(*flags: str) -> dict[str, Any]:
    return {"command": PY, "args": [FLAKY, *flags], "protocol": "legacy"}


# --- help ------------------------------------------------------------------------------------


def _parsers(parser: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    import argparse

    found = [(path, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += _parsers(sub, (*path, name))
    return found


def test_every_command_has_help_with_an_example(cli: Cli) -> None:
    from mcpvisor.cli import build_parser

    commands = _parsers(build_parser())
    names = {" ".join(path) for path, _ in commands}
    assert {
        "mcp add",
        "mcp list",
        "mcp remove",
        "mcp enable",
        "mcp disable",
        "mcp test",
        "mcp info",
        "mcp get",
        "mcp add-json",
        "mcp add-from-claude-desktop",
        "toolset list",
        "toolset show",
        "toolset create",
        "toolset delete",
        "toolset equip",
        "toolset unequip",
        "import",
        "config path",
        "config validate",
    } <= names
    for path, parser in commands:
        assert "example" in parser.format_help(), f"`mcpvisor {' '.join(path)} --help` has no example"
    for args in (("mcp", "add"), ("toolset",), ("import",), ("config", "path")):
        done = cli(*args, "--help")
        assert done.code == 0, done
        assert "examples:" in done.out


# --- add ---------------------------------------------------------------------------------------


def test_add_every_transport_as_a_claude_code_superset(cli: Cli) -> None:
    """No config yet: `mcp add` creates ./mcpvisor.json and says so; stdio entries are
    {command, args, env}, the others carry "type"; every option lands; the file validates."""
    first = cli(
        "mcp", "add", "git", "--env", "GIT_DIR=/repo", "--", "uvx", "mcp-server-git", "--repository", "."
    )
    assert first.code == 0, first.err
    assert "mcpvisor.json" in first.out
    assert "created" in first.out
    steps = [
        (
            "docs",
            "https://docs.example/mcp",
            "--header",
            "Authorization: Bearer ${DOCS_TOKEN}",
            "-H",
            "X-Plain=abc",
            "--description",
            "Docs",
            "--timeout",
            "30s",
        ),
        ("old", "--transport", "sse", "--url", "http://127.0.0.1:9000/sse", "--disabled"),
        ("sock", "ws://127.0.0.1:9001/"),
        (
            "box",
            "--transport",
            "stdio-docker",
            "--image",
            "mcp/everything",
            "--lazy",
            "--docker-arg=--network=none",
            "--env",
            "K=V",
            "--",
            "--verbose",
        ),
        ("big", "--lazy", "--timeout", "45", "--description", "Large toolbox", "--", "node", "big.js"),
    ]
    for step in steps:
        done = cli("mcp", "add", *step)
        assert done.code == 0, (step, done.err)
        assert "./mcpvisor.json in the current directory" in done.out
    assert cli.doc() == {
        "mcpServers": {
            "git": {
                "command": "uvx",
                "args": ["mcp-server-git", "--repository", "."],
                "env": {"GIT_DIR": "/repo"},
            },
            "docs": {
                "type": "http",
                "url": "https://docs.example/mcp",
                "headers": {"Authorization": "Bearer ${DOCS_TOKEN}", "X-Plain": "abc"},
                "description": "Docs",
                "timeout": "30s",
            },
            "old": {"type": "sse", "url": "http://127.0.0.1:9000/sse", "enabled": False},
            "sock": {"type": "ws", "url": "ws://127.0.0.1:9001/"},
            "box": {
                "type": "stdio-docker",
                "image": "mcp/everything",
                "args": ["--verbose"],
                "dockerArgs": ["--network=none"],
                "env": {"K": "V"},
                "lazy": True,
            },
            "big": {
                "command": "node",
                "args": ["big.js"],
                "description": "Large toolbox",
                "lazy": True,
                "timeout": 45,
            },
        }
    }
    config = load_config(cli.config, env={"DOCS_TOKEN": "t"})
    assert config.servers["docs"].timeout == 30.0
    assert not config.servers["old"].enabled
    assert config.servers["box"].transport == "stdio-docker"


def test_add_a_server_that_needs_a_login_as_claude_code_types_it(cli: Cli) -> None:
    """`mcp add --transport http NAME URL` needs no header; Claude Code's --client-id,
    --client-secret and --callback-port become the entry's ``oauth``; they apply to http
    and sse servers only."""
    assert cli("mcp", "add", "--transport", "http", "linear", "https://mcp.linear.app/mcp").code == 0
    done = cli("mcp", "add", "--transport", "http", "corp", "https://mcp.corp.example/mcp",
               "--client-id", "abc", "--client-secret", "${CORP_SECRET}", "--callback-port", "8765")
    assert done.code == 0, done.err
    servers = cli.doc()["mcpServers"]
    assert servers["linear"] == {"type": "http", "url": "https://mcp.linear.app/mcp"}
    assert servers["corp"]["oauth"] == {"clientId": "abc", "clientSecret": "${CORP_SECRET}",
                                        "callbackPort": 8765}
    refused = cli("mcp", "add", "local", "--client-id", "abc", "--", "uvx", "thing")
    assert refused.code == 2
    assert "apply to http and sse servers" in refused.err


def test_add_refuses_a_duplicate_unless_forced(cli: Cli) -> None:
    assert cli("mcp", "add", "a", "--", "one").code == 0
    again = cli("mcp", "add", "a", "--", "two")
    assert again.code == 2
    assert "already exists" in again.err
    assert "--force" in again.err
    assert cli.doc()["mcpServers"]["a"]["command"] == "one"
    assert cli("mcp", "add", "a", "--force", "--", "two").code == 0
    assert cli.doc()["mcpServers"]["a"]["command"] == "two"


def test_add_never_prompts_without_a_terminal(cli: Cli) -> None:
    """In a pipe, a missing field is an error (exit 2) that names it; nothing is written."""
    cases = [
        (("mcp", "add", "x"), "a command after --"),
        (("mcp", "add", "x", "--transport", "stdio"), "missing the command"),
        (("mcp", "add", "x", "--transport", "http"), "missing --url"),
        (("mcp", "add", "x", "--transport", "stdio-docker"), "missing --image"),
        (("mcp", "add"), "missing NAME"),
    ]
    for args, message in cases:
        done = cli(*args, stdin="an answer nobody asked for\n")
        assert (done.code, message in done.err) == (2, True), (args, done)
    assert not cli.config.exists()


def test_add_validates_before_writing(cli: Cli) -> None:
    """A value the config would reject is refused with the validator's words; the file keeps its bytes."""
    cli.write({"mcpServers": {"keep": {"command": "k"}}}, indent=4)
    before = cli.config.read_bytes()
    cases = [
        (("mcp", "add", "t", "--timeout", "5000", "--", "x"), 'did you mean milliseconds? write "5000ms"'),
        (("mcp", "add", "u", "--transport", "http", "--url", "ftp://x"), "is not a URL"),
        (("mcp", "add", "bad.name", "--", "x"), "is invalid"),
        (("mcp", "add", "h", "--header", "A=b", "--", "x"), "--header applies to http, sse and ws"),
        (("mcp", "add", "e", "--env", "novalue", "--", "x"), "expected K=V"),
    ]
    for args, message in cases:
        done = cli(*args)
        assert (done.code, message in done.err) == (2, True), (args, done)
    assert cli.config.read_bytes() == before


def test_where_add_writes(cli: Cli) -> None:
    """The lookup's file (./.mcp.json here), --config, $MCPVISOR_CONFIG, and --scope user."""
    claude = cli.write({"mcpServers": {}}, cli.cwd / ".mcp.json")
    assert "./.mcp.json in the current directory" in cli("mcp", "add", "a", "--", "x").out
    assert "a" in cli.doc(claude)["mcpServers"]
    other = cli.root / "elsewhere.json"
    assert "from --config" in cli("mcp", "add", "b", "--config", str(other), "--", "x").out
    assert "from --config" in cli("mcp", "--config", str(other), "add", "b2", "--", "x").out
    env_file = cli.root / "env.json"
    assert cli("mcp", "add", "c", "--", "x", env={"MCPVISOR_CONFIG": str(env_file)}).code == 0
    user = cli("mcp", "add", "d", "--scope", "user", "--", "x")
    assert "user config file" in user.out
    assert list(cli.doc(other)["mcpServers"]) == ["b", "b2"]
    assert list(cli.doc(env_file)["mcpServers"]) == ["c"]
    assert list(cli.doc(cli.root / "xdg" / "mcpvisor" / "mcpvisor.json")["mcpServers"]) == ["d"]


def test_edits_keep_what_mcpvisor_does_not_own(cli: Cli) -> None:
    """Other top-level keys, other servers' unknown keys, key order and the file's indent survive
    add, disable, enable and remove."""
    doc = {
        "$schema": "https://example/schema.json",
        "mcpServers": {
            "theirs": {"type": "stdio", "command": "t", "args": [], "env": {}, "alwaysAllow": ["x"]},
            "mine": {"command": "m"},
        },
        "toolsets": {"dev": ["theirs.x"]},
        "settings": {"exposure": "all"},
    }
    cli.write(doc, indent=4)
    for args in (
        ("mcp", "add", "new", "--", "n"),
        ("mcp", "disable", "mine"),
        ("mcp", "enable", "mine"),
        ("mcp", "remove", "new"),
    ):
        assert cli(*args).code == 0, args
    text = cli.config.read_text()
    assert json.loads(text) == doc
    assert '\n    "mcpServers"' in text  # still four spaces


def test_two_writers_at_once_both_land(cli: Cli) -> None:
    """Eight `mcp add` processes started together: every server is in the file, which parses."""
    cli.write({"mcpServers": {}})
    procs = [
        subprocess.Popen(
            cli.argv("mcp", "add", f"s{i}", "--", "cmd", str(i)),
            cwd=cli.cwd,
            env=cli.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(8)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=STEP_BOUND_S * 2)
        assert proc.returncode == 0, err
    servers = cli.doc()["mcpServers"]
    assert sorted(servers) == sorted(f"s{i}" for i in range(8))
    assert all(servers[f"s{i}"]["args"] == [str(i)] for i in range(8))
    assert not list(cli.cwd.glob("*.tmp*"))
    assert not [p for p in cli.cwd.iterdir() if p.name.startswith(".mcpvisor")]


# --- remove / enable / disable ---------------------------------------------------------------------


def test_remove_enable_disable(cli: Cli) -> None:
    cli.write({"mcpServers": {"alpha": {"command": "a", "disabled": False}, "beta": {"command": "b"}}})
    assert cli("mcp", "disable", "alpha").code == 0
    assert cli.doc()["mcpServers"]["alpha"] == {"command": "a", "enabled": False}
    again = cli("mcp", "disable", "alpha")
    assert again.code == 0
    assert "already disabled" in again.out
    assert cli("mcp", "enable", "alpha", "--format", "json").json()["changed"] is True
    assert cli.doc()["mcpServers"]["alpha"] == {"command": "a"}
    typo = cli("mcp", "remove", "alpah")
    assert typo.code == 2
    assert "did you mean 'alpha'" in typo.err
    assert cli("mcp", "enable", "nope").code == 2
    gone = cli("mcp", "remove", "alpha")  # stdin is not a terminal: no question asked
    assert gone.code == 0
    assert "Removed server 'alpha'" in gone.out
    assert list(cli.doc()["mcpServers"]) == ["beta"]


def test_commands_without_a_config(cli: Cli) -> None:
    listed = cli("mcp", "list", "--format", "json")
    assert listed.code == 0
    assert listed.json() == []
    assert "no config found" in listed.err
    for args in (("mcp", "test", "x"), ("mcp", "info", "x"), ("mcp", "remove", "x"), ("mcp", "disable", "x")):
        done = cli(*args)
        assert (done.code, "no config found" in done.err) == (2, True), args
    missing = cli("mcp", "list", "--config", "nowhere.json")
    assert missing.code == 2
    assert "no such file" in missing.err


def test_a_bad_config_is_exit_2_with_every_problem(cli: Cli) -> None:
    cli.write({"mcpServers": {"a": {"command": "a", "tmeout": 3}, "b": {"type": "htp", "url": "x"}}})
    for args in (("mcp", "list"), ("mcp", "test", "a"), ("mcp", "info", "a")):
        done = cli(*args, real=args == ("mcp", "list"))  # one through the real process's exit status
        assert done.code == 2, args
        assert 'unknown field "tmeout"' in done.err, done.err
        assert '"htp"' in done.err


# --- list / test / info: real servers ----------------------------------------------------------------


@pytest.mark.slow
def test_list_probes_every_server_concurrently_with_a_bound(cli: Cli) -> None:
    cli.write(
        {
            "mcpServers": {
                "ok": {**flaky(), "description": "A good one\nwith a second line"},
                "exits": flaky("--exit-at-start", "3"),
                "missing": {"command": "mcpvisor-no-such-command"},
                "hangs": flaky("--hang-after", "0"),
                "off": {**flaky(), "enabled": False},
                "needs": {
                    "type": "http",
                    "url": "http://127.0.0.1:9/mcp",
                    "headers": {"K": "${MCPVISOR_TEST_UNSET}"},
                },
            }
        }
    )
    done = cli("mcp", "list", "--timeout", "15", "--format", "json")
    assert done.code == 0, done.err
    rows = {r["name"]: r for r in done.json()}
    assert list(rows) == ["ok", "exits", "missing", "hangs", "off", "needs"]
    assert rows["ok"]["state"] == "online"
    assert rows["ok"]["toolCount"] == 8
    assert rows["exits"]["state"] == "offline"
    assert "exited with status 3" in rows["exits"]["reason"]
    assert "command not found on PATH" in rows["missing"]["reason"]
    assert "no answer within 15s" in rows["hangs"]["reason"]
    assert rows["off"]["state"] == "disabled"
    assert rows["off"]["toolCount"] is None
    assert "MCPVISOR_TEST_UNSET is not set" in rows["needs"]["reason"]

    doc = cli.doc()
    del doc["mcpServers"]["hangs"]
    cli.write(doc)
    table = cli("mcp", "list", "--status", "offline")
    lines = table.out.splitlines()
    assert lines[0].split() == ["Name", "Transport", "State", "Tools", "Description"]
    assert {line.split()[0] for line in lines[1:]} == {"exits", "missing", "needs"}
    assert "\x1b[" not in table.out  # no colour in a pipe
    enabled = cli("mcp", "list", "--enabled", "--status", "online", "--format", "json").json()
    assert [(r["name"], r["description"]) for r in enabled] == [("ok", "A good one\nwith a second line")]
    disabled = cli("mcp", "list", "--status", "disabled")
    assert disabled.out.splitlines()[1].split()[:3] == ["off", "stdio", "Disabled"]


@pytest.mark.slow
def test_test_prints_each_step_or_a_classified_cause(cli: Cli) -> None:
    cli.write(
        {
            "mcpServers": {
                "ok": flaky(),
                "exits": flaky("--exit-at-start", "3", "--stderr-text", "config file missing"),
                "missing": {"command": "mcpvisor-no-such-command"},
                "hangs": flaky("--hang-after", "0"),
            }
        }
    )
    ok = cli("mcp", "test", "ok")
    assert ok.code == 0, ok.err
    for step in ("spawn", "initialize", "tools/list"):
        assert any(line.strip().startswith(f"✓ {step}") for line in ok.out.splitlines()), ok.out
    assert "OK: ok is online with 8 tools" in ok.out
    exits = cli("mcp", "test", "exits")
    assert exits.code == 1
    assert "exited with status 3" in exits.out
    assert "config file missing" in exits.out
    missing = cli("mcp", "test", "missing", "--format", "json")
    assert missing.code == 1
    assert missing.json()["failure"]["kind"] == "not_found"
    hangs = cli("mcp", "test", "hangs", "--timeout", "2")
    assert hangs.code == 1
    assert "no answer within 2s (during initialize)" in hangs.out
    typo = cli("mcp", "test", "okk")
    assert typo.code == 2
    assert "did you mean 'ok'" in typo.err


@pytest.mark.slow
def test_info_masks_secrets_and_lists_tools(cli: Cli) -> None:
    cli.write(
        {
            "mcpServers": {
                "web": {
                    "type": "http",
                    "url": "http://127.0.0.1:9/mcp",
                    "headers": {"Authorization": "Bearer sk-live-123", "X-Ref": "Bearer ${TOKEN:-none}"},
                },
                "local": {**flaky(), "env": {"API_KEY": "hunter2", "HOME_DIR": "${HOME}"}},
            }
        }
    )
    web = cli("mcp", "info", "web", "--no-probe")
    assert web.code == 0
    assert "sk-live-123" not in web.out
    assert '"Authorization": "***"' in web.out
    assert '"X-Ref": "Bearer ${TOKEN:-none}"' in web.out
    local = cli("mcp", "info", "local", "--format", "json")
    data = local.json()
    assert "hunter2" not in local.out
    assert data["config"]["env"] == {"API_KEY": "***", "HOME_DIR": "${HOME}"}
    tools = {t["name"]: t["description"] for t in data["tools"]}
    assert tools["echo"] == "Echo the text back as 'echo: {text}'."
    assert data["protocolVersion"] == "2025-11-25"  # flaky speaks only the handshake era
    text = cli("mcp", "info", "local")
    assert "opened in: 2025-11-25 (handshake era) (config protocol: legacy)" in text.out
    assert "tools (8):" in text.out
    assert "Add two numbers." in text.out


def test_add_asks_for_what_is_missing_on_a_terminal(cli: Cli) -> None:
    """With a terminal, `mcp add NAME` asks for the transport and the command, then writes."""
    import pty
    import select
    import time

    controller, terminal = pty.openpty()
    proc = subprocess.Popen(
        cli.argv("mcp", "add", "asked"),
        cwd=cli.cwd,
        env={**cli.env, "TERM": "dumb"},
        stdin=terminal,
        stdout=terminal,
        stderr=terminal,
        close_fds=True,
    )
    os.close(terminal)
    seen = b""
    deadline = time.monotonic() + STEP_BOUND_S

    def read_until(text: bytes) -> None:
        nonlocal seen
        while text not in seen:
            remaining = deadline - time.monotonic()
            assert remaining > 0, seen
            ready, _, _ = select.select([controller], [], [], remaining)
            if ready:
                try:
                    seen += os.read(controller, 4096)
                except OSError:
                    break

    try:
        read_until(b"Transport")
        os.write(controller, b"stdio\r")
        read_until(b"Command and arguments")
        os.write(controller, b"python -m my_server --flag\r")
        read_until(b"Added")
        assert proc.wait(timeout=STEP_BOUND_S) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(controller)
    assert cli.doc()["mcpServers"]["asked"] == {
        "command": "python",
        "args": ["-m", "my_server", "--flag"],
    }  # an empty env is not written (issue 15)
