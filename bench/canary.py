"""The stall canary (see bench/stalls.py): sleep a tick, report every wake-up that came late.

Standard library only and run with ``python -S``, so it starts in milliseconds. First line
``ready`` (or ``unavailable REASON``: no real-time priority), then one line ``START END``
(``time.perf_counter``, i.e. CLOCK_MONOTONIC) per stall, until stdout closes or the bench that
started it is gone.
"""

from __future__ import annotations

import os
import sys
import time

TICK_S = 0.005
THRESHOLD_S = 0.05
"""A wake-up this late (10 ticks) means the machine was paused, not merely busy."""


def main() -> None:
    # Real-time priority: a SCHED_FIFO task preempts every ordinary one as soon as it wakes, so a
    # late wake-up means the machine itself did not run, never that the subjects kept the CPU
    # busy. Without it (no privilege) the canary cannot tell the two apart and reports nothing.
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
    except (AttributeError, OSError) as exc:
        sys.stdout.write(f"unavailable {exc}\n")
        sys.stdout.flush()
        return
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    parent = os.getppid()
    last = time.perf_counter()
    ticks = 0
    while True:
        time.sleep(TICK_S)
        now = time.perf_counter()
        if now - last > THRESHOLD_S:
            try:
                sys.stdout.write(f"{last + TICK_S:.6f} {now:.6f}\n")
                sys.stdout.flush()
            except OSError:  # the bench closed the pipe
                return
        last = now
        ticks += 1
        if ticks % 200 == 0 and os.getppid() != parent:
            return


if __name__ == "__main__":
    main()
