"""The call journal of harness runs: every tool call recorded in an SQLite file.

`open_journal` / `Journal` write it (supervisor/journal/_writer.py); `summarise` and
`format_table` read it back (``mcpvisor journal PATH``; supervisor/journal/_summary.py).
"""

from __future__ import annotations

from mcpvisor.journal._summary import format_table, summarise
from mcpvisor.journal._writer import OUTCOMES, CallRecord, Journal, open_journal

__all__ = ["OUTCOMES", "CallRecord", "Journal", "format_table", "open_journal", "summarise"]
