"""``python -m supervisor`` is the ``mcpvisor`` command."""

import sys

from supervisor.cli import main

sys.exit(main())
