"""Peer proxies: the ones users would pick instead, installed in isolation and driven headlessly.

Owns:

* `PEERS`: each peer's registry package, the interpreter it needs, how it is launched
  over the benchmark upstreams (stdio and/or streamable HTTP), and what it can do;
* `ensure_installed`: a private venv per PyPI peer under ``bench/.peers/`` — never the
  project venv, their pins conflict with ours (fastmcp brings its own ``mcp``) — cached
  between runs by a marker file; the npm peers are pinned together in
  ``bench/peers/npm/package.json`` with its lock file and installed with ``npm ci`` into
  ``bench/.peers/npm`` (again whenever the lock file changes);
* `setup_peers`: install every peer now (``python -m mcpvisor.bench --setup-peers``);
* `peer_subjects`: the peers that could be installed, as `Subject`s, and a reason for
  each one that could not (reported as ``skipped: <reason>``, never dropped).

Runner scripts that configure a peer headlessly live in ``bench/peers/``.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from mcpvisor.bench import procs
from mcpvisor.bench.drivers import BENCH_DIR, Launch, ServerDef, Subject, mcp_servers

PEERS_DIR: Final = BENCH_DIR / ".peers"
RUNNERS_DIR: Final = BENCH_DIR / "peers"
INSTALL_TIMEOUT_S: Final = 900.0
"""pip/npm on a loaded 2-core box: fastmcp's dependency tree took several minutes once."""
MARKER: Final = ".bench-installed"
NPM_PINS: Final = RUNNERS_DIR / "npm"
"""``package.json`` and ``package-lock.json`` pinning every npm peer (exact versions, one lock)."""
NPM_HOME: Final = PEERS_DIR / "npm"
"""Where ``npm ci`` installs them (gitignored, as all of ``bench/.peers``)."""


@dataclass(frozen=True)
class PeerSpec:
    """How to install and launch one peer.

    ``launch(home, servers, workdir, transport, port, tag)`` builds the command line; ``home``
    is the peer's install directory (its venv or npm prefix).
    """

    name: str
    registry: str  # "pypi" or "npm"
    package: str
    launch: Callable[[Path, Sequence[ServerDef], Path, str, int, str], Launch]
    transports: frozenset[str]
    multi: bool
    note: str
    python_min: tuple[int, int] = (3, 10)


# --- launchers ----------------------------------------------------------------------------------
def _write_config(workdir: Path, name: str, tag: str, doc: object) -> Path:
    path = workdir / f"{name}-{tag}.json"
    path.write_text(json.dumps(doc, indent=1))
    return path


def _fastmcp(home: Path, servers: Sequence[ServerDef], workdir: Path, transport: str, port: int,
             tag: str) -> Launch:
    cfg = _write_config(workdir, "fastmcp", tag, {"mcpServers": mcp_servers(servers)})
    argv = [str(home / "bin" / "python"), str(RUNNERS_DIR / "fastmcp_proxy.py"), str(cfg)]
    env = procs.base_env(tag=tag)
    if transport == "http":
        return Launch([*argv, "--transport", "http", "--port", str(port)], env, str(workdir),
                      url=f"http://127.0.0.1:{port}/mcp")
    return Launch(argv, env, str(workdir))


def _mcp_proxy(home: Path, servers: Sequence[ServerDef], workdir: Path, transport: str, port: int,
               tag: str) -> Launch:
    if len(servers) != 1:
        raise ValueError("mcp-proxy fronts one server per endpoint; it does not aggregate")
    server = servers[0].entry()
    env = procs.base_env(tag=tag)
    exe = str(home / "bin" / "mcp-proxy")
    serve = [exe, "--host", "127.0.0.1", "--port", str(port), "--log-level", "WARNING",
             "-e", procs.TOKEN_VAR, procs.RUN_TOKEN,
             "--", server["command"], *server["args"]]
    if transport == "http":
        return Launch(serve, env, str(workdir), url=f"http://127.0.0.1:{port}/mcp")
    # stdio: the usual chain — a stdio mcp-proxy client in front of an HTTP mcp-proxy server.
    inner = procs.free_port()
    serve[4] = str(inner)
    argv = [sys.executable, str(RUNNERS_DIR / "chain.py"), "--port", str(inner), "--serve", json.dumps(serve),
            "--", exe, "--log-level", "WARNING", "--transport", "streamablehttp", f"http://127.0.0.1:{inner}/mcp"]
    return Launch(argv, env, str(workdir))


