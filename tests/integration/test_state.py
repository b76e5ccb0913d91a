"""The state directory: toolsets, the equipped toolset and annotations in ``state.json``.

Invariants: every update is a whole read-modify-write under the lock (two proxies never
lose each other's toolsets), a failure writes nothing, a corrupt file is reported and
never reset, and keys from a newer mcpvisor survive. Tests that start processes use real
OS processes and kill whatever is left in ``finally``.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import platformdirs
import pytest

from mcpvisor._atomic import LockTimeout, dump_json
from mcpvisor.actors.core.model import Note, PinnedSchema, SavedState, ToolEntry, Toolset
from mcpvisor.settings import state_dir
from mcpvisor.state import (
    CorruptState,
    StateError,
    StateStore,
    ToolsetExists,
    UnknownToolset,
    now_iso,
)

PROCESS_TIMEOUT_S = 60.0
"""Bound on any helper process: generous for a loaded CI box, far under pytest-timeout."""

TOOLSETS_PER_PROCESS = 20

T0 = "2026-11-22T10:00:00Z"
T1 = "2026-11-22T11:00:00Z"


def make_toolset(name: str, *tools: str, created: str = T0, updated: str = T0) -> Toolset:
    """A toolset of plain entries, the first one with pinned schemas."""
    entries = tuple(
        ToolEntry(
            namespaced_name=tool,
            ref_id=f"ref-{tool}",
            alias=None,
            pinned=PinnedSchema(
                description=f"{tool} does things",
                input_schema={"type": "object", "properties": {"short": {"type": "boolean"}}},
                output_schema=None,
            )
            if i == 0
            else None,
        )
        for i, tool in enumerate(tools)
    )
    return Toolset(
        name=name, tools=entries, description=f"{name} tools", created_at=created, updated_at=updated
    )




def expect_line(proc: subprocess.Popen[str], line: str) -> None:
    """Read the helper's next stdout line."""
    assert proc.stdout is not None
    got = proc.stdout.readline().strip()
    assert got == line, f"expected {line!r}, got {got!r}; stderr: {proc.stderr.read() if proc.stderr else ''}"


def release(proc: subprocess.Popen[str]) -> None:
    """Send the helper the line it waits for."""
    assert proc.stdin is not None
    proc.stdin.write("go\n")
    proc.stdin.flush()


def wait_ok(proc: subprocess.Popen[str]) -> None:
    """Wait (bounded) for a helper to exit 0; show its stderr if it did not."""
    _, err = proc.communicate(timeout=PROCESS_TIMEOUT_S)
    assert proc.returncode == 0, err


# --- location --------------------------------------------------------------------------


def test_state_dir_lookup_order(tmp_path: Path) -> None:
    """--state-dir beats $MCPVISOR_STATE_DIR beats the platform's user state dir; empty
    values count as unset and ~ is expanded."""
    env = {"MCPVISOR_STATE_DIR": str(tmp_path / "from-env")}
    assert state_dir(tmp_path / "explicit", env=env) == tmp_path / "explicit"
    assert state_dir(str(tmp_path / "explicit"), env=env) == tmp_path / "explicit"
    assert state_dir(None, env=env) == tmp_path / "from-env"
    assert state_dir("", env=env) == tmp_path / "from-env"
    default = Path(platformdirs.user_state_dir("mcpvisor", appauthor=False))
    assert state_dir(None, env={}) == default
    assert state_dir(None, env={"MCPVISOR_STATE_DIR": ""}) == default
    assert state_dir("~/st", env={}) == Path.home() / "st"
    if sys.platform.startswith("linux") and "XDG_STATE_HOME" not in os.environ:
        assert default == Path.home() / ".local" / "state" / "mcpvisor"


