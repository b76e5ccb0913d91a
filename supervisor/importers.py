"""Reading other MCP clients' configs, for ``mcpvisor import`` (sans-IO apart from reading files).

Owns, for Claude Code, Claude Desktop, Cursor and VS Code:

* where each keeps its servers (`default_sources`), per platform and scope;
* reading those files (`read_sources`): JSON, or JSONC with comments and trailing commas
  (VS Code), in any of the shapes they use (``mcpServers``, ``servers``, VS Code's
  ``"mcp": {"servers"}`` in settings.json, Claude Code's ``projects`` in ~/.claude.json);
* turning each entry into an mcpvisor entry (`convert_entry`): Claude Code's
  ``.mcp.json`` shape (``command``/``args``/``env``, or ``type``/``url``/``headers``),
  VS Code and Cursor variables rewritten (``${env:X}`` -> ``${X}``, ``${workspaceFolder}``,
  ``${userHome}``; ``${input:id}`` -> an environment variable to set), keys mcpvisor does
  not read dropped and said so, server names made valid;
* what an import does against the servers already configured (`plan_import`): add, skip
  an identical one, and for a different one of the same name skip, rename (``name-2``)
  or replace, as asked.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from mcpvisor.actors.core.vocabulary import TRANSPORTS, canonical_transport

__all__ = [
    "CLIENTS",
    "Action",
    "Found",
    "ImportSource",
    "convert_entry",
    "default_sources",
    "parse_jsonc",
    "plan_import",
    "read_sources",
    "sanitize_name",
]

CLIENTS: Final = ("claude-code", "claude-desktop", "cursor", "vscode")
CONFLICT_POLICIES: Final = ("skip", "rename", "replace")
EDITOR_CLIENTS: Final = frozenset({"vscode", "cursor"})
"""Clients whose configs use editor variables (``${workspaceFolder}``, ``${env:X}``, ``${input:id}``)."""

MAX_NAME_LEN: Final = 64
"""mcpvisor's server-name limit (supervisor._config_types.MAX_NAME_LEN)."""

MAX_RENAME_TRIES: Final = 1000
"""``name-2`` ... ``name-1000``: past that, something else is wrong."""

KEPT_KEYS: Final = frozenset(
    {
        "type",
        "transport",
        "command",
        "args",
        "env",
        "cwd",
        "url",
        "headers",
        "description",
        "disabled",
        "enabled",
    }
)
"""Keys of another client's entry that carry over; the rest is reported as dropped."""

IMPORTED_TRANSPORTS: Final = frozenset(TRANSPORTS) - {"stdio-docker"}
"""The transports another client's entry can name (after `canonical_transport`): no other
client runs a server in docker by our ``image`` field."""

_NAME_BAD: Final = re.compile(r"[^A-Za-z0-9_-]+")
_VAR: Final = re.compile(r"\$\{([^}]*)\}")


@dataclass(frozen=True, slots=True)
class ImportSource:
    """A file a client keeps servers in: its path, the scope it stands for, and, for
    ~/.claude.json's per-project servers, the project directory."""

    path: Path
    label: str
    project: str | None = None


@dataclass(frozen=True, slots=True)
class Found:
    """One server found in another client's config, converted."""

    name: str
    """mcpvisor name (sanitized)."""
    original: str
    """The name in the other client's file."""
    entry: Mapping[str, Any] | None
    """The mcpvisor entry; None when it cannot be converted (``notes`` says why)."""
    source: str
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Action:
    """What the import does with one found server: ``add``, ``rename`` (added under
    ``name``), ``replace``, or ``skip`` (``reason`` says why)."""

    kind: str
    name: str
    found: Found
    reason: str | None = None


@dataclass(slots=True)
class _Env:
    """What a conversion needs to know about the machine."""

    home: Path
    workspace: Path
    notes: list[str] = field(default_factory=list)


# --- where clients keep their servers --------------------------------------------------------


def _app_dir(home: Path, env: Mapping[str, str], platform: str) -> Path:
    """The per-user application-data directory (where Claude Desktop and VS Code keep theirs)."""
    if platform == "darwin":
        return home / "Library" / "Application Support"
    if platform.startswith("win"):
        return Path(env.get("APPDATA") or home / "AppData" / "Roaming")
    return Path(env.get("XDG_CONFIG_HOME") or home / ".config")


