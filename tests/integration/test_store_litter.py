"""Config edits leave nothing in the user's folder but the config itself (issue 15).

The lock file is deleted when an edit ends, whether the edit wrote, changed nothing or
failed; a temporary file left by a writer killed mid-write is deleted by the next edit;
files that only look alike are kept.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mcpvisor._atomic import locked
from mcpvisor.store import ConfigStore, DuplicateServer, InvalidConfig


def names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def reject_all(doc: dict[str, object], path: Path) -> None:
    raise ValueError("rejected")


def test_no_lock_file_after_any_edit(tmp_path: Path) -> None:
    path = tmp_path / "mcpvisor.json"
    store = ConfigStore(path)
    store.add_server("a", {"command": "x"})  # creates the file
    assert names(tmp_path) == ["mcpvisor.json"]
    store.set_enabled("a", True)  # changes nothing, writes nothing
    assert names(tmp_path) == ["mcpvisor.json"]
    with pytest.raises(DuplicateServer):
        store.add_server("a", {"command": "y"})
    with pytest.raises(InvalidConfig):
        ConfigStore(path, validate=reject_all).add_server("b", {"command": "y"})
    assert names(tmp_path) == ["mcpvisor.json"]
    assert list(json.loads(path.read_text())["mcpServers"]) == ["a"]


def test_the_next_edit_removes_a_killed_writers_temp_file(tmp_path: Path) -> None:
    """A writer killed between creating its temp file and renaming it leaves
    ``.mcpvisor.json.<8 chars>.tmp``; the next edit deletes it, and nothing else."""
    path = tmp_path / "mcpvisor.json"
    path.write_text('{"mcpServers": {}}\n')
    left = tmp_path / ".mcpvisor.json.k3_x9q0z.tmp"
    left.write_text('{"mcpServers": {"half')
    kept = [
        tmp_path / ".other.json.k3_x9q0z.tmp",  # another file's temp: not ours to judge
        tmp_path / ".mcpvisor.json.backup.tmp",  # the user's own file
        tmp_path / "mcpvisor.json.k3_x9q0z.tmp",
    ]
    for other in kept:
        other.write_text("mine")
    ConfigStore(path).add_server("a", {"command": "x"})
    assert not left.exists()
    assert names(tmp_path) == sorted(["mcpvisor.json", *(p.name for p in kept)])


def test_a_removed_lock_file_still_excludes(tmp_path: Path) -> None:
    """Holding the lock, the next holder cannot take it (a deleted lock file is not a free
    lock); after release it can, and the file is gone again."""
    from mcpvisor._atomic import LockTimeout

    path = tmp_path / "cfg.json"
    with locked(path, remove=True):
        assert (tmp_path / "cfg.json.lock").exists()
        with pytest.raises(LockTimeout):
            ConfigStore(path, lock_timeout=0.1).add_server("a", {"command": "x"})
    assert names(tmp_path) == []
    ConfigStore(path).add_server("a", {"command": "x"})
    assert names(tmp_path) == ["cfg.json"]