def test_state_dir_defaults_to_process_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without env=, $MCPVISOR_STATE_DIR is read from os.environ."""
    monkeypatch.setenv("MCPVISOR_STATE_DIR", str(tmp_path))
    assert state_dir() == tmp_path


def test_now_iso_format() -> None:
    """UTC, seconds precision, Z suffix."""
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", now_iso())


# --- round trips -----------------------------------------------------------------------


def test_missing_file_is_empty_state(tmp_path: Path) -> None:
    """A fresh directory (even one that does not exist) reads as an empty state, unwritten."""
    store = StateStore(tmp_path / "nope")
    assert store.path == tmp_path / "nope" / "state.json"
    assert store.load() == SavedState(equipped=None, toolsets={}, annotations={})
    assert not (tmp_path / "nope").exists()


def test_save_delete_equip_notes_round_trip(tmp_path: Path) -> None:
    """What the conveniences save is what load() returns, in the documented JSON form."""
    store = StateStore(tmp_path / "state")
    dev = make_toolset("dev", "git.status", "fs.read_file")
    store.save_toolset(dev)
    store.save_toolset(make_toolset("docs", "context7.resolve-library-id"))
    store.set_equipped("dev")
    store.add_notes("dev", "git.status", [Note("usage", "always pass --short"), Note("why", "speed")])
    after = store.add_notes("dev", "git.status", [Note("usage", "pass --short"), Note("extra", "x")])

    loaded = store.load()
    assert loaded == after
    assert loaded.equipped == "dev"
    assert list(loaded.toolsets) == ["dev", "docs"]
    assert loaded.toolsets["dev"] == dev
    assert loaded.annotations["dev"]["git.status"] == (
        Note("usage", "pass --short"),
        Note("why", "speed"),
        Note("extra", "x"),
    )

    doc = json.loads(store.path.read_text())
    assert doc["version"] == 1
    assert doc["toolsets"]["dev"] == {
        "description": "dev tools",
        "createdAt": T0,
        "updatedAt": T0,
        "tools": [
            {
                "namespacedName": "git.status",
                "refId": "ref-git.status",
                "alias": None,
                "pinned": {
                    "description": "git.status does things",
                    "inputSchema": {"type": "object", "properties": {"short": {"type": "boolean"}}},
                    "outputSchema": None,
                },
            },
            {"namespacedName": "fs.read_file", "refId": "ref-fs.read_file", "alias": None, "pinned": None},
        ],
    }
    assert store.path.read_text() == dump_json(doc)

    store.set_equipped(None)
    assert store.load().equipped is None


def test_save_existing_refused_unless_replace(tmp_path: Path) -> None:
    """Saving over a toolset needs replace=True; the replacement keeps its place and createdAt."""
    store = StateStore(tmp_path)
    store.save_toolset(make_toolset("a", "x.one"))
    store.save_toolset(make_toolset("b", "x.two"))
    before = store.path.read_bytes()
    with pytest.raises(ToolsetExists, match="'a' already exists") as info:
        store.save_toolset(make_toolset("a", "x.three"))
    assert info.value.name == "a"
    assert store.path.read_bytes() == before

    state = store.save_toolset(make_toolset("a", "x.three", created=T1, updated=T1), replace=True)
    assert list(state.toolsets) == ["a", "b"]
    assert state.toolsets["a"].created_at == T0
    assert state.toolsets["a"].updated_at == T1
    assert [t.namespaced_name for t in store.load().toolsets["a"].tools] == ["x.three"]


def test_delete_clears_equipped_and_annotations(tmp_path: Path) -> None:
    """Deleting the equipped toolset unequips it and drops its notes; others keep theirs."""
    store = StateStore(tmp_path)
    store.save_toolset(make_toolset("dev", "git.status"))
    store.save_toolset(make_toolset("ops", "k8s.get"))
    store.set_equipped("dev")
    store.add_notes("dev", "git.status", [Note("usage", "short")])
    store.add_notes("ops", "k8s.get", [Note("usage", "-o yaml")])

    state = store.delete_toolset("dev")
    assert state == store.load()
    assert state.equipped is None
    assert list(state.toolsets) == ["ops"]
    assert "dev" not in state.annotations
    assert state.annotations["ops"]["k8s.get"] == (Note("usage", "-o yaml"),)

    store.set_equipped("ops")
    store.delete_toolset("ops")
    assert store.load() == SavedState(equipped=None, toolsets={}, annotations={})


def test_delete_unknown_lists_known(tmp_path: Path) -> None:
    """Deleting a toolset that does not exist says which do, and writes nothing."""
    store = StateStore(tmp_path)
    store.save_toolset(make_toolset("zeta", "a.b"))
    store.save_toolset(make_toolset("alpha", "a.b"))
    before = store.path.read_bytes()
    with pytest.raises(UnknownToolset, match="saved toolsets: alpha, zeta") as info:
        store.delete_toolset("beta")
    assert (info.value.name, info.value.known) == ("beta", ["alpha", "zeta"])
    assert isinstance(info.value, StateError)
    assert store.path.read_bytes() == before


def test_read_only_toolsets_are_not_stored(tmp_path: Path) -> None:
    """A toolset declared in the config file (read_only) is refused, by save and by update."""
    store = StateStore(tmp_path)
    config_toolset = Toolset("cfg", (), None, T0, T0, read_only=True)
    with pytest.raises(StateError, match="read-only"):
        store.save_toolset(config_toolset)
    with pytest.raises(StateError, match="read-only"):
        store.update(lambda s: SavedState(s.equipped, {"cfg": config_toolset}, s.annotations))
    assert not store.path.exists()
    # ...but it may be equipped and annotated: those live here.
    store.set_equipped("cfg")
    store.add_notes("cfg", "git.status", [Note("n", "v")])
    assert store.load().equipped == "cfg"


def test_failing_update_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """If fn raises, or the rename fails, state.json keeps its bytes, its permissions, and
    no temporary file is left."""
    store = StateStore(tmp_path)
    store.save_toolset(make_toolset("dev", "git.status"))
    store.path.chmod(0o600)
    before = store.path.read_bytes()

    def boom(state: SavedState) -> SavedState:
        raise RuntimeError("halfway")

    with pytest.raises(RuntimeError, match="halfway"):
        store.update(boom)
    assert store.path.read_bytes() == before

    def broken_replace(src: object, dst: object) -> None:
        raise OSError("simulated")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="simulated"):
        store.save_toolset(make_toolset("ops", "k8s.get"))
    monkeypatch.undo()
    assert store.path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json", "state.json.lock"]

    store.save_toolset(make_toolset("ops", "k8s.get"))
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600


def test_unchanged_state_is_not_rewritten(tmp_path: Path) -> None:
    """An update that changes nothing leaves the file alone: same inode, same bytes."""
    store = StateStore(tmp_path)
    store.save_toolset(make_toolset("dev", "git.status"))
    store.add_notes("dev", "git.status", [Note("usage", "short")])
    before = (store.path.stat().st_ino, store.path.read_bytes())
    store.update(lambda s: s)
    store.set_equipped(None)
    store.add_notes("dev", "git.status", [Note("usage", "short")])
    assert (store.path.stat().st_ino, store.path.read_bytes()) == before


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('{"version": 1, "toolsets": {', "invalid JSON"),
        ("", "empty"),
        ('["not", "an", "object"]', "found an array"),
        ('{"version": 1, "toolsets": []}', "toolsets must be an object"),
        ('{"toolsets": {"dev": {"createdAt": "x", "updatedAt": "x"}}}', "toolsets.dev.tools is missing"),
        (
            '{"toolsets": {"dev": {"createdAt": "x", "updatedAt": "x", "tools": [{"refId": "r"}]}}}',
            r"toolsets.dev.tools\[0\].namespacedName is missing",
        ),
        ('{"equipped": 3}', "equipped must be a string or null"),
        ('{"version": true}', "version must be an integer"),
        (
            '{"annotations": {"dev": {"git.status": [{"name": "n"}]}}}',
            r"annotations.dev.git.status\[0\].note",
        ),
    ],
)
def test_corrupt_state_raises_and_is_left_in_place(tmp_path: Path, text: str, problem: str) -> None:
    """A state.json that cannot be read raises StateError naming the file and the problem,
    from load() and from every update (which then calls nothing and writes nothing): the
    user's toolsets are never silently reset."""
    store = StateStore(tmp_path)
    store.path.write_text(text)
    with pytest.raises(StateError, match=problem) as info:
        store.load()
    assert isinstance(info.value, CorruptState)
    assert str(store.path) in str(info.value)
    called = []
    with pytest.raises(CorruptState):
        store.update(lambda s: called.append(s) or s)  # type: ignore[func-returns-value]
    with pytest.raises(CorruptState):
        store.save_toolset(make_toolset("dev", "git.status"))
    assert called == []
    assert store.path.read_text() == text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json", "state.json.lock"]


