"""The config file store and the atomic-write primitive under it.

Invariants: a user's config file is never half-written, never loses what mcpvisor does
not own, keeps its permissions and its bytes when nothing changed, and two processes
editing it at once both land. Tests that start processes use real OS processes (the
lock is an inter-process lock) and kill whatever is left in ``finally``.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

from mcpvisor._atomic import JSONFileError, LockTimeout, atomic_write_text, dump_json, locked, read_json
from mcpvisor.store import (
    ConfigStore,
    DuplicateServer,
    InvalidConfig,
    MalformedConfig,
    StoreError,
    UnknownServer,
)

PROCESS_TIMEOUT_S = 60.0
"""Bound on any helper process: generous for a loaded CI box, far under pytest-timeout."""

SERVERS_PER_PROCESS = 20

# What Claude Code writes: JSON.stringify(config, null, 2), no trailing newline.
CLAUDE_CODE_MCP_JSON = (
    "{\n"
    '  "mcpServers": {\n'
    '    "context7": {\n'
    '      "type": "stdio",\n'
    '      "command": "npx",\n'
    '      "args": [\n'
    '        "-y",\n'
    '        "@upstash/context7-mcp"\n'
    "      ],\n"
    '      "env": {}\n'
    "    },\n"
    '    "docs": {\n'
    '      "type": "http",\n'
    '      "url": "https://example.invalid/mcp",\n'
    '      "headers": {\n'
    '        "Authorization": "Bearer ${DOCS_TOKEN}"\n'
    "      }\n"
    "    }\n"
    "  }\n"
    "}"
)


# --- helpers ---------------------------------------------------------------------------




def wait_ok(proc: subprocess.Popen[str]) -> None:
    """Wait (bounded) for a helper to exit 0; show its stderr if it did not."""
    _, err = proc.communicate(timeout=PROCESS_TIMEOUT_S)
    assert proc.returncode == 0, err


def expect_line(proc: subprocess.Popen[str], line: str) -> None:
    """Read the helper's next stdout line (it has a deadline: the helper itself is bounded)."""
    assert proc.stdout is not None
    got = proc.stdout.readline().strip()
    assert got == line, f"expected {line!r}, got {got!r}; stderr: {proc.stderr.read() if proc.stderr else ''}"


def tmp_leftovers(directory: Path) -> list[str]:
    """Temporary files atomic_write_text would leave behind if it failed to clean up."""
    return [p.name for p in directory.iterdir() if p.name.endswith(".tmp")]


# --- the atomic primitive --------------------------------------------------------------


def test_atomic_write_failure_leaves_old_file_and_no_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failure at the rename leaves the old bytes and no temp file; a crash mid-write must
    never show up as a truncated or half-new config."""
    target = tmp_path / "cfg.json"
    target.write_bytes(b'{"a": 1}')

    def broken_replace(src: object, dst: object) -> None:
        raise OSError("disk full (simulated)")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="simulated"):
        atomic_write_text(target, '{"a": 2}\n')
    assert target.read_bytes() == b'{"a": 1}'
    assert tmp_leftovers(tmp_path) == []


def test_atomic_write_failure_at_fsync_cleans_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failure before the rename (fsync) also leaves the old bytes and no temp file."""
    target = tmp_path / "cfg.json"
    target.write_bytes(b"old")

    def broken_fsync(fd: int) -> None:
        raise OSError("I/O error (simulated)")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="simulated"):
        atomic_write_text(target, "new")
    assert target.read_bytes() == b"old"
    assert tmp_leftovers(tmp_path) == []


def test_atomic_write_keeps_permissions_and_creates_dirs(tmp_path: Path) -> None:
    """An existing file keeps its permission bits; a new one (in a new directory) gets
    0o666 less the umask, like any file the user's editor would create."""
    existing = tmp_path / "private.json"
    existing.write_text("{}")
    existing.chmod(0o600)
    atomic_write_text(existing, '{"x": 1}\n')
    assert stat.S_IMODE(existing.stat().st_mode) == 0o600
    assert existing.read_text() == '{"x": 1}\n'

    old_umask = os.umask(0o027)
    try:
        fresh = tmp_path / "a" / "b" / "new.json"
        atomic_write_text(fresh, "{}\n")
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o640

    explicit = tmp_path / "explicit.json"
    atomic_write_text(explicit, "{}\n", mode=0o604)
    assert stat.S_IMODE(explicit.stat().st_mode) == 0o604