def _magg(home: Path, servers: Sequence[ServerDef], workdir: Path, transport: str, port: int,
          tag: str) -> Launch:
    cfg_dir = workdir / f"magg-{tag}" / ".magg"
    cfg_dir.mkdir(parents=True, exist_ok=True)
    doc = {"servers": {name: {"name": name, "source": f"bench://{name}", **entry}
                       for name, entry in mcp_servers(servers).items()}}
    (cfg_dir / "config.json").write_text(json.dumps(doc, indent=1))
    env = procs.base_env({"MAGG_CONFIG_PATH": str(cfg_dir / "config.json"), "MAGG_LOG_LEVEL": "WARNING",
                          "MAGG_AUTO_RELOAD": "false", "MAGG_READ_ONLY": "true"}, tag=tag)
    exe = str(home / "bin" / "magg")
    if transport == "http":
        return Launch([exe, "serve", "--no-banner", "--http", "--host", "127.0.0.1", "--port", str(port)],
                      env, str(cfg_dir.parent), url=f"http://127.0.0.1:{port}/mcp")
    return Launch([exe, "serve", "--no-banner"], env, str(cfg_dir.parent))


def _mcp_hub(home: Path, servers: Sequence[ServerDef], workdir: Path, transport: str, port: int,
             tag: str) -> Launch:
    cfg = _write_config(workdir, "mcp-hub", tag, {"mcpServers": mcp_servers(servers)})
    node = shutil.which("node") or "node"
    script = home / "node_modules" / "mcp-hub" / "dist" / "cli.js"
    home_dir = workdir / f"mcp-hub-home-{tag}"
    home_dir.mkdir(exist_ok=True)
    env = procs.base_env({"HOME": str(home_dir), "XDG_CONFIG_HOME": str(home_dir / "config"),
                          "XDG_STATE_HOME": str(home_dir / "state"), "XDG_DATA_HOME": str(home_dir / "data"),
                          "XDG_CACHE_HOME": str(home_dir / "cache")}, tag=tag)
    return Launch([node, str(script), "--port", str(port), "--config", str(cfg)], env, str(workdir),
                  url=f"http://127.0.0.1:{port}/mcp", sse=True)


def _supergateway(home: Path, servers: Sequence[ServerDef], workdir: Path, transport: str, port: int,
                  tag: str) -> Launch:
    if len(servers) != 1:
        raise ValueError("supergateway fronts one stdio server per port; it does not aggregate")
    node = shutil.which("node") or "node"
    script = home / "node_modules" / "supergateway" / "dist" / "index.js"
    entry = servers[0].entry()
    command = " ".join(shlex.quote(w) for w in [entry["command"], *entry["args"]])
    # --stateful: one upstream process per client session, as every other subject keeps;
    # its stateless default starts a new upstream for each request.
    argv = [node, str(script), "--stdio", command, "--outputTransport", "streamableHttp", "--stateful",
            "--port", str(port), "--logLevel", "none"]
    return Launch(argv, procs.base_env(tag=tag), str(workdir), url=f"http://127.0.0.1:{port}/mcp")


