"""Durations in the config file: parsing, bounds and the hints that go with them.

Owns `parse_duration` (re-exported by `mcpvisor.config`) and `format_duration`, the
short human spelling (`250ms`, `30s`, `5m`, `1h`) used in every message about a duration.
"""

from __future__ import annotations

import math
import re
from typing import Final

__all__ = ["format_duration", "parse_duration"]

_UNITS: Final = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
"""Accepted unit suffixes and their length in seconds; a bare number means seconds."""

_DURATION_RE: Final = re.compile(r"^\s*(?P<num>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*(?P<unit>[A-Za-z]*)\s*$")

_MS_HINT_FIELDS: Final = frozenset({"timeout"})
"""Fields whose plain numbers are often milliseconds in other clients' configs (Claude Code's
MCP_TIMEOUT is in ms), so an out-of-range plain number gets the explicit milliseconds hint."""


def _num(x: float) -> str:
    """A number without a pointless `.0` and without float noise."""
    if x == int(x) and abs(x) < 1e15:
        return str(int(x))
    return f"{x:.6g}"


def format_duration(seconds: float) -> str:
    """The shortest exact spelling of a duration: `1h`, `10m`, `30s`, `1.5s`, `250ms`."""
    if seconds == 0:
        return "0s"
    for unit, size in (("h", 3600.0), ("m", 60.0)):
        if seconds >= size and (seconds / size) == int(seconds / size):
            return f"{_num(seconds / size)}{unit}"
    if seconds < 1:
        return f"{_num(round(seconds * 1000, 6))}ms"
    return f"{_num(seconds)}s"


def parse_duration(value: float | int | str, *, field: str, max_s: float, min_s: float = 0.0) -> float:
    """Parse a config duration into seconds.

    Args:
        value: a number of seconds (int or float, not bool), or a string: a number with an
            optional unit, `"500ms"`, `"30s"`, `"5m"`, `"1h"`, `"1.5s"`; a bare numeric
            string such as `"250"` means seconds.
        field: the key the user wrote, used in messages (`field "timeout": ...`).
        max_s: the largest plausible value, in seconds (inclusive).
        min_s: the smallest accepted value, in seconds (inclusive).

    Returns:
        The duration in seconds, as a float.

    Raises:
        ValueError: the value is not a duration, is negative, or is outside
            `[min_s, max_s]`. The message starts with `field "<field>": ` and, for a value
            that is too long but would be plausible in milliseconds, suggests the `ms`
            spelling.
    """
    where = f'field "{field}"'
    plain: bool  # written without a unit, so "did you mean milliseconds" is a fair guess
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(
            f'{where}: expected a number of seconds or a string like "30s" or "500ms", '
            f"got {type(value).__name__}"
        )
    if isinstance(value, str):
        m = _DURATION_RE.match(value)
        if m is None:
            raise ValueError(
                f'{where}: "{value}" is not a duration (write a number of seconds or a number '
                'with a unit: "500ms", "30s", "5m", "1h")'
            )
        unit = m["unit"]
        if unit and unit not in _UNITS:
            raise ValueError(f'{where}: unknown unit "{unit}" in "{value}" (use ms, s, m or h)')
        number = float(m["num"])
        seconds = number * _UNITS[unit or "s"]
        plain = unit == ""
    else:
        number = float(value)
        if not math.isfinite(number):
            raise ValueError(f"{where}: {value} is not a duration")
        seconds = number
        plain = True
        unit = "s"
    if seconds < 0:
        raise ValueError(f"{where}: a duration cannot be negative")
    if seconds > max_s:
        shown = f"{_num(number)}{unit or 's'}" if unit in ("", "s") else f"{value} ({_num(seconds)}s)"
        message = f"{where}: {shown} is implausibly long (at most {format_duration(max_s)})"
        as_ms = seconds / 1000
        if unit in ("", "s") and min_s <= as_ms <= max_s:
            if plain and field.rsplit(".", 1)[-1] in _MS_HINT_FIELDS:
                message += f'; did you mean milliseconds? write "{_num(number)}ms"'
            else:
                message += f'; did you mean "{_num(number)}ms"?'
        raise ValueError(message)
    if seconds < min_s:
        raise ValueError(
            f"{where}: {format_duration(seconds)} is too short (at least {format_duration(min_s)})"
        )
    return seconds
