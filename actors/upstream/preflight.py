"""What makes a server impossible to start, found before anything is spawned.

Owns the checks an upstream actor runs before each start, each of which makes the server
``misconfigured`` (no process, no restart loop, no circuit breaker: retrying cannot help
until the config or the machine changes) with a reason the user can act on:

* the entry itself could not be used (`ServerSpec.misconfigured`: an unset ``${VAR}``,
  an invalid field), decided when the config was read;
* the server would be mcpvisor itself (`runs_mcpvisor`): ``mcpvisor serve`` or
  ``python -m mcpvisor serve``; a wrapper that hides it (``sh -c``, ``npx``, ``uvx``)
  is caught by the child instead, through `mcpvisor.actors.process.PARENT_ENV`, and its
  refusal is recognised by `refused_as_self`;
* the command does not exist, or is not executable, or the working directory is missing.
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from mcpvisor.actors.core.argv import stdio_argv
from mcpvisor.actors.core.spec import ServerSpec
from mcpvisor.actors.process import SELF_REFUSAL, child_environment

__all__ = ["SELF_REASON", "preflight", "refused_as_self", "runs_mcpvisor", "self_reason"]

SCRIPT_NAME: Final = "mcpvisor"
"""The console script of this package (pyproject ``[project.scripts]``)."""
MODULE_NAME: Final = "mcpvisor"
"""The package ``python -m`` runs as the CLI."""
SERVE: Final = "serve"

SELF_REASON: Final = (
    "this server is mcpvisor itself ({how}): a proxy never runs itself as one of its own "
    "servers (it would read the same config and start itself again, without end); remove "
    "this entry, or give the inner proxy another config with --config"
)


def _our_scripts() -> set[str]:
    """The real paths of this installation's ``mcpvisor`` script."""
    places = [Path(sysconfig.get_path("scripts")) / SCRIPT_NAME, Path(sys.executable).parent / SCRIPT_NAME]
    if Path(sys.argv[0]).name == SCRIPT_NAME:
        places.append(Path(sys.argv[0]))
    return {os.path.realpath(p) for p in places}


def runs_mcpvisor(argv: Sequence[str], *, path: str | None) -> bool:
    """Whether ``argv`` runs ``mcpvisor serve``: the ``mcpvisor`` script (by name or by
    resolving to this installation's), or a Python running ``-m supervisor serve``."""
    if not argv or SERVE not in argv[1:]:
        return False
    command = argv[0]
    if Path(command).name == SCRIPT_NAME:
        return True
    resolved = os.path.realpath(shutil.which(command, path=path) or command)
    if resolved in _our_scripts():
        return True
    python = Path(command).name.startswith("python") or resolved == os.path.realpath(sys.executable)
    args = list(argv[1:])
    if python and "-m" in args:
        at = args.index("-m")
        return args[at + 1 : at + 2] == [MODULE_NAME] and SERVE in args[at + 2 :]
    return False


def _missing(argv: Sequence[str], *, path: str | None, cwd: str | None) -> str | None:
    """Why ``argv`` cannot be executed in ``cwd``, or None when it can."""
    command = argv[0] if argv else ""
    if not command:
        return 'field "command" is empty'
    if cwd is not None and not os.path.isdir(cwd):
        return f"working directory does not exist: {cwd}"
    if os.sep not in command:
        if shutil.which(command, path=path) is None:
            return f"command not found on PATH: {command}"
        return None
    full = command if os.path.isabs(command) else os.path.join(cwd or os.getcwd(), command)
    if not os.path.isfile(full):
        return f"command not found: {command}"
    if not os.access(full, os.X_OK):
        return f"command is not executable: {command}"
    return None


def preflight(spec: ServerSpec) -> str | None:
    """Why ``spec`` can never start as it is, or None when a start may be tried.

    Cheap (a few ``stat`` calls); runs before each start, so a command installed since
    the last try is found on an explicit restart.
    """
    if spec.misconfigured:
        return spec.misconfigured
    if spec.transport not in ("stdio", "stdio-docker"):
        return None
    itself = self_reason(spec)
    if itself is not None:
        return itself
    argv = stdio_argv(spec)
    return _missing(argv, path=child_environment(spec.env).get("PATH"), cwd=spec.cwd)


def self_reason(spec: ServerSpec) -> str | None:
    """`SELF_REASON` when ``spec`` starts ``mcpvisor serve`` (see `runs_mcpvisor`), else None."""
    if spec.transport not in ("stdio", "stdio-docker"):
        return None
    argv = stdio_argv(spec)
    if runs_mcpvisor(argv, path=child_environment(spec.env).get("PATH")):
        return SELF_REASON.format(how=" ".join(argv[:4]))
    return None


def refused_as_self(failure: str) -> bool:
    """Whether a failed start was a child ``mcpvisor serve`` refusing to be our server."""
    return SELF_REFUSAL in failure
