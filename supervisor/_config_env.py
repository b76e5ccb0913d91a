"""`${VAR}` interpolation for config values and the tiny `.env` reader behind `envMode`.

Owns the interpolation grammar (`${VAR}`, `${VAR:-default}`, `$$`), where variables come
from for each `envMode`, and the `.env` parser (python-dotenv is not a dependency).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

__all__ = ["ENV_MODES", "Interpolator", "parse_dotenv"]

ENV_MODES: Final = ("enable", "dotenv", "process", "disable")
"""`settings.envMode`: process env then `.env` (process wins) | only `.env` | only the
process env | no interpolation at all."""

_NAME_RE: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_DOTENV_LINE_RE: Final = re.compile(r"^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*)$")
_DQ_ESCAPES: Final = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\", "$": "$"}


class Interpolator:
    """Expands `${VAR}`, `${VAR:-default}` and `$$` in one config string.

    A reference to a variable that is not set raises `ValueError` with a message that says
    how to give a default; it never expands to an empty string. `${VAR:-default}` uses the
    default when VAR is unset or empty (as in POSIX sh). A `$` not followed by `{` or `$`
    is kept as written.
    """

    __slots__ = ("_builtins", "_dotenv", "_dotenv_label", "_mode", "_process")

    def __init__(
        self,
        mode: str,
        *,
        process: Mapping[str, str],
        dotenv: Mapping[str, str],
        builtins: Mapping[str, str],
        dotenv_label: str = ".env",
    ) -> None:
        self._mode = mode
        self._process = process
        self._dotenv = dotenv
        self._builtins = builtins
        self._dotenv_label = dotenv_label

    def lookup(self, name: str) -> str | None:
        """The value of `name` under this envMode; built-ins come last in every mode."""
        sources: tuple[Mapping[str, str], ...]
        if self._mode == "enable":
            sources = (self._process, self._dotenv, self._builtins)  # the process wins
        elif self._mode == "dotenv":
            sources = (self._dotenv, self._builtins)
        else:
            sources = (self._process, self._builtins)
        for source in sources:
            if name in source:
                return source[name]
        return None

    def _missing(self, name: str) -> str:
        hint = f"use ${{{name}:-default}} for a default"
        if self._mode == "dotenv":
            return (
                f"variable {name} is not set in {self._dotenv_label} "
                f'(envMode "dotenv" reads only that file; {hint})'
            )
        return f"environment variable {name} is not set ({hint})"

    def __call__(self, text: str) -> str:
        """Return `text` with every reference expanded; `ValueError` names the first bad one."""
        if self._mode == "disable" or "$" not in text:
            return text
        out: list[str] = []
        i, n = 0, len(text)
        while i < n:
            ch = text[i]
            if ch != "$" or i + 1 == n:
                out.append(ch)
                i += 1
                continue
            nxt = text[i + 1]
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            if nxt != "{":
                out.append(ch)
                i += 1
                continue
            end = text.find("}", i + 2)
            if end < 0:
                raise ValueError(f'unterminated "${{" in "{text}" (write "$$" for a literal "$")')
            body = text[i + 2 : end]
            name, sep, default = body.partition(":-")
            if not _NAME_RE.match(name):
                raise ValueError(
                    f'"${{{body}}}" is not a variable reference (use ${{NAME}} or ${{NAME:-default}}; '
                    'write "$$" for a literal "$")'
                )
            value = self.lookup(name)
            if sep and not value:
                value = default
            if value is None:
                raise ValueError(self._missing(name))
            out.append(value)
            i = end + 1
        return "".join(out)


def _parse_dotenv_value(raw: str) -> str | None:
    """One `.env` value: quoted ('...' literal, "..." with escapes) or bare; None if unterminated."""
    if raw[:1] == "'":
        end = raw.find("'", 1)
        if end < 0:
            return None
        return raw[1:end]
    if raw[:1] == '"':
        out: list[str] = []
        i = 1
        while i < len(raw):
            ch = raw[i]
            if ch == "\\" and i + 1 < len(raw):
                out.append(_DQ_ESCAPES.get(raw[i + 1], "\\" + raw[i + 1]))
                i += 2
                continue
            if ch == '"':
                return "".join(out)
            out.append(ch)
            i += 1
        return None
    comment = re.search(r"\s#", raw)
    if comment is not None:
        raw = raw[: comment.start()]
    return raw.strip()


def parse_dotenv(text: str, *, label: str = ".env") -> tuple[dict[str, str], list[str]]:
    """Parse a `.env` file: `KEY=VALUE`, `export KEY=VALUE`, quotes, `#` comments.

    Returns:
        The variables in file order (a later line wins) and one warning per line that was
        ignored because it could not be read.
    """
    values: dict[str, str] = {}
    warnings: list[str] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        m = _DOTENV_LINE_RE.match(stripped)
        value = None if m is None else _parse_dotenv_value(m[2])
        if m is None or value is None:
            what = "expected KEY=VALUE" if m is None else "unterminated quote"
            warnings.append(f"{label}: line {lineno} ignored ({what})")
            continue
        values[m[1]] = value
    return values, warnings
