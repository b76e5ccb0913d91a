"""What every subcommand module shares: the exit codes and the help formatter.

Kept apart from the package's ``__init__`` (which builds the parser from the subcommand
modules) so a subcommand never imports the module that imports it.
"""

from __future__ import annotations

import argparse
from typing import Final

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2
"""Exit codes: 0 ok, 1 a failed check, 2 bad usage or a bad config."""


class Formatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the examples in epilogs as written."""