def test_unknown_keys_from_a_newer_version_are_preserved(tmp_path: Path) -> None:
    """Keys this version does not know, at every level, survive an update in place."""
    newer = {
        "version": 2,
        "futureTop": {"a": 1},
        "equipped": None,
        "toolsets": {
            "dev": {
                "description": "d",
                "icon": "wrench",
                "createdAt": T0,
                "updatedAt": T0,
                "tools": [
                    {
                        "namespacedName": "git.status",
                        "refId": "r1",
                        "alias": None,
                        "weight": 3,
                        "pinned": {"description": None, "inputSchema": {}, "outputSchema": None, "hash": "h"},
                    }
                ],
            }
        },
        "annotations": {"dev": {"git.status": [{"name": "usage", "note": "short", "author": "me"}]}},
        "futureBottom": [1, 2],
    }
    store = StateStore(tmp_path)
    store.path.write_text(dump_json(newer))
    store.set_equipped("dev")
    store.add_notes("dev", "git.status", [Note("usage", "shorter"), Note("more", "x")])
    store.save_toolset(make_toolset("ops", "k8s.get"))

    doc = json.loads(store.path.read_text())
    assert list(doc) == ["version", "futureTop", "equipped", "toolsets", "annotations", "futureBottom"]
    assert doc["version"] == 2
    assert doc["futureTop"] == {"a": 1}
    assert doc["futureBottom"] == [1, 2]
    assert doc["equipped"] == "dev"
    dev = doc["toolsets"]["dev"]
    assert dev["icon"] == "wrench"
    assert list(dev) == ["description", "icon", "createdAt", "updatedAt", "tools"]
    assert dev["tools"][0]["weight"] == 3
    assert dev["tools"][0]["pinned"]["hash"] == "h"
    assert doc["annotations"]["dev"]["git.status"] == [
        {"name": "usage", "note": "shorter", "author": "me"},
        {"name": "more", "note": "x"},
    ]