def test_atomic_write_through_symlink_keeps_the_link(tmp_path: Path) -> None:
    """A config symlinked into a dotfiles repo stays a symlink; its target gets the new text."""
    real = tmp_path / "dotfiles" / "mcp.json"
    real.parent.mkdir()
    real.write_text("{}\n")
    link = tmp_path / ".mcp.json"
    link.symlink_to(real)
    ConfigStore(link).add_server("git", {"command": "uvx"})
    assert link.is_symlink()
    assert json.loads(real.read_text())["mcpServers"] == {"git": {"command": "uvx"}}


def test_read_json_errors_name_file_and_position(tmp_path: Path) -> None:
    """Bad JSON is a ValueError naming the file, line and column; missing is None."""
    assert read_json(tmp_path / "missing.json") is None
    bad = tmp_path / "bad.json"
    bad.write_text('{\n  "a": 1,\n  "b": \n}\n')
    with pytest.raises(ValueError, match=r"bad\.json:4:1: invalid JSON") as info:
        read_json(bad)
    assert isinstance(info.value, JSONFileError)
    assert (info.value.line, info.value.column) == (4, 1)
    bad.write_text("[1, 2]")
    with pytest.raises(ValueError, match="expected a JSON object at the top level, found an array"):
        read_json(bad)
    bad.write_text('{"a": NaN}')
    with pytest.raises(ValueError, match="NaN is not a JSON number"):
        read_json(bad)


def test_dump_json_format() -> None:
    """2-space indent, key order kept, non-ASCII kept, trailing newline."""
    text = dump_json({"z": 1, "a": {"ü": ["x"]}, "e": {}})
    assert text == '{\n  "z": 1,\n  "a": {\n    "ü": [\n      "x"\n    ]\n  },\n  "e": {}\n}\n'


LOCK_HOLDER = """
import sys
from pathlib import Path
from mcpvisor._atomic import locked
with locked(Path(sys.argv[1]), remove=True):
    print("locked", flush=True)
    sys.stdin.readline()
print("released", flush=True)
"""


def test_lock_times_out_with_clear_error(tmp_path: Path, spawn: Any) -> None:
    """While another process holds the lock, an edit fails after its timeout with an error
    naming the lock file, and the file is untouched; once released the edit goes through."""
    target = tmp_path / ".mcp.json"
    target.write_text(CLAUDE_CODE_MCP_JSON)
    holder = spawn(LOCK_HOLDER, str(target))
    expect_line(holder, "locked")

    store = ConfigStore(target, lock_timeout=0.2)
    with pytest.raises(LockTimeout) as info:
        store.add_server("git", {"command": "uvx"})
    assert str(tmp_path / ".mcp.json.lock") in str(info.value)
    assert info.value.lock_path == tmp_path / ".mcp.json.lock"
    assert target.read_text() == CLAUDE_CODE_MCP_JSON

    assert holder.stdin is not None
    holder.stdin.write("\n")
    holder.stdin.flush()
    expect_line(holder, "released")
    wait_ok(holder)
    store.add_server("git", {"command": "uvx"})
    assert "git" in store.server_names()


def test_lock_of_a_killed_process_is_released(tmp_path: Path, spawn: Any) -> None:
    """A process killed while holding the lock does not block the next writer (an OS lock,
    not a stale marker file)."""
    target = tmp_path / "cfg.json"
    holder = spawn(LOCK_HOLDER, str(target))
    expect_line(holder, "locked")
    holder.kill()
    holder.communicate(timeout=PROCESS_TIMEOUT_S)
    with locked(target, timeout=5.0):
        pass


ADD_SERVERS = """
import sys
from pathlib import Path
from mcpvisor.store import ConfigStore
store = ConfigStore(Path(sys.argv[1]), lock_timeout=30.0)
tag, count = sys.argv[2], int(sys.argv[3])
print("ready", flush=True)
sys.stdin.readline()
for i in range(count):
    store.add_server(f"{tag}-{i}", {"command": "echo", "args": [tag, str(i)]})
"""


