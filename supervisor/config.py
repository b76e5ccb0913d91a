"""Load, validate and interpolate the mcpvisor config file.

The format is a superset of Claude Code's `.mcp.json`, so an existing `.mcp.json` works
unchanged. This module owns:

* where the file is looked up (`find_config`) and how it is read (`load_config`);
* strict validation (`parse_config`): msgspec checks each entry's structure, and every
  problem in the file (every server, every field) is collected into one `ConfigError`
  whose lines name the file, the server and the field, with a close match for a
  misspelt key. A bad config never partially applies: a full `Config` or an error;
* `${VAR}` interpolation per `settings.envMode`, with the `.env` next to the file;
* durations (`parse_duration`) and the supervision defaults of docs/design.md "Behaviour under
  failure", settable per server and, for all servers, under `settings`;
* the resolved, immutable records other modules use: `Config`, `Settings`, `ToolsetDecl`,
  `ToolRef`; and, re-exported from the core where the actors read them, `ServerSpec`,
  `ExposedTool` and `server_filter`.

Example::

    path, why = find_config(args.config)
    config = load_config(path)          # ConfigError: print str(err), exit 2
    for spec in config.enabled_servers(): ...
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import msgspec

from mcpvisor._config_build import build
from mcpvisor._config_durations import parse_duration
from mcpvisor._config_schema import describe_type
from mcpvisor._config_types import (
    DEFAULT_HOST,
    DEFAULT_PORT,
    Config,
    ConfigError,
    OAuthSettings,
    Settings,
    ToolRef,
    ToolsetDecl,
)
from mcpvisor.actors.core.model import ToolEntry, Toolset
from mcpvisor.actors.core.spec import ExposedTool, ServerSpec, server_filter
from mcpvisor.actors.core.vocabulary import TRANSPORTS

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "TRANSPORTS",
    "Config",
    "ConfigError",
    "ExposedTool",
    "OAuthSettings",
    "ServerSpec",
    "Settings",
    "ToolRef",
    "ToolsetDecl",
    "declared_toolset",
    "demo_config_path",
    "find_config",
    "load_config",
    "parse_config",
    "parse_duration",
    "server_filter",
    "user_config_path",
]


CONFIG_ENV_VAR: Final = "MCPVISOR_CONFIG"
COORDINATOR_ENV_VAR: Final = "MCP_PROXY_CONFIG_PATH"
"""MCP Coordinator's variable for its config file, honoured after `$MCPVISOR_CONFIG` so a
coordinator user's environment keeps working (issue 17)."""
CONFIG_FILE_NAMES: Final = ("mcpvisor.json", ".mcp.json")
"""Looked for in the current directory, in this order (docs/design.md "Config file")."""


def user_config_path() -> Path:
    """The per-user config file (the last place `find_config` looks)."""
    import platformdirs  # here: ~4 ms, and a --config or $MCPVISOR_CONFIG never needs it

    return Path(platformdirs.user_config_dir("mcpvisor")) / "mcpvisor.json"


def demo_config_path() -> Path:
    """The demo config bundled with the package (`supervisor/demo/mcpvisor.json`)."""
    return Path(__file__).resolve().parent / "demo" / "mcpvisor.json"