PEERS: Final[tuple[PeerSpec, ...]] = (
    PeerSpec("fastmcp", "pypi", "fastmcp", _fastmcp, frozenset({"stdio", "http"}), True,
             "FastMCP create_proxy over the mcpServers config (bench/peers/fastmcp_proxy.py)"),
    PeerSpec("magg", "pypi", "magg", _magg, frozenset({"stdio", "http"}), True,
             "magg serve over a .magg/config.json with the same servers", python_min=(3, 12)),
    PeerSpec("mcp-proxy", "pypi", "mcp-proxy", _mcp_proxy, frozenset({"stdio", "http"}), False,
             "HTTP: mcp-proxy serving the stdio upstream; stdio: the usual chain, a stdio mcp-proxy "
             "client -> an HTTP mcp-proxy server -> the upstream (both processes counted)"),
    PeerSpec("mcp-hub", "npm", "mcp-hub", _mcp_hub, frozenset({"http"}), True,
             "npm mcp-hub --config; its unified endpoint /mcp speaks the legacy HTTP+SSE transport"),
    PeerSpec("supergateway", "npm", "supergateway", _supergateway, frozenset({"http"}), False,
             "npm supergateway --stdio UPSTREAM --outputTransport streamableHttp --stateful "
             "(a gateway: one stdio server per port)"),
)
"""1MCP (npm ``@1mcp/agent``) is not among them: npm answers 404 for that package on this
machine, so it cannot be pinned; add it to ``bench/peers/npm/package.json`` where it installs."""


# --- installation -------------------------------------------------------------------------------
def find_python(minimum: tuple[int, int]) -> str | None:
    """An interpreter at least ``minimum``: this one, else python3.N on PATH, else a pyenv build."""
    if sys.version_info[:2] >= minimum:
        return getattr(sys, "_base_executable", sys.executable)
    for minor in range(minimum[1], minimum[1] + 6):
        version = f"{minimum[0]}.{minor}"
        candidates = [shutil.which(f"python{version}"),
                      *sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/{version}.*/bin/python{version}")),
                              reverse=True)]
        for exe in candidates:
            # A pyenv shim is on PATH for every installed version but runs only the active
            # ones ("command not found" otherwise): the build itself is asked for then.
            if exe and subprocess.run([exe, "-c", "pass"], capture_output=True, check=False).returncode == 0:
                return exe
    return None


def _run(argv: list[str], log: Path, cwd: Path | None = None) -> None:
    with open(log, "ab") as f:
        f.write(f"$ {' '.join(argv)}\n".encode())
        f.flush()
        subprocess.run(argv, stdout=f, stderr=subprocess.STDOUT, check=True, timeout=INSTALL_TIMEOUT_S,
                       cwd=cwd, stdin=subprocess.DEVNULL)


def _last_error(log: Path) -> str:
    try:
        lines = [ln for ln in log.read_text(errors="replace").splitlines()
                 if ln.strip() and not ln.startswith("WARNING: Location")]
    except OSError:
        return ""
    errors = [ln for ln in lines if "ERROR" in ln or "ERR!" in ln] or lines
    return errors[-1][:300] if errors else ""


def _lock_digest() -> str:
    return hashlib.sha256((NPM_PINS / "package-lock.json").read_bytes()).hexdigest()


def _ensure_npm(install: bool, echo: Callable[[str], None]) -> str | None:
    """``npm ci`` the pinned npm peers into `NPM_HOME` unless that lock is installed already;
    None when they are there, else why not."""
    marker = NPM_HOME / MARKER
    digest = _lock_digest()
    if marker.exists() and marker.read_text().strip() == digest:
        return None
    if not install:
        return (f"not installed (python -m mcpvisor.bench --setup-peers installs {NPM_PINS} "
                f"into {NPM_HOME})")
    npm = shutil.which("npm")
    if npm is None:
        return "npm is not installed on this machine"
    NPM_HOME.mkdir(parents=True, exist_ok=True)
    for name in ("package.json", "package-lock.json"):
        shutil.copyfile(NPM_PINS / name, NPM_HOME / name)
    log = PEERS_DIR / "npm.install.log"
    echo(f"bench: installing the npm peers pinned in {NPM_PINS} into {NPM_HOME} (npm ci) ...")
    try:
        _run([npm, "ci", "--no-audit", "--no-fund"], log, cwd=NPM_HOME)
    except subprocess.TimeoutExpired:
        return f"npm ci took more than {INSTALL_TIMEOUT_S:.0f} s (log: {log})"
    except (subprocess.CalledProcessError, OSError) as exc:
        return f"npm ci of {NPM_PINS} failed: {_last_error(log) or exc} (log: {log})"
    marker.write_text(digest + "\n")
    return None