def test_two_processes_adding_servers_both_land(tmp_path: Path, spawn: Any) -> None:
    """Two processes each adding 20 servers at once: all 40 are in the file, each process's
    in its own order, and the foreign key survives. A lost update (read outside the lock)
    shows as fewer than 40."""
    target = tmp_path / "mcpvisor.json"
    target.write_text(dump_json({"$schema": "https://example.invalid/schema.json", "mcpServers": {}}))
    procs = [spawn(ADD_SERVERS, str(target), tag, str(SERVERS_PER_PROCESS)) for tag in ("a", "b")]
    for proc in procs:
        expect_line(proc, "ready")
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    for proc in procs:
        wait_ok(proc)

    doc = json.loads(target.read_text())
    names = list(doc["mcpServers"])
    assert len(names) == 2 * SERVERS_PER_PROCESS
    for tag in ("a", "b"):
        assert [n for n in names if n.startswith(f"{tag}-")] == [
            f"{tag}-{i}" for i in range(SERVERS_PER_PROCESS)
        ]
    assert doc["$schema"] == "https://example.invalid/schema.json"
    assert tmp_leftovers(tmp_path) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mcpvisor.json"]  # no lock file either


# --- the config store ------------------------------------------------------------------


def test_add_remove_enable_disable(tmp_path: Path) -> None:
    """The CLI's edits do what they say, and the file stays readable JSON."""
    store = ConfigStore(tmp_path / "cfg" / "mcpvisor.json")
    assert store.read() == {}
    assert store.server_names() == []
    store.add_server("git", {"command": "uvx", "args": ["mcp-server-git"]})
    store.add_server("docs", {"type": "http", "url": "https://example.invalid/mcp"})
    assert store.server_names() == ["git", "docs"]

    assert store.set_enabled("git", False) is True
    assert store.read()["mcpServers"]["git"] == {
        "command": "uvx",
        "args": ["mcp-server-git"],
        "enabled": False,
    }
    assert store.set_enabled("git", False) is False
    assert store.set_enabled("git", True) is True
    assert store.read()["mcpServers"]["git"] == {"command": "uvx", "args": ["mcp-server-git"]}
    assert store.set_enabled("git", True) is False

    removed = store.remove_server("git")
    assert removed == {"command": "uvx", "args": ["mcp-server-git"]}
    assert store.server_names() == ["docs"]
    text = store.path.read_text()
    assert text == dump_json({"mcpServers": {"docs": {"type": "http", "url": "https://example.invalid/mcp"}}})


def test_enable_drops_foreign_disabled_key_and_keeps_explicit_true(tmp_path: Path) -> None:
    """A Cline-style "disabled" key never contradicts ours; an explicit "enabled": true is left alone."""
    path = tmp_path / "cfg.json"
    path.write_text(
        dump_json(
            {"mcpServers": {"a": {"command": "x", "disabled": True}, "b": {"command": "y", "enabled": True}}}
        )
    )
    store = ConfigStore(path)
    assert store.set_enabled("a", True) is True
    assert store.read()["mcpServers"]["a"] == {"command": "x"}
    before = path.read_bytes()
    assert store.set_enabled("b", True) is False
    assert path.read_bytes() == before
    assert store.set_enabled("b", False) is True
    assert store.read()["mcpServers"]["b"] == {"command": "y", "enabled": False}


def test_duplicate_refused_unless_force(tmp_path: Path) -> None:
    """Adding an existing name fails and changes nothing; with force it replaces in place."""
    store = ConfigStore(tmp_path / "cfg.json")
    store.add_server("a", {"command": "one"})
    store.add_server("b", {"command": "two"})
    before = store.path.read_bytes()
    with pytest.raises(DuplicateServer, match="'a' already exists") as info:
        store.add_server("a", {"command": "other"})
    assert info.value.name == "a"
    assert isinstance(info.value, StoreError)
    assert store.path.read_bytes() == before
    store.add_server("a", {"command": "other"}, force=True)
    assert store.read()["mcpServers"] == {"a": {"command": "other"}, "b": {"command": "two"}}
    assert store.server_names() == ["a", "b"]


