"""Server entries as the dashboard shows and takes them, through the CLI's own checks.

Reads and writes go through `mcpvisor.store.ConfigStore`, opened the way the CLI opens
it (`mcpvisor.entries.open_store`: validated, atomic, unknown keys kept), and an
entry is checked with the function behind ``mcpvisor mcp add-json``
(`mcpvisor.entries.validate_document`), so a bad value gets the same message
the CLI prints. Those messages name a field (``field "args": ...``); `FieldErrors` keeps
that name so the page can show the message next to its input.

Secrets: literal env and header values leave as ``***`` (`mcpvisor.entries.mask_entry`,
as ``mcp info`` shows them; a ``${VAR}`` reference is shown as written, it holds no
secret). An edit that sends ``***`` back keeps the stored value.
"""

from __future__ import annotations

import difflib
import os
import re
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from mcpvisor.entries import MASK, drop_empty, mask_entry, open_store, validate_document
from mcpvisor.store import UnknownServer

SECRET_KEYS: Final = ("env", "headers")
_FIELD_RE: Final = re.compile(r'field "([^"]+)"')
GENERAL: Final = "_"
"""The key of a problem that names no field."""


class FieldErrors(Exception):
    """The entry was refused; ``fields`` maps a field (``command``, ``env.KEY``, or `GENERAL`)
    to the CLI's message for it."""

    def __init__(self, fields: Mapping[str, str]) -> None:
        super().__init__("; ".join(fields.values()))
        self.fields = dict(fields)


def masked(entry: Mapping[str, Any]) -> dict[str, Any]:
    """``entry`` with its secrets as ``***`` (`mcpvisor.redact.redact_entry`)."""
    return mask_entry(entry)


def unmask(new: Mapping[str, Any], old: Mapping[str, Any] | None) -> dict[str, Any]:
    """``new`` with every ``***`` env/header value replaced by the stored one.

    Raises:
        FieldErrors: a ``***`` for a key the stored entry does not have (nothing to keep).
    """
    out = dict(new)
    for key in SECRET_KEYS:
        values = out.get(key)
        if not isinstance(values, Mapping):
            continue
        stored = (old or {}).get(key) or {}
        merged: dict[str, Any] = {}
        for name, value in values.items():
            if value == MASK:
                if not isinstance(stored, Mapping) or name not in stored:
                    message = f'field "{key}.{name}": *** stands for a stored value; there is none: type it'
                    raise FieldErrors({f"{key}.{name}": message})
                value = stored[name]
            merged[name] = value
        out[key] = merged
    # Args, the URL and an OAuth client secret sent back exactly as shown keep the stored value.
    for key in ("args", "dockerArgs", "url"):
        if key in out and old is not None and key in old and out[key] == masked({key: old[key]})[key]:
            out[key] = old[key]
    new_oauth, old_oauth = out.get("oauth"), (old or {}).get("oauth")
    if (isinstance(new_oauth, Mapping) and isinstance(old_oauth, Mapping)
            and new_oauth.get("clientSecret") == MASK and "clientSecret" in old_oauth):
        out["oauth"] = {**new_oauth, "clientSecret": old_oauth["clientSecret"]}
    return out


def check_entry(name: str, entry: Any) -> dict[str, Any]:
    """``entry`` as it will be written (empty args/env/headers dropped), or `FieldErrors`.

    The checks of ``mcpvisor mcp add-json`` (name rule, the config schema), plus the one
    ``mcp test`` would fail at first: a stdio command that is not there.
    """
    from mcpvisor._config_types import NAME_RE, NAME_RULE
    from mcpvisor.config import ConfigError

    if not isinstance(name, str) or not NAME_RE.match(name):
        raise FieldErrors({"name": f'server name "{name}" is invalid: {NAME_RULE}'})
    if not isinstance(entry, dict):
        raise FieldErrors({GENERAL: "expected an object (one server entry, as in .mcp.json)"})
    entry = drop_empty(entry)
    label = Path("JSON")
    try:
        validate_document({"mcpServers": {name: entry}}, label)
    except ConfigError as err:
        fields: dict[str, str] = {}
        for problem in err.problems:
            text = problem.removeprefix(f"{label}: ").removeprefix(f'server "{name}": ')
            found = _FIELD_RE.search(text)
            key = found[1] if found else GENERAL
            fields[key] = f"{fields[key]}; {text}" if key in fields else text
        raise FieldErrors(fields) from None
    spawn_problem = command_problem(entry)
    if spawn_problem is not None:
        raise FieldErrors({"command": spawn_problem})
    return dict(entry)


def command_problem(entry: Mapping[str, Any]) -> str | None:
    """Why a stdio entry's command cannot start, in the words the proxy uses when it
    spawns it (`mcpvisor.actors.process`), or None. ``${VAR}`` commands are left to the proxy."""
    if entry.get("type", "stdio") != "stdio" or "command" not in entry:
        return None
    command = entry["command"]
    if not isinstance(command, str) or "${" in command:
        return None
    if not command.strip():
        return "empty command"
    env = entry.get("env")
    path = str((env if isinstance(env, Mapping) else {}).get("PATH") or os.environ.get("PATH", os.defpath))
    if os.sep in command:
        if not os.path.isfile(command):
            return f"command not found: {command}"
        if not os.access(command, os.X_OK):
            return f"permission denied running {command}"
        return None
    if shutil.which(command, path=path) is None:
        return f"command not found on PATH: {command}"
    return None


class Entries:
    """The servers of one config file, read and edited as the CLI does."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.store = open_store(path)

    def all(self) -> dict[str, dict[str, Any]]:
        servers = self.store.read().get("mcpServers") or {}
        return {n: dict(e) for n, e in servers.items() if isinstance(e, dict)}

    def get(self, name: str) -> dict[str, Any] | None:
        return self.all().get(name)

    def add(self, name: str, entry: Any) -> dict[str, Any]:
        checked = check_entry(name, entry)
        self.store.add_server(name, checked)
        return checked

    def replace(self, name: str, entry: Any) -> dict[str, Any]:
        old = self.get(name)
        if old is None:
            known = list(self.all())
            raise UnknownServer(name, known, difflib.get_close_matches(name, known, n=3), self.path)
        if isinstance(entry, dict):
            entry = unmask(entry, old)
        checked = check_entry(name, entry)
        self.store.add_server(name, checked, force=True)
        return checked

    def remove(self, name: str) -> None:
        self.store.remove_server(name)

    def set_enabled(self, name: str, enabled: bool) -> bool:
        return self.store.set_enabled(name, enabled)
