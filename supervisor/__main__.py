"""``python -m mcpvisor`` is the ``mcpvisor`` command."""

import sys

from mcpvisor.cli import main

sys.exit(main())