def test_unknown_server_offers_close_matches(tmp_path: Path) -> None:
    """A typo gets the close names, and the error lists what exists."""
    store = ConfigStore(tmp_path / "cfg.json")
    for name in ("github", "gitlab", "filesystem"):
        store.add_server(name, {"command": "x"})
    with pytest.raises(UnknownServer, match="did you mean 'github'") as info:
        store.remove_server("githb")
    assert info.value.name == "githb"
    assert info.value.known == ["github", "gitlab", "filesystem"]
    assert info.value.suggestions[0] == "github"
    with pytest.raises(UnknownServer) as info:
        store.set_enabled("zzz", False)
    assert info.value.suggestions == []
    assert "github, gitlab, filesystem" in str(info.value)
    with pytest.raises(UnknownServer, match="no servers are configured"):
        ConfigStore(tmp_path / "empty.json").remove_server("x")


def test_invalid_document_is_never_written(tmp_path: Path) -> None:
    """When the validator rejects the edited document, InvalidConfig wraps its error and the
    file keeps its bytes; the validator sees the whole document and the path."""
    path = tmp_path / "cfg.json"
    path.write_text(CLAUDE_CODE_MCP_JSON)
    seen: list[tuple[dict[str, Any], Path]] = []

    def validate(doc: dict[str, Any], where: Path) -> None:
        seen.append((json.loads(json.dumps(doc)), where))
        for name, entry in doc["mcpServers"].items():
            if "command" not in entry and "url" not in entry:
                raise ValueError(f"server {name!r}: needs command or url")

    store = ConfigStore(path, validate=validate)
    with pytest.raises(InvalidConfig, match="needs command or url") as info:
        store.add_server("broken", {"args": ["x"]})
    assert isinstance(info.value.__cause__, ValueError)
    assert info.value.error is info.value.__cause__
    assert path.read_text() == CLAUDE_CODE_MCP_JSON
    assert seen[-1][1] == path
    assert "broken" in seen[-1][0]["mcpServers"]

    store.add_server("ok", {"command": "x"})
    assert store.server_names() == ["context7", "docs", "ok"]


def test_exception_inside_edit_writes_nothing(tmp_path: Path) -> None:
    """An edit block that raises leaves the file as it was."""
    path = tmp_path / "cfg.json"
    path.write_text(CLAUDE_CODE_MCP_JSON)
    store = ConfigStore(path)

    def abandoned_edit() -> None:
        with store.edit() as doc:
            doc["mcpServers"].clear()
            raise RuntimeError("changed my mind")

    with pytest.raises(RuntimeError, match="changed my mind"):
        abandoned_edit()
    assert path.read_text() == CLAUDE_CODE_MCP_JSON