def ensure_installed(spec: PeerSpec, *, install: bool = True,
                     echo: Callable[[str], None] = print) -> Path | str:
    """The peer's home directory, installing it first if needed; or why it cannot be had."""
    if spec.registry == "npm":
        why = _ensure_npm(install, echo)
        if why is not None:
            return why
        if not (NPM_HOME / "node_modules" / spec.package / "package.json").exists():
            return f"{spec.package} is not pinned in {NPM_PINS / 'package.json'}"
        return NPM_HOME
    home = PEERS_DIR / spec.name
    marker = home / MARKER
    if marker.exists():
        return home
    if not install:
        return f"not installed (run without --no-install to install {spec.package} into {home})"
    PEERS_DIR.mkdir(parents=True, exist_ok=True)
    log = PEERS_DIR / f"{spec.name}.install.log"
    try:
        python = find_python(spec.python_min)
        if python is None:
            return f"{spec.package} needs Python >= {spec.python_min[0]}.{spec.python_min[1]}; none found"
        if home.exists():
            shutil.rmtree(home)
        echo(f"bench: installing peer {spec.name} ({spec.package} from PyPI) into {home} ...")
        _run([python, "-m", "venv", str(home)], log)
        _run([str(home / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
              spec.package], log)
        version = subprocess.run([str(home / "bin" / "python"), "-m", "pip", "show", spec.package],
                                 capture_output=True, text=True, check=False).stdout
    except subprocess.TimeoutExpired:
        return f"installing {spec.package} took more than {INSTALL_TIMEOUT_S:.0f} s (log: {log})"
    except (subprocess.CalledProcessError, OSError) as exc:
        return (f"installing {spec.package} from {spec.registry} failed: "
                f"{_last_error(log) or exc} (log: {log})")
    marker.write_text(version)
    return home


def setup_peers(echo: Callable[[str], None] = print) -> list[tuple[str, str]]:
    """Install every peer now; ``(name, reason)`` for each that could not be installed."""
    failed = []
    for spec in PEERS:
        home = ensure_installed(spec, install=True, echo=echo)
        if isinstance(home, str):
            failed.append((spec.name, home))
    return failed


def peer_version(name: str) -> str | None:
    spec = next((p for p in PEERS if p.name == name), None)
    if spec is not None and spec.registry == "npm":
        try:
            doc = json.loads((NPM_HOME / "node_modules" / spec.package / "package.json").read_text())
        except (OSError, ValueError):
            return None
        version = doc.get("version") if isinstance(doc, dict) else None
        return version if isinstance(version, str) else None
    marker = PEERS_DIR / name / MARKER
    try:
        text = marker.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("Version:"):
            return line.split(":", 1)[1].strip()
    return None


def peer_subjects(names: Sequence[str] | None = None, *, install: bool = True,
                  echo: Callable[[str], None] = print) -> tuple[list[Subject], list[tuple[str, str]]]:
    """The peers to run (all by default) and ``(name, reason)`` for each that cannot run."""
    subjects: list[Subject] = []
    skipped: list[tuple[str, str]] = []
    for spec in PEERS:
        if names is not None and spec.name not in names:
            continue
        home = ensure_installed(spec, install=install, echo=echo)
        if isinstance(home, str):
            skipped.append((spec.name, home))
            continue

        def launch(servers: Sequence[ServerDef], workdir: Path, transport: str, port: int, tag: str,
                   _spec: PeerSpec = spec, _home: Path = home) -> Launch:
            return _spec.launch(_home, servers, workdir, transport, port, tag)

        version = peer_version(spec.name)
        note = spec.note + (f" [{spec.package} {version}]" if version else "")
        subjects.append(Subject(spec.name, "peer", launch, spec.transports, multi=spec.multi, note=note))
    return subjects, skipped
