"""The floor plan: one import name, rooms that only import downwards, no import circles.

* `mcpvisor.actors` (the runtime) imports nothing of the package above it;
* `mcpvisor.actors.core` (the sans-IO cores) loads no trio, SDK, filelock or platformdirs;
* nothing but `mcpvisor.bench` itself imports the benchmark;
* no two modules import each other, directly or round a longer circle, at run time
  (imports under ``if TYPE_CHECKING:`` are for the type checker only and do not count;
  imports inside functions do: they only hide a circle).
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ROOMS = {"supervisor": "mcpvisor", "actors": "mcpvisor.actors", "bench": "mcpvisor.bench"}


def _modules() -> dict[str, Path]:
    """Every module of the installed package, by its dotted name, from the rooms on disk."""
    found: dict[str, Path] = {}
    for room, package in ROOMS.items():
        for path in sorted((ROOT / room).rglob("*.py")):
            parts = path.relative_to(ROOT / room).with_suffix("").parts
            if any(p.startswith(".") for p in parts):
                continue  # not the package: bench/.peers holds the peers' own venvs (gitignored)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join((package, *parts))] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _runtime_imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """The import statements that run (anywhere, functions included), skipping
    ``if TYPE_CHECKING:`` bodies."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                yield from _runtime_imports(ast.Module(body=[child], type_ignores=[]))
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        yield from _runtime_imports(node)


def _imports(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The package's own modules ``module`` imports at run time."""
    is_package = path.name == "__init__.py"
    out: set[str] = set()
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in _runtime_imports(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                origin = ".".join([*base, node.module] if node.module else base)
            else:
                origin = node.module or ""
            names = [f"{origin}.{alias.name}" if f"{origin}.{alias.name}" in known else origin
                     for alias in node.names]
        for name in names:
            while name and name not in known and "." in name:
                name = name.rsplit(".", 1)[0]
            if name in known and name != module:
                out.add(name)
    return out


def _graph() -> dict[str, set[str]]:
    known = _modules()
    return {module: _imports(module, path, known) for module, path in known.items()}


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(node: str) -> None:
        nonlocal counter
        index[node] = low[node] = counter
        counter += 1
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph[node]):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 5000))
    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_scan_sees_the_whole_package() -> None:
    graph = _graph()
    assert "mcpvisor.tree" in graph
    assert "mcpvisor.actors.core.catalog" in graph
    assert "mcpvisor.actors.core.catalog" in graph["mcpvisor.actors.core.registry"]


def test_the_actors_import_nothing_above_them() -> None:
    offenders = sorted(f"{module} imports {target}"
                       for module, targets in _graph().items() if module.startswith("mcpvisor.actors")
                       for target in targets if not target.startswith("mcpvisor.actors"))
    assert offenders == []


def test_only_the_bench_imports_the_bench() -> None:
    offenders = sorted(f"{module} imports {target}"
                       for module, targets in _graph().items() if not module.startswith("mcpvisor.bench")
                       for target in targets if target.startswith("mcpvisor.bench"))
    assert offenders == []


def test_no_import_circles() -> None:
    assert _circles(_graph()) == []


def test_the_scan_finds_a_circle_hidden_in_a_function(tmp_path: Path) -> None:
    """The checks above are not blind: a function-local import closing a circle is seen,
    and an import under TYPE_CHECKING is not."""
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("from typing import TYPE_CHECKING\nimport pkg.b\nif TYPE_CHECKING:\n    import pkg.c\n")
    b.write_text("def f():\n    from pkg import a\n")
    known = {"pkg.a": a, "pkg.b": b, "pkg.c": tmp_path / "c.py"}
    graph = {"pkg.a": _imports("pkg.a", a, known), "pkg.b": _imports("pkg.b", b, known), "pkg.c": set()}
    assert graph["pkg.a"] == {"pkg.b"}
    assert _circles(graph) == [["pkg.a", "pkg.b"]]


def test_importing_the_sans_io_cores_loads_no_trio() -> None:
    """``import mcpvisor.actors.core`` and every module in it, in a fresh interpreter, leaves
    trio (and the SDK, filelock, platformdirs) unloaded."""
    modules = sorted(m for m in _modules() if m.startswith("mcpvisor.actors.core."))
    assert "mcpvisor.actors.core.registry" in modules
    code = ("import sys, importlib\n"
            "import mcpvisor.actors.core\n"
            f"for m in {modules!r}: importlib.import_module(m)\n"
            "heavy = ('trio', 'anyio', 'mcp', 'filelock', 'platformdirs')\n"
            "loaded = sorted(n for n in heavy if n in sys.modules)\n"
            "assert loaded == [], loaded\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT.parent, env=dict(os.environ),
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr


def test_one_import_name_and_no_generic_ones() -> None:
    """From outside the repository, ``mcpvisor`` imports and the room names do not."""
    code = ("import importlib.util, mcpvisor\n"
            "assert callable(mcpvisor.open_supervisor)\n"
            "missing = [n for n in ('supervisor', 'actors', 'bench') if importlib.util.find_spec(n)]\n"
            "assert missing == [], missing\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT.parent, env=dict(os.environ),
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr


def test_the_wheel_installs_one_top_level_package(tmp_path: Path) -> None:
    """``pip install .`` puts exactly one package in site-packages: the wheel's only top-level
    names are ``mcpvisor`` (rooms, demo configs and dashboard files included) and its
    dist-info."""
    import zipfile

    argv = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stderr
    (wheel,) = tmp_path.glob("mcpvisor-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/", 1)[0] for n in names} == {"mcpvisor", wheel.name.split("-py3")[0] + ".dist-info"}
    for needed in ("mcpvisor/actors/core/plan.py", "mcpvisor/actors/fronts/http.py",
                   "mcpvisor/bench/cli.py", "mcpvisor/demo/mcpvisor.json",
                   "mcpvisor/dashboard/static/index.html", "mcpvisor/py.typed"):
        assert needed in names