def test_store_atomicity_on_failed_replace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failing rename during add_server leaves the config byte-identical, with its
    permissions, and nothing next to it (no temporary file, no lock file)."""
    path = tmp_path / ".mcp.json"
    path.write_text(CLAUDE_CODE_MCP_JSON)
    path.chmod(0o640)

    def broken_replace(src: object, dst: object) -> None:
        raise OSError("simulated")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="simulated"):
        ConfigStore(path).add_server("git", {"command": "uvx"})
    assert path.read_text() == CLAUDE_CODE_MCP_JSON
    assert sorted(p.name for p in tmp_path.iterdir()) == [".mcp.json"]
    monkeypatch.undo()

    ConfigStore(path).add_server("git", {"command": "uvx"})
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


def test_foreign_keys_and_order_preserved(tmp_path: Path) -> None:
    """Keys mcpvisor does not own, other servers' entries and their key order survive an
    edit; the untouched parts of the text are identical."""
    original: dict[str, Any] = {
        "$schema": "https://example.invalid/schema.json",
        "comment": "mine",
        "mcpServers": {
            "zeta": {
                "url": "https://z.invalid",
                "type": "http",
                "x-owner": "team-z",
                "headers": {"B": "1", "A": "2"},
            },
            "alpha": {"command": "a", "env": {"Z": "1", "A": "2"}, "futureKey": [1, {"k": None}]},
        },
        "toolsets": {"dev": ["zeta.x", "alpha.y"]},
        "settings": {"exposure": "menu", "someday": True},
        "trailing": "ü ✓",
    }
    path = tmp_path / "mcpvisor.json"
    path.write_text(dump_json(original))
    store = ConfigStore(path)
    store.add_server("new", {"command": "n"})

    text = path.read_text()
    expected = json.loads(json.dumps(original))
    expected["mcpServers"]["new"] = {"command": "n"}
    assert text == dump_json(expected)
    for key in ("zeta", "alpha"):
        block = json.dumps({key: original["mcpServers"][key]}, indent=2, ensure_ascii=False)[2:-2]
        assert block.replace("\n", "\n  ") in text
    assert list(json.loads(text)) == list(original)

    store.set_enabled("zeta", False)
    assert list(store.read()["mcpServers"]["zeta"]) == ["url", "type", "x-owner", "headers", "enabled"]
    store.remove_server("new")
    store.set_enabled("zeta", True)
    assert path.read_text() == dump_json(original)


def test_claude_code_file_round_trips_byte_identically(tmp_path: Path) -> None:
    """A .mcp.json written by Claude Code is not rewritten by edits that change nothing:
    same bytes and same inode (no write at all). Undoing a change restores the text, apart
    from the trailing newline mcpvisor adds."""
    path = tmp_path / ".mcp.json"
    path.write_text(CLAUDE_CODE_MCP_JSON)
    inode = path.stat().st_ino
    store = ConfigStore(path)

    with store.edit():
        pass
    with store.edit() as doc:
        doc["mcpServers"]["docs"]["headers"] = {"Authorization": "Bearer ${DOCS_TOKEN}"}
    assert store.set_enabled("context7", True) is False
    assert store.server_names() == ["context7", "docs"]
    assert path.read_text() == CLAUDE_CODE_MCP_JSON
    assert path.stat().st_ino == inode

    store.add_server("tmp", {"command": "x"})
    store.remove_server("tmp")
    assert path.read_text() == CLAUDE_CODE_MCP_JSON + "\n"


def test_file_indentation_is_kept(tmp_path: Path) -> None:
    """A file indented with 4 spaces (or tabs) stays that way after an edit."""
    for indent in (4, "\t"):
        path = tmp_path / f"cfg{indent!r}.json"
        path.write_text(json.dumps({"mcpServers": {"a": {"command": "x"}}}, indent=indent) + "\n")
        ConfigStore(path).add_server("b", {"command": "y"})
        assert (
            path.read_text()
            == json.dumps({"mcpServers": {"a": {"command": "x"}, "b": {"command": "y"}}}, indent=indent)
            + "\n"
        )


def test_malformed_file_is_reported_and_left_alone(tmp_path: Path) -> None:
    """A config that is not JSON, or whose mcpServers is not an object, is an error naming
    the file; nothing is written."""
    path = tmp_path / ".mcp.json"
    path.write_text('{"mcpServers": {"a": {}},}')
    store = ConfigStore(path)
    with pytest.raises(MalformedConfig, match=r"\.mcp\.json:1:26: invalid JSON"):
        store.add_server("b", {"command": "y"})
    with pytest.raises(MalformedConfig):
        store.read()
    assert path.read_text() == '{"mcpServers": {"a": {}},}'

    path.write_text('{"mcpServers": []}')
    with pytest.raises(MalformedConfig, match='"mcpServers" must be an object'):
        store.add_server("b", {"command": "y"})
    assert path.read_text() == '{"mcpServers": []}'


def test_entry_mapping_is_copied(tmp_path: Path) -> None:
    """add_server takes any Mapping (tuples become arrays) and keeps no reference to it."""
    from types import MappingProxyType

    entry = {"command": "x", "args": ("a", "b"), "env": MappingProxyType({"K": "V"})}
    store = ConfigStore(tmp_path / "cfg.json")
    store.add_server("s", MappingProxyType(entry))
    assert store.read()["mcpServers"]["s"] == {"command": "x", "args": ["a", "b"], "env": {"K": "V"}}
