"""``python -m mcpvisor.bench``: see `mcpvisor.bench.cli`."""

from __future__ import annotations

import sys

from mcpvisor.bench.cli import main

if __name__ == "__main__":
    sys.exit(main())
