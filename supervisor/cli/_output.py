"""Output helpers shared by the registry commands (``mcp``, ``toolset``, ``import``, ``config``).

Owns how the CLI talks to people and to scripts:

* tables and spinners through rich, on stderr/stdout only when they are terminals:
  colour and animation on a terminal, plain aligned text in a pipe or a file (rich
  honours ``NO_COLOR`` too);
* ``--format json`` (`add_format`, `print_json`): one JSON document on stdout, nothing else;
* prompts and confirmations only when stdin is a terminal (`interactive`), never in CI
  or a pipe;
* the error line every command prints (`error`) and secret masking (`mask`).

rich is imported lazily: ``mcpvisor --help`` should not pay for it.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Final, TextIO

from mcpvisor.redact import MASK

PIPE_WIDTH: Final = 200
"""Line width of tables written to a pipe or a file: wide enough that a script's
`grep` sees whole rows (rich would otherwise assume 80 columns)."""

def is_tty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def interactive() -> bool:
    """Whether we may ask the user something: stdin and stderr are terminals."""
    return is_tty(sys.stdin) and is_tty(sys.stderr)


def console(stream: TextIO | None = None) -> Any:
    """A rich Console for ``stream`` (default stdout): colour only on a terminal."""
    from rich.console import Console

    stream = sys.stdout if stream is None else stream
    tty = is_tty(stream)
    return Console(
        file=stream,
        force_terminal=tty,
        no_color=not tty,
        highlight=False,
        width=None if tty else PIPE_WIDTH,
        soft_wrap=not tty,
    )


def add_format(parser: argparse.ArgumentParser, choices: Sequence[str] = ("table", "json")) -> None:
    parser.add_argument(
        "--format",
        choices=tuple(choices),
        default=choices[0],
        help=f"output format (default: {choices[0]}); json is for scripts",
    )


def print_json(data: Any) -> None:
    """One JSON document on stdout (stable key order as given, 2-space indent)."""
    sys.stdout.write(json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def error(message: str) -> None:
    """``mcpvisor: error: ...`` on stderr, in red on a terminal."""
    if is_tty(sys.stderr):
        console(sys.stderr).print(f"[bold red]mcpvisor: error:[/] {_escape(message)}")
    else:
        sys.stderr.write(f"mcpvisor: error: {message}\n")


def note(message: str) -> None:
    """A remark for people on stderr (never mixed into data on stdout)."""
    if is_tty(sys.stderr):
        console(sys.stderr).print(f"[dim]{_escape(message)}[/]")
    else:
        sys.stderr.write(message + "\n")


def say(message: str, *, style: str | None = None) -> None:
    """A line for people on stdout (styled on a terminal)."""
    if style and is_tty(sys.stdout):
        console().print(f"[{style}]{_escape(message)}[/]")
    else:
        sys.stdout.write(message + "\n")


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)


def table(
    columns: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    title: str | None = None,
    styles: Mapping[str, Callable[[str], str | None]] | None = None,
) -> None:
    """Print a table on stdout: boxed and coloured on a terminal, plain columns in a pipe.

    Args:
        columns: header names.
        rows: cells, as text.
        styles: column name -> function of the cell giving a rich style (terminal only).
    """
    from rich import box
    from rich.table import Table
    from rich.text import Text

    out = console()
    tty = is_tty(sys.stdout)
    t = Table(
        title=title,
        box=box.SIMPLE_HEAD if tty else None,
        show_edge=False,
        pad_edge=False,
        header_style="bold" if tty else "",
        title_justify="left",
    )
    for name in columns:
        t.add_column(name, overflow="fold" if tty else "ignore", no_wrap=not tty)
    for row in rows:
        cells = []
        for name, cell in zip(columns, row, strict=True):
            style = styles.get(name, lambda _: None)(cell) if styles and tty else None
            cells.append(Text(cell, style=style or ""))
        t.add_row(*cells)
    out.print(t)


@contextmanager
def spinner(text: str) -> Iterator[Callable[[str], None]]:
    """A spinner on stderr while the block runs (terminal only); yields ``update(text)``."""
    if not is_tty(sys.stderr):
        yield lambda _text: None
        return
    with console(sys.stderr).status(text) as status:
        yield lambda new: status.update(new)


def confirm(question: str, *, default: bool = False) -> bool:
    """Ask a yes/no question on the terminal. Only call when `interactive()`."""
    from rich.prompt import Confirm

    return bool(Confirm.ask(question, default=default, console=console(sys.stderr)))


def ask(question: str, *, choices: Sequence[str] | None = None, default: str | None = None) -> str:
    """Ask for a value on the terminal. Only call when `interactive()`."""
    from rich.prompt import Prompt

    while True:
        answer = Prompt.ask(
            question, choices=list(choices) if choices else None, default=default, console=console(sys.stderr)
        )
        if answer and answer.strip():
            return str(answer).strip()


def mask(value: str) -> str:
    """A header or env value as `mcp info` shows it: a ``${VAR}`` reference as written
    (the secret lives in the environment), any literal as `MASK`."""
    return value if "${" in value else MASK


def seconds(value: float) -> str:
    """``12 ms`` / ``1.4 s`` for step timings."""
    if value < 1:
        return f"{value * 1000:.0f} ms"
    return f"{value:.1f} s"


FIRST_MODERN_VERSION: Final = "2026-07-28"
"""The first version without a handshake (mcp_types.version.MODERN_PROTOCOL_VERSIONS); dated
versions compare as strings, and the CLI does not import the SDK just to print a status."""


def era(protocol_version: str | None) -> str:
    """The protocol a server was opened in, with its era: ``2025-11-25 (handshake era)``,
    ``2026-07-28``, or ``-`` when it is not connected."""
    if not protocol_version:
        return "-"
    if protocol_version >= FIRST_MODERN_VERSION:
        return protocol_version
    return f"{protocol_version} (handshake era)"


def spoken(protocol_versions: Sequence[str] | None, protocol_version: str | None) -> str:
    """What a status view says a server speaks: `era` of its one version, or every version
    of a server reached in both eras (a dual-era HTTP server under ``auto``):
    ``2025-11-25 + 2026-07-28 (both eras)``."""
    versions = list(protocol_versions or ())
    if len(versions) < 2:
        return era(protocol_version or (versions[0] if versions else None))
    return f"{' + '.join(versions)} (both eras)"