def default_sources(
    client: str,
    *,
    home: Path | None = None,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    platform: str | None = None,
) -> list[ImportSource]:
    """Where ``client`` keeps its servers, most specific first (project before user)."""
    home = Path.home() if home is None else home
    cwd = Path.cwd() if cwd is None else cwd
    env = os.environ if env is None else env
    platform = sys.platform if platform is None else platform
    app = _app_dir(home, env, platform)
    if client == "claude-code":
        claude_json = home / ".claude.json"
        return [
            ImportSource(cwd / ".mcp.json", "project (.mcp.json)"),
            ImportSource(claude_json, f"local (~/.claude.json, project {cwd})", project=str(cwd)),
            ImportSource(claude_json, "user (~/.claude.json)"),
        ]
    if client == "claude-desktop":
        return [ImportSource(app / "Claude" / "claude_desktop_config.json", "Claude Desktop")]
    if client == "cursor":
        return [
            ImportSource(cwd / ".cursor" / "mcp.json", "project (.cursor/mcp.json)"),
            ImportSource(home / ".cursor" / "mcp.json", "global (~/.cursor/mcp.json)"),
        ]
    if client == "vscode":
        user = app / "Code" / "User"
        return [
            ImportSource(cwd / ".vscode" / "mcp.json", "workspace (.vscode/mcp.json)"),
            ImportSource(user / "mcp.json", "user (mcp.json)"),
            ImportSource(user / "settings.json", 'user settings ("mcp.servers")'),
        ]
    raise ValueError(f"unknown client {client!r}; one of {', '.join(CLIENTS)}")


# --- reading ------------------------------------------------------------------------------------


def parse_jsonc(text: str) -> Any:
    """JSON with ``//`` and ``/* */`` comments and trailing commas (VS Code's files).

    Raises:
        ValueError: not JSON even so; the message has the line and column.
    """
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(text[i : j + 1])
            i = j + 1
        elif text.startswith("//", i):
            while i < n and text[i] != "\n":
                i += 1
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            block = text[i : n if end < 0 else end + 2]
            out.append("\n" * block.count("\n"))  # keep line numbers right
            i = n if end < 0 else end + 2
        else:
            out.append(ch)
            i += 1
    cleaned = re.sub(r",(\s*[}\]])", r"\1", "".join(out))
    try:
        return json.loads(cleaned)
    except json.JSONDecodeError as err:
        raise ValueError(f"not valid JSON (line {err.lineno}, column {err.colno}): {err.msg}") from None


def _servers_in(doc: Any, source: ImportSource) -> Mapping[str, Any]:
    """The server entries of one file, whichever shape it has."""
    if not isinstance(doc, Mapping):
        return {}
    if source.project is not None:
        projects = doc.get("projects")
        project = projects.get(source.project) if isinstance(projects, Mapping) else None
        servers = project.get("mcpServers") if isinstance(project, Mapping) else None
        return servers if isinstance(servers, Mapping) else {}
    for key in ("mcpServers", "servers"):
        if isinstance(doc.get(key), Mapping):
            return doc[key]  # type: ignore[no-any-return]
    nested = doc.get("mcp")
    if isinstance(nested, Mapping) and isinstance(nested.get("servers"), Mapping):
        return nested["servers"]  # type: ignore[no-any-return]
    flat = doc.get("mcp.servers")
    return flat if isinstance(flat, Mapping) else {}