ADD_TOOLSETS = """
import sys
from pathlib import Path
from mcpvisor.actors.core.model import Note, ToolEntry, Toolset
from mcpvisor.state import StateStore
store = StateStore(Path(sys.argv[1]), lock_timeout=30.0)
tag, count = sys.argv[2], int(sys.argv[3])
print("ready", flush=True)
sys.stdin.readline()
for i in range(count):
    name = f"{tag}-{i}"
    tool = ToolEntry(f"{tag}.tool{i}", None, None, None)
    store.save_toolset(Toolset(name, (tool,), None, "2026-11-22T10:00:00Z", "2026-11-22T10:00:00Z"))
    store.add_notes(name, tool.namespaced_name, [Note("by", tag)])
"""


def test_two_processes_saving_toolsets_both_land(tmp_path: Path, spawn: Any) -> None:
    """Two proxies sharing a state directory each save 20 toolsets at once: all 40 land,
    with their annotations. A lost update (read outside the lock) shows as fewer."""
    procs = [spawn(ADD_TOOLSETS, str(tmp_path), tag, str(TOOLSETS_PER_PROCESS)) for tag in ("a", "b")]
    for proc in procs:
        expect_line(proc, "ready")
    for proc in procs:
        release(proc)
    for proc in procs:
        wait_ok(proc)

    state = StateStore(tmp_path).load()
    assert len(state.toolsets) == 2 * TOOLSETS_PER_PROCESS
    assert len(state.annotations) == 2 * TOOLSETS_PER_PROCESS
    for tag in ("a", "b"):
        assert [n for n in state.toolsets if n.startswith(f"{tag}-")] == [
            f"{tag}-{i}" for i in range(TOOLSETS_PER_PROCESS)
        ]
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


LOCK_HOLDER = """
import sys
from pathlib import Path
from mcpvisor._atomic import locked
with locked(Path(sys.argv[1]) / "state.json"):
    print("locked", flush=True)
    sys.stdin.readline()
"""


def test_update_times_out_on_a_held_lock(tmp_path: Path, spawn: Any) -> None:
    """While another process holds the state lock, an update fails after its timeout with
    an error naming the lock file, and nothing is written."""
    holder = spawn(LOCK_HOLDER, str(tmp_path))
    expect_line(holder, "locked")
    store = StateStore(tmp_path, lock_timeout=0.2)
    with pytest.raises(LockTimeout, match=re.escape(str(tmp_path / "state.json.lock"))):
        store.set_equipped("dev")
    assert not store.path.exists()
    release(holder)
    wait_ok(holder)
    store.set_equipped("dev")
    assert store.load().equipped == "dev"
