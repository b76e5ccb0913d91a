"""The stdio fast path's modules and the config loader do not load the SDK.

Importing anything of ``mcp`` or ``mcp_types`` costs a ``serve`` 0.35-0.6 s and ~60 MB
before it can answer a client (``mcp/__init__.py`` pulls in its client, server, Starlette,
uvicorn, httpx and the pydantic models of both eras). The byte paths need none of it: they
read envelopes with msgspec and write the SDK's codes, keys and versions from our own
constants (held equal to the SDK's by tests/unit/test_wire_codes.py).

* statically: none of the modules below imports the SDK at module level (an import under
  ``if TYPE_CHECKING:`` is for annotations only; one inside a function runs only on the
  path that needs it);
* statically, followed: nothing the stdio fast path, the stdio front (its own answers
  included), the shared `Front` (its SDK server is built, and the SDK imported, when a
  connection first needs it), the stdio upstream link or the upstream actor imports
  (module by module, to the end) imports the SDK;
* at run time: importing the modules that import no SDK-bound module of ours either loads
  neither the SDK nor psycopg (the PostgreSQL driver, only for a configured store), checked
  in a fresh interpreter, module by module, so the first one that brings it in is named.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest

ROOT: Final = Path(__file__).resolve().parents[2]

SDK: Final = ("mcp", "mcp_types")

NO_MODULE_LEVEL_SDK: Final = (
    "actors/wire.py", "actors/eras.py", "actors/errors.py", "actors/framing.py",
    "actors/fronts/frames.py", "actors/fronts/fastpath.py", "actors/fronts/fastcall.py",
    "actors/fronts/fastask.py",
    "actors/harness.py", "actors/fastspans.py", "actors/telemetry.py", "actors/core/vocabulary.py",
    "actors/fronts/front.py",
    "actors/fronts/drain.py",
    "actors/fronts/plans.py",
    "actors/fronts/stdio.py",
    "actors/fronts/http.py", "actors/fronts/http_fast.py", "actors/fronts/http_own.py",
    "actors/fronts/http_sdk.py", "actors/fronts/http_own_answers.py", "actors/fronts/http_checks.py",
    "actors/fronts/http_exchange.py",
    "actors/fronts/http_departure.py", "actors/fronts/http_server.py", "actors/fronts/http_connection.py",
    "actors/fronts/replay.py", "actors/fronts/limits.py", "actors/fronts/fleet.py",
)
"""The fast paths' modules (and what they share with the config loader), by file: the HTTP
front's too, which answers a session it opened itself without the SDK."""

LOADS_NO_SDK: Final = (
    "mcpvisor.actors.core.vocabulary", "mcpvisor.actors.wire", "mcpvisor.actors.eras",
    "mcpvisor.actors.harness", "mcpvisor.actors.errors", "mcpvisor.actors.framing",
    "mcpvisor.actors.fronts.frames", "mcpvisor.actors.fastspans", "mcpvisor.actors.telemetry",
    "mcpvisor.config", "mcpvisor.state", "mcpvisor.pgstore",
    "mcpvisor.actors.link.stdio", "mcpvisor.actors.fronts.fastpath", "mcpvisor.actors.fronts.fastcall",
    "mcpvisor.actors.fronts.fastask",
    "mcpvisor.actors.fronts.stdio_own", "mcpvisor.actors.fronts.clients", "mcpvisor.actors.router",
    "mcpvisor.actors.upstream",
    "mcpvisor.actors.fronts.front",
    "mcpvisor.actors.fronts.drain",
    "mcpvisor.actors.fronts.plans",
    "mcpvisor.actors.fronts.views",
    "mcpvisor.actors.fronts.stdio",
    "mcpvisor._notes",
    "mcpvisor.actors.fronts.http", "mcpvisor.actors.fronts.http_fast", "mcpvisor.actors.fronts.http_own",
    "mcpvisor.actors.fronts.http_sdk", "mcpvisor.actors.fronts.http_own_answers",
    "mcpvisor.actors.fronts.http_server", "mcpvisor.actors.fronts.replay",
    "mcpvisor.actors.fronts.limits", "mcpvisor.actors.fronts.fleet", "mcpvisor.dashboard._hub",
)
"""Modules whose whole import (their own and everything they import) is SDK-free today."""

FORBIDDEN_AT_RUN_TIME: Final = (*SDK, "psycopg", "psycopg_pool")