def read_sources(
    client: str, sources: Sequence[ImportSource], *, home: Path | None = None, cwd: Path | None = None
) -> tuple[list[Found], list[str], list[ImportSource]]:
    """Read every existing source; convert every server in them.

    Returns:
        The servers found (in source order), warnings (unreadable files), and the sources
        that existed.

    Raises:
        ValueError: a file exists but is not JSON (the message names the file).
    """
    home = Path.home() if home is None else home
    cwd = Path.cwd() if cwd is None else cwd
    found: list[Found] = []
    warnings: list[str] = []
    existing: list[ImportSource] = []
    for source in sources:
        try:
            text = source.path.read_text(encoding="utf-8-sig")
        except FileNotFoundError:
            continue
        except (OSError, UnicodeDecodeError) as err:
            warnings.append(f"{source.path}: cannot read ({err})")
            continue
        existing.append(source)
        try:
            doc = parse_jsonc(text)
        except ValueError as err:
            raise ValueError(f"{source.path}: {err}") from None
        workspace = source.path.parent.parent if source.path.parent.name in (".vscode", ".cursor") else cwd
        for original, raw in _servers_in(doc, source).items():
            entry, notes = convert_entry(client, raw, home=home, workspace=workspace)
            name = sanitize_name(original)
            if name != original:
                notes.insert(0, f"renamed from {original!r} (names use A-Z, a-z, 0-9, _ and -)")
            found.append(Found(name, str(original), entry, f"{source.path} [{source.label}]", tuple(notes)))
    return found, warnings, existing


# --- converting ---------------------------------------------------------------------------------


def sanitize_name(name: str) -> str:
    """A valid mcpvisor server name for ``name`` (invalid runs become ``-``)."""
    clean = _NAME_BAD.sub("-", str(name)).strip("-")[:MAX_NAME_LEN]
    return clean or "server"


def _env_var_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", text).upper() or "INPUT"


def _variables(value: str, client: str, env: _Env) -> str:
    """Rewrite another client's variable references into mcpvisor's ``${VAR}`` syntax.

    Raises:
        ValueError: a reference mcpvisor cannot express (``${command:...}``, ...).
    """
    editor = client in EDITOR_CLIENTS

    def sub(match: re.Match[str]) -> str:
        body = match[1]
        if editor and body in ("workspaceFolder", "workspaceRoot"):
            return str(env.workspace)
        if editor and body == "workspaceFolderBasename":
            return env.workspace.name
        if editor and body == "userHome":
            return str(env.home)
        if editor and body == "pathSeparator":
            return os.sep
        if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(:-.*)?", body):
            return match[0]  # already ${VAR} / ${VAR:-default}
        kind, _, arg = body.partition(":")
        if kind == "env" and arg:
            return "${" + arg + "}"
        if kind == "input" and arg:
            var = _env_var_name(arg)
            env.notes.append(
                f"${{input:{arg}}} (asked by {client}) is now ${{{var}}}: set {var} for the proxy"
            )
            return "${" + var + "}"
        raise ValueError(f"uses ${{{body}}}, which mcpvisor cannot resolve")

    return _VAR.sub(sub, value)


def convert_entry(
    client: str, raw: Any, *, home: Path, workspace: Path
) -> tuple[dict[str, Any] | None, list[str]]:
    """Turn one server entry of ``client``'s config into an mcpvisor entry.

    Returns:
        The entry (None when it cannot be converted) and notes for the user: keys dropped,
        variables rewritten, the transport guessed.
    """
    env = _Env(home=home, workspace=workspace)
    if not isinstance(raw, Mapping):
        return None, [f"not an object ({type(raw).__name__}); skipped"]
    dropped = sorted(str(k) for k in raw if k not in KEPT_KEYS)
    if dropped:
        env.notes.append("dropped keys mcpvisor does not use: " + ", ".join(dropped))
    given = raw.get("type", raw.get("transport"))
    kind = canonical_transport(str(given)) if given is not None else None
    if kind not in IMPORTED_TRANSPORTS:
        kind = None
    if given is not None and kind is None:
        return None, [*env.notes, f"transport {given!r} is not one mcpvisor speaks; skipped"]
    url = raw.get("url", raw.get("serverUrl"))
    if kind is None:
        if "command" in raw:
            kind = "stdio"
        elif isinstance(url, str):
            kind = "sse" if url.rstrip("/").endswith("/sse") else "http"
            env.notes.append(f"no transport given: {kind} guessed from the URL")
        else:
            return None, [*env.notes, 'neither "command" nor "url"; skipped']
    try:
        entry = _entry(kind, raw, url, client, env)
    except ValueError as err:
        return None, [*env.notes, f"{err}; skipped"]
    return entry, env.notes


