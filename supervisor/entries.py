"""Server entries as the command line and the dashboard both edit them.

Owns what a registry edit shares whichever face makes it:

* `open_store`: the `ConfigStore` every edit goes through, validating each document
  before it is written (`validate_document`: a `${VAR}` not set in this shell is not an
  error here, the proxy's environment may have it; `unset_variables` lists them as
  warnings);
* `mask_entry` and `MASK`: an entry as shown, every literal secret masked;
* `drop_empty`: an entry without the empty ``args``, ``env`` or ``headers`` that say nothing.

The config and the store are imported where used, so that ``mcpvisor --help`` stays quick.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from mcpvisor.redact import MASK, redact_entry

if TYPE_CHECKING:
    from mcpvisor.store import ConfigStore

__all__ = ["MASK", "PLACEHOLDER", "UNSET_VAR_RE", "LenientEnv", "drop_empty", "mask_entry", "open_store",
           "unset_variables", "validate_document"]

PLACEHOLDER: Final = "http://placeholder.invalid"
"""Stands for a `${VAR}` this shell does not set, while validating a document to write."""

UNSET_VAR_RE: Final = re.compile(r"variable \S+ is not set")
"""A config problem that only says a `${VAR}` is not set in this shell."""

EMPTY_DROPPED: Final = ("args", "env", "headers")
"""Keys an entry the CLI or the dashboard writes does not keep when empty: they say nothing."""


class LenientEnv(Mapping[str, str]):
    """The process environment, where every variable it lacks has a placeholder value."""

    def __getitem__(self, key: str) -> str:
        return os.environ.get(key, PLACEHOLDER)

    def __contains__(self, key: object) -> bool:
        return True

    def __iter__(self) -> Iterator[str]:
        return iter(os.environ)

    def __len__(self) -> int:
        return len(os.environ)


def validate_document(doc: dict[str, Any], path: Path) -> None:
    """Raise `ConfigError` if ``doc`` is not a valid config (variables this shell lacks excepted)."""
    from mcpvisor.config import ConfigError, parse_config

    try:
        parse_config(doc, path=path, env=LenientEnv())
    except ConfigError as err:
        real = [p for p in err.problems if not UNSET_VAR_RE.search(p)]
        if real:
            raise ConfigError(real, path) from None


def unset_variables(doc: dict[str, Any], path: Path) -> list[str]:
    """Warnings for `${VAR}` references this shell does not set (the proxy may)."""
    from mcpvisor.config import ConfigError, parse_config

    try:
        parse_config(doc, path=path)
    except ConfigError as err:
        return [p for p in err.problems if UNSET_VAR_RE.search(p)]
    return []


def open_store(path: Path) -> ConfigStore:
    from mcpvisor.store import ConfigStore

    return ConfigStore(path, validate=validate_document)


def mask_entry(entry: Mapping[str, Any]) -> dict[str, Any]:
    """A server entry from the file with every secret masked (`mcpvisor.redact.redact_entry`:
    header and env values, key-like args and URL query values, an OAuth client secret)."""
    return redact_entry(entry)


def drop_empty(entry: Mapping[str, Any]) -> dict[str, Any]:
    """``entry`` without an empty ``args``, ``env`` or ``headers``."""
    return {k: v for k, v in entry.items() if not (k in EMPTY_DROPPED and v in ({}, []))}
