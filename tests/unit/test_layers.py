"""The layering DESIGN.md's "Layout" fixes: `actors/` never imports `supervisor/`, and
the sans-IO cores in `mcpvisor.actors.core` load no trio."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _imported_modules(path: Path) -> list[tuple[int, str]]:
    """Every module an ``import`` or ``from ... import`` in ``path`` names, with its line
    (including imports inside functions and ``if TYPE_CHECKING:`` blocks)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
    return found


def test_actors_never_import_supervisor() -> None:
    """A module under actors/ that imports supervisor (at any depth) fails this test."""
    files = sorted((ROOT / "actors").rglob("*.py"))
    assert len(files) > 10, "the scan found the actors package"
    offenders = [f"{path.relative_to(ROOT)}:{line}: {module}"
                 for path in files
                 for line, module in _imported_modules(path)
                 if module == "supervisor" or module.startswith("mcpvisor.")]
    assert offenders == []


def test_the_scan_sees_a_supervisor_import(tmp_path: Path) -> None:
    """The scan above is not blind: it finds an import hidden in a function."""
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from supervisor.state import StateStore\n", encoding="utf-8")
    assert _imported_modules(probe) == [(2, "mcpvisor.state")]


def test_importing_the_sans_io_cores_loads_no_trio() -> None:
    """``import actors.core`` and every module in it, in a fresh interpreter, leaves trio
    (and the SDK, filelock, platformdirs) unloaded."""
    modules = sorted(f"mcpvisor.actors.core.{p.stem}" for p in (ROOT / "actors" / "core").glob("*.py")
                     if p.stem != "__init__")
    assert "mcpvisor.actors.core.registry" in modules
    code = ("import sys, importlib\n"
            "import actors.core\n"
            f"for m in {modules!r}: importlib.import_module(m)\n"
            "heavy = ('trio', 'anyio', 'mcp', 'filelock', 'platformdirs')\n"
            "loaded = sorted(n for n in heavy if n in sys.modules)\n"
            "assert loaded == [], loaded\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
