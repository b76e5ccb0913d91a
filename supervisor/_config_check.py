"""What every section of the config build shares: the problems and warnings of one
document, and the checks used by more than one section.

Owns `Checker`, the state of one pass over one document (its path, the directory
relative paths are taken from, the interpolator, the names declared so far) and the
shared field checks: a choice among fixed values, the supervision knobs and their
pairs, interpolation of one value, and local paths. The sections build on it:
`mcpvisor._config_settings`, `mcpvisor._config_servers`, `mcpvisor._config_tools`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from msgspec import UNSET

from mcpvisor._config_durations import format_duration, parse_duration
from mcpvisor._config_env import Interpolator
from mcpvisor._config_schema import ServerEntry, SettingsEntry, close_match, describe_type
from mcpvisor._config_types import KNOB_PAIRS, KNOBS, Knob

_KNOB_BY_KEY = {k.key: k for k in KNOBS}


def _quoted(choices: tuple[str, ...]) -> str:
    return ", ".join(f'"{c}"' for c in choices)


class Checker:
    """One pass over one document; `problems` fail the load, `warnings` ride along."""

    def __init__(
        self, doc: Mapping[str, Any], *, path: Path | None, label: str, env: Mapping[str, str]
    ) -> None:
        self.doc = doc
        self.path = path
        self.label = label
        self.env = env
        self.base = Path(os.path.abspath(path.parent if path is not None else Path()))
        self.problems: list[str] = []
        self.warnings: list[str] = []
        self.interp = Interpolator("disable", process={}, dotenv={}, builtins={})
        self.server_names: tuple[str, ...] = ()
        self.compound_names: frozenset[str] = frozenset()
        self.settings_entry: SettingsEntry | None = None

    def problem(self, where: str, msg: str) -> None:
        self.problems.append(f"{self.label}: {where}: {msg}" if where else f"{self.label}: {msg}")

    def warn(self, where: str, msg: str) -> None:
        self.warnings.append(f"{self.label}: {where}: {msg}" if where else f"{self.label}: {msg}")

    def section(self, key: str) -> Mapping[str, Any]:
        """A top-level object (empty when absent); anything else is a problem."""
        value = self.doc.get(key, {})
        if isinstance(value, Mapping):
            return value
        self.problem("", f'"{key}" must be an object, got {describe_type(value)}')
        return {}

    def choice(self, where: str, key: str, value: str, choices: tuple[str, ...]) -> bool:
        if value in choices:
            return True
        self.problem(
            where, f'field "{key}": "{value}" is not one of {_quoted(choices)}{close_match(value, choices)}'
        )
        return False

    def knob(self, where: str, knob: Knob, value: Any) -> float | None:
        """Parse one supervision knob; a problem and None when it is out of bounds."""
        if knob.count:
            if knob.low <= value <= knob.high:
                return float(value)
            self.problem(
                where, f'field "{knob.key}": {value} is out of range ({knob.low:g} to {knob.high:g})'
            )
            return None
        try:
            return parse_duration(value, field=knob.key, max_s=knob.high, min_s=knob.low)
        except ValueError as err:
            self.problem(where, str(err))
            return None

    def knobs(self, where: str, entry: SettingsEntry | ServerEntry) -> dict[str, float]:
        """The knobs `entry` sets, parsed, keyed by attribute name."""
        out: dict[str, float] = {}
        for knob in KNOBS:
            value = getattr(entry, knob.attr)
            if value is not UNSET:
                parsed = self.knob(where, knob, value)
                if parsed is not None:
                    out[knob.attr] = int(parsed) if knob.count else parsed
        return out

    def check_pairs(self, where: str, merged: Mapping[str, float], given: Mapping[str, float] | None) -> None:
        """A first delay or open period longer than its cap is a problem (if `where` set one)."""
        for first_key, cap_key in KNOB_PAIRS:
            first, cap = _KNOB_BY_KEY[first_key], _KNOB_BY_KEY[cap_key]
            if given is not None and first.attr not in given and cap.attr not in given:
                continue
            a, b = merged.get(first.attr, first.default), merged.get(cap.attr, cap.default)
            if a > b:
                too_long = f"{format_duration(a)} is longer than"
                self.problem(where, f'field "{first_key}": {too_long} "{cap_key}" ({format_duration(b)})')

    def sub(self, where: str, key: str, value: str, *, strict: bool) -> str:
        """Interpolate one value; a problem (or, for a disabled server, a warning) on failure."""
        try:
            return self.interp(value)
        except ValueError as err:
            (self.problem if strict else self.warn)(
                where, f'field "{key}": {err}' + ("" if strict else "; kept as written")
            )
            return value

    def local_path(self, value: str) -> str:
        """`~` expanded; a relative path is taken relative to the config file's directory."""
        return str(self.base / os.path.expanduser(value))