def find_config(
    explicit: str | os.PathLike[str] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> tuple[Path | None, str]:
    """Find the config file: `--config`, `$MCPVISOR_CONFIG`, `$MCP_PROXY_CONFIG_PATH`,
    `./mcpvisor.json`, `./.mcp.json`, user dir.

    Args:
        explicit: the `--config` value, if any.
        env: the environment to read `$MCPVISOR_CONFIG` from (default: `os.environ`).
        cwd: the directory standing for the current one (default: the process's; returned
            paths are then relative, as the user would write them).

    Returns:
        The path and why it was chosen. An explicit path or either variable is returned
        even if it does not exist (the caller reports it); the other places are skipped
        when missing. `(None, "no config found; looked at: ...")` when nothing exists.
    """
    env = os.environ if env is None else env
    base = Path() if cwd is None else cwd
    if explicit is not None and os.fspath(explicit):
        return base / explicit, "from --config"
    for var in (CONFIG_ENV_VAR, COORDINATOR_ENV_VAR):
        if env.get(var):
            return base / env[var], f"from ${var}"
    looked: list[str] = []
    for name in CONFIG_FILE_NAMES:
        candidate = base / name
        looked.append(str(candidate) if cwd is not None else f"./{name}")
        if candidate.is_file():
            return candidate, f"./{name} in the current directory"
    user = user_config_path()
    looked.append(str(user))
    if user.is_file():
        return user, "the user config file"
    return None, ("no config found; looked at: " + ", ".join(looked)
                  + f" (and neither ${CONFIG_ENV_VAR} nor ${COORDINATOR_ENV_VAR} is set)")


def load_config(path: str | os.PathLike[str], *, env: Mapping[str, str] | None = None,
                isolate_servers: bool = False) -> Config:
    """Read and parse a config file (and the `.env` next to it when `envMode` asks for it).

    Args:
        path: the file, named as the user gave it (messages use this spelling).
        env: the process environment for interpolation (default: `os.environ`).
        isolate_servers: what the proxy asks for: a problem inside one server's entry makes
            that server `ServerSpec.misconfigured` instead of failing the load.

    Raises:
        ConfigError: the file is missing or unreadable, is not a JSON object, or has any
            problem; nothing is applied.
    """
    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{p}: no such file", p) from None
    except IsADirectoryError:
        raise ConfigError(f"{p}: is a directory, not a config file", p) from None
    except OSError as err:
        raise ConfigError(f"{p}: cannot read: {err.strerror or err}", p) from None
    return parse_config(data, path=p, env=env, isolate_servers=isolate_servers)


def parse_config(
    doc: Mapping[str, Any] | bytes | str,
    *,
    path: Path | None = None,
    env: Mapping[str, str] | None = None,
    isolate_servers: bool = False,
) -> Config:
    """Validate and resolve a config document.

    Args:
        doc: the decoded JSON object, or its JSON text (bytes or str; not a file name).
        path: the file it came from: used in messages, for relative `cwd`/`stateDir`,
            `${MCPVISOR_CONFIG_DIR}`, and the `.env` file read under envMode
            `enable`/`dotenv`.
        env: the process environment for interpolation (default: `os.environ`).
        isolate_servers: a problem inside one server's entry (an unset ``${VAR}``, an
            invalid field) makes that server `ServerSpec.misconfigured` with the problem as
            its reason, instead of an error; a document that cannot be read at all (bad
            JSON, bad settings, no "mcpServers" beside a close match) is still an error.

    Returns:
        The full Config; atomic: either this or an error, never a partial config.

    Raises:
        ConfigError: every problem found, one per line.
    """
    label = str(path) if path is not None else "config"
    if isinstance(doc, bytes | str):
        doc = _decode(doc.encode() if isinstance(doc, str) else doc, label, path)
    if not isinstance(doc, Mapping):
        raise ConfigError(f"{label}: expected a JSON object at the top level, got {describe_type(doc)}", path)
    return build(doc, path=path, label=label, env=os.environ if env is None else env,
                 isolate_servers=isolate_servers)


def _line_col(raw: bytes, pos: int) -> tuple[int, int]:
    """1-based line and column (in characters) of byte offset `pos`."""
    prefix = raw[:pos]
    start = prefix.rfind(b"\n") + 1
    return prefix.count(b"\n") + 1, len(prefix[start:].decode("utf-8", "replace")) + 1


def _decode(raw: bytes, label: str, path: Path | None) -> Any:
    """JSON text -> Python objects; a DecodeError becomes a ConfigError with line/column."""
    raw = raw.removeprefix(b"\xef\xbb\xbf")  # a UTF-8 BOM some Windows editors write
    if not raw.strip():
        raise ConfigError(
            f'{label}: file is empty (expected a JSON object such as {{"mcpServers": {{}}}})', path
        )
    try:
        return msgspec.json.decode(raw)
    except UnicodeDecodeError as err:
        line, col = _line_col(raw, err.start)
        raise ConfigError(f"{label}: not valid UTF-8 (line {line}, column {col})", path) from None
    except msgspec.DecodeError as err:
        msg = str(err)
        if m := re.search(r"\s*\(byte (\d+)\)$", msg):
            line, col = _line_col(raw, int(m[1]))
            msg = f"{msg[: m.start()]} (line {line}, column {col})"
        elif "truncated" in msg:
            line, col = _line_col(raw, len(raw))
            msg = f"JSON is malformed: unexpected end of file (line {line}, column {col})"
        raise ConfigError(f"{label}: {msg}", path) from None


def declared_toolset(decl: ToolsetDecl) -> Toolset:
    """A toolset of the config file, as a read-only `Toolset`."""
    entries = tuple(ToolEntry(namespaced_name=ref.namespaced_name or "", ref_id=ref.ref_id, alias=ref.alias,
                              pinned=None) for ref in decl.tools)
    return Toolset(name=decl.name, tools=entries, description=decl.description, created_at="", updated_at="",
                   read_only=True)

