"""The command line of ``mcpvisor mcp add``: its options, and where the server's command starts.

`split_argv` runs on the whole ``mcpvisor`` argv before argparse sees it (see
`mcpvisor.cli.main`): everything after the first ``--`` is the server's command and
arguments, verbatim; without ``--``, the first word after NAME that is not a URL starts
it. argparse then parses only our part, once, and cannot take the command's options
(``-y``, ``-m``, ``--transport``) for ours.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Final

from mcpvisor.actors.core.vocabulary import TRANSPORTS
from mcpvisor.cli import _output as out
from mcpvisor.cli.config_cmd import config_option
from mcpvisor.cli.mcp._common import SCOPE_CHOICES

COMMAND_DEST: Final = "command_argv"
"""Where `split_argv`'s command lands in the parsed arguments (None: no command given)."""

URL_SCHEMES: Final = ("http", "https", "ws", "wss")


def scope_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-s",
        "--scope",
        choices=SCOPE_CHOICES,
        help="local (default): the config the lookup finds, else ./mcpvisor.json; "
        "project: ./.mcp.json; user: the user config",
    )


def add_options(add: argparse.ArgumentParser) -> None:
    """The options of `mcp add` (`split_argv` reads which of them take a value)."""
    add.add_argument(
        "-t",
        "--transport",
        choices=TRANSPORTS,
        help="stdio (default with a command), http (default with a URL), sse, ws, stdio-docker",
    )
    add.add_argument("--url", help="the server's URL (http, sse, ws)")
    add.add_argument(
        "-H",
        "--header",
        action="append",
        default=[],
        metavar="K=V",
        help='an HTTP header (repeatable); "K: V" works too',
    )
    add.add_argument(
        "-e",
        "--env",
        action="append",
        default=[],
        metavar="K=V",
        help="an environment variable for the server process (repeatable)",
    )
    add.add_argument("--image", help="the docker image (stdio-docker)")
    add.add_argument(
        "--docker-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="an extra `docker run` argument (stdio-docker, repeatable)",
    )
    add.add_argument("--cwd", metavar="DIR", help="working directory of the server process (stdio)")
    add.add_argument("--description", metavar="TEXT", help="what the server is for (shown in `mcp list`)")
    add.add_argument("--disabled", action="store_true", help="add it disabled (the proxy will not start it)")
    add.add_argument("--lazy", action="store_true", help="start it only when one of its tools is needed")
    add.add_argument(
        "--timeout", metavar="DURATION", help='call timeout, e.g. "30s" or "500ms" (default 60s)'
    )
    add.add_argument("--client-id", metavar="ID", help="a pre-registered OAuth client id (http, sse)")
    add.add_argument("--client-secret", metavar="SECRET",
                     help='its secret; "${VAR}" keeps it in the environment (http, sse)')
    add.add_argument("--callback-port", type=int, metavar="PORT",
                     help="the port of the login's redirect URI on 127.0.0.1 (http, sse)")
    scope_option(add)
    add.add_argument("--force", action="store_true", help="replace a server of the same name")
    out.add_format(add, ("text", "json"))


def _value_options() -> frozenset[str]:
    """Every option string of `mcp add` that takes a value (so the next word is not ours to read)."""
    parser = argparse.ArgumentParser(add_help=False, parents=[config_option()])
    add_options(parser)
    return frozenset(
        option for action in parser._actions if action.nargs != 0 for option in action.option_strings
    )


def _takes_next(word: str, value_options: frozenset[str]) -> bool:
    """Whether option ``word`` takes the next word as its value (not ``--url=X``, ``-eK=V``)."""
    if word.startswith("--"):
        return "=" not in word and word in value_options
    return len(word) == 2 and word in value_options


def split_argv(argv: Sequence[str]) -> tuple[list[str], list[str] | None]:
    """Split an ``mcpvisor`` command line into what argparse parses and the server's command.

    Only ``mcp add`` is split; any other command line comes back whole, with None. In
    ``mcp add``, the command is everything after the first ``--`` (an empty list when
    nothing follows it). Without ``--``, it starts at the first word after NAME that is not
    an option, an option's value, or a URL right after NAME. NAME and the URL are moved
    right after ``add`` so that argparse takes them as its two positionals whatever options
    stand between them; a stray word before ``--`` is left for `run_add` to refuse.
    """
    words = list(argv)
    if not words or words[0] != "mcp":
        return words, None
    i = 1
    while i < len(words) and words[i].startswith("-") and words[i] != "--":  # mcp's own options
        i += 2 if words[i] == "--config" else 1
    if i >= len(words) or words[i] != "add":
        return words, None
    start = i + 1
    ours, command = words[start:], None
    if "--" in ours:
        dashes = ours.index("--")
        ours, command = ours[:dashes], ours[dashes + 1 :]
    value_options = _value_options()
    positionals: list[str] = []
    options: list[str] = []
    j = 0
    while j < len(ours):
        word = ours[j]
        if word.startswith("-") and word != "-":
            take = 2 if _takes_next(word, value_options) else 1
            options += ours[j : j + take]
            j += take
            continue
        if command is None and positionals and not (len(positionals) == 1 and looks_like_url(word)):
            command = ours[j:]  # no --: the command starts here, its options are its own
            break
        positionals.append(word)
        j += 1
    return [*words[:start], *positionals, *options], command


def looks_like_url(text: str) -> bool:
    return "://" in text and text.split("://", 1)[0].lower() in URL_SCHEMES