def _strings(value: Any, what: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError(f'"{what}" is not a list')
    return [v if isinstance(v, str) else json.dumps(v) for v in value]


def _mapping(value: Any, what: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(f'"{what}" is not an object')
    return {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in value.items()}


def _entry(kind: str, raw: Mapping[str, Any], url: Any, client: str, env: _Env) -> dict[str, Any]:
    def v(text: str) -> str:
        return _variables(text, client, env)

    entry: dict[str, Any]
    if kind == "stdio":
        command = raw.get("command")
        if not isinstance(command, str) or not command:
            raise ValueError('"command" is missing or not a string')
        entry = {
            "command": v(command),
            "args": [v(a) for a in _strings(raw.get("args"), "args")],
            "env": {k: v(x) for k, x in _mapping(raw.get("env"), "env").items()},
        }
        if isinstance(raw.get("cwd"), str):
            entry["cwd"] = v(raw["cwd"])
    else:
        if not isinstance(url, str) or not url:
            raise ValueError('"url" is missing or not a string')
        entry = {"type": kind, "url": v(url)}
        headers = {k: v(x) for k, x in _mapping(raw.get("headers"), "headers").items()}
        if headers:
            entry["headers"] = headers
    if isinstance(raw.get("description"), str):
        entry["description"] = raw["description"]
    if raw.get("disabled") is True or raw.get("enabled") is False:
        entry["enabled"] = False
    return entry


# --- planning -------------------------------------------------------------------------------------


def _same(a: Any, b: Any) -> bool:
    """Two entries configure the same server (empty ``args``/``env``/``headers`` and an
    explicit ``"type": "stdio"`` make no difference)."""

    def normal(entry: Any) -> Any:
        if not isinstance(entry, Mapping):
            return entry
        out = {k: v for k, v in entry.items() if not (k in ("args", "env", "headers") and not v)}
        if out.get("type") == "stdio" or out.get("transport") == "stdio":
            out.pop("type", None)
            out.pop("transport", None)
        return out

    return bool(normal(a) == normal(b))


def _free_name(name: str, taken: set[str]) -> str:
    for i in range(2, MAX_RENAME_TRIES + 1):
        suffix = f"-{i}"
        candidate = name[: MAX_NAME_LEN - len(suffix)] + suffix
        if candidate not in taken:
            return candidate
    raise ValueError(f"no free name like {name}-N")


def plan_import(
    existing: Mapping[str, Any], found: Sequence[Found], on_conflict: str = "skip"
) -> list[Action]:
    """Decide what happens to each found server, against the servers already configured.

    An identical entry is skipped ("already configured"). A different one of the same
    name (configured, or found earlier in this import) is skipped, renamed to the first
    free ``name-N``, or replaces it, per ``on_conflict``.
    """
    if on_conflict not in CONFLICT_POLICIES:
        raise ValueError(f"on_conflict must be one of {', '.join(CONFLICT_POLICIES)}")
    current: dict[str, Any] = dict(existing)
    planned: dict[str, Any] = {}
    actions: list[Action] = []
    for item in found:
        if item.entry is None:
            actions.append(
                Action("skip", item.name, item, item.notes[-1] if item.notes else "cannot convert")
            )
            continue
        taken = set(current) | set(planned)
        twin = next((n for n, e in (*current.items(), *planned.items()) if _same(e, item.entry)), None)
        if twin is not None:
            where = "" if twin == item.name else f" as {twin!r}"
            actions.append(Action("skip", item.name, item, f"already configured{where}"))
            continue
        if item.name not in taken:
            planned[item.name] = item.entry
            actions.append(Action("add", item.name, item))
            continue
        if on_conflict == "rename":
            name = _free_name(item.name, taken)
            planned[name] = item.entry
            actions.append(Action("rename", name, item, f"{item.name!r} is taken by a different server"))
        elif on_conflict == "replace" and item.name not in planned:
            planned[item.name] = item.entry
            actions.append(Action("replace", item.name, item, "replaces the configured one"))
        else:
            actions.append(
                Action(
                    "skip",
                    item.name,
                    item,
                    f"a different server named {item.name!r} exists (--on-conflict rename|replace)",
                )
            )
    return actions