PROBE: Final = """
import importlib, json, sys
forbidden = set(sys.argv[1].split(","))
for name in sys.argv[2:]:
    importlib.import_module(name)
    loaded = sorted({m.split(".")[0] for m in sys.modules} & forbidden)
    if loaded:
        print(json.dumps([name, loaded]))
        break
else:
    print(json.dumps(None))
"""
"""Imports the modules in turn; prints the first that loaded a forbidden package, and which."""


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _module_level_imports(body: list[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
    """The imports that run when the module is imported: its top level, including class
    bodies and ``if``/``try``/``with`` blocks, but not function bodies (they run when
    called) nor ``if TYPE_CHECKING:`` bodies (they never run)."""
    for node in body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            yield from _module_level_imports(node.orelse)
        else:
            for field in ("body", "orelse", "finalbody", "handlers"):
                for child in getattr(node, field, None) or []:
                    inner = child.body if isinstance(child, ast.ExceptHandler) else [child]
                    yield from _module_level_imports(inner)


def _sdk_imports(path: Path) -> list[str]:
    """``line: statement`` for each module-level import of the SDK in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []
    for node in _module_level_imports(tree.body):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
            [node.module or ""] if node.level == 0 else [])
        if any(name.split(".")[0] in SDK for name in names):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


@pytest.mark.parametrize("relpath", NO_MODULE_LEVEL_SDK)
def test_a_fast_path_module_imports_no_sdk_at_module_level(relpath: str) -> None:
    assert _sdk_imports(ROOT / relpath) == []


def test_the_check_finds_a_module_level_sdk_import_wherever_it_hides(tmp_path: Path) -> None:
    """The static check itself: found in a ``try``, a class body or an ``if``'s else;
    not in a function body or under ``if TYPE_CHECKING:``; not for a name that merely
    starts with ``mcp`` (ours)."""
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from typing import TYPE_CHECKING\n"
        "import mcp.types\n"
        "from mcp_types import LOG_LEVEL_META_KEY\n"
        "try:\n    import mcp_types.version\nexcept ImportError:\n    pass\n"
        "class C:\n    from mcp import ClientSession\n"
        "if TYPE_CHECKING:\n    from mcp import types\nelse:\n    import mcp.shared\n"
        "def f():\n    import mcp\n"
        "import mcpvisor.actors.wire\n"
    )
    assert _sdk_imports(sample) == ["2: import mcp.types", "3: from mcp_types import LOG_LEVEL_META_KEY",
                                    "5: import mcp_types.version", "9: from mcp import ClientSession",
                                    "13: import mcp.shared"]


ROOMS: Final = {"supervisor": "mcpvisor", "actors": "mcpvisor.actors"}


def _own_modules() -> dict[str, Path]:
    """Our modules by dotted name (``mcpvisor.bench`` is never imported by them)."""
    found: dict[str, Path] = {}
    for room, package in ROOMS.items():
        for path in sorted((ROOT / room).rglob("*.py")):
            parts = path.relative_to(ROOT / room).with_suffix("").parts
            if any(p.startswith(".") for p in parts):
                continue
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join((package, *parts))] = path
    return found


def _imported_at_module_level(module: str, path: Path, known: dict[str, Path]) -> tuple[set[str], bool]:
    """Our modules ``module`` imports when it is imported (its parent packages included),
    and whether it imports the SDK itself."""
    out = {".".join(module.split(".")[:i]) for i in range(1, module.count(".") + 1)} & set(known)
    sdk = False
    base = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    for node in _module_level_imports(ast.parse(path.read_text(encoding="utf-8")).body):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            origin = node.module or ""
            if node.level:
                origin = ".".join([*base[: len(base) - (node.level - 1)], *([origin] if origin else [])])
            names = [f"{origin}.{a.name}" if f"{origin}.{a.name}" in known else origin for a in node.names]
        for name in names:
            sdk = sdk or name.split(".")[0] in SDK
            while name not in known and "." in name:
                name = name.rsplit(".", 1)[0]
            if name in known and name != module:
                out.add(name)
    return out, sdk


@pytest.mark.parametrize("start", ["mcpvisor.actors.fronts.fastpath", "mcpvisor.actors.fronts.fastcall",
                                   "mcpvisor.actors.fronts.stdio_own", "mcpvisor.actors.link.stdio",
                                   "mcpvisor.actors.upstream", "mcpvisor.actors.fronts.front",
                                   "mcpvisor.actors.fronts.stdio", "mcpvisor.actors.fronts.plans"])
def test_the_stdio_paths_never_reach_the_sdk(start: str) -> None:
    """Everything a stdio path imports when it is imported, followed module by module to the
    end: no module on the way imports the SDK."""
    known = _own_modules()
    parent: dict[str, str | None] = {start: None}
    queue, chains = [start], []
    while queue:
        module = queue.pop()
        found, sdk = _imported_at_module_level(module, known[module], known)
        if sdk:
            chain = [module]
            while (up := parent[chain[-1]]) is not None:
                chain.append(up)
            chains.append(" <- ".join(chain))
        for name in sorted(found - parent.keys()):
            parent[name] = module
            queue.append(name)
    # It did follow the imports: the modules every stdio path shares were reached (the
    # shared front writes no frames itself: no framing).
    assert {"mcpvisor.actors.wire", "mcpvisor.actors.eras"} <= parent.keys()
    assert start == "mcpvisor.actors.fronts.front" or "mcpvisor.actors.framing" in parent
    assert chains == []


def test_the_config_loader_and_the_byte_paths_load_neither_the_sdk_nor_psycopg() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE, ",".join(FORBIDDEN_AT_RUN_TIME), *LOADS_NO_SDK],
                          capture_output=True, text=True, timeout=60, check=True, cwd=ROOT)
    # None, or [the first module that loaded one, what it loaded].
    assert json.loads(done.stdout) is None
