"""Machine stalls: spans when the whole machine stopped running our processes, seen by a canary.

On a shared virtual machine the host can pause every vCPU for hundreds of milliseconds, several
times a second (measured on the 2-core machine the README's figures come from: 0.1-0.5 s gaps
adding up to 3.5-4.2 s of every 6 s, the same with 0, 1, 2 or 3 CPU hogs running, so the pauses
are the host's doing, not a consequence of the load the bench puts on the machine). A paused
machine runs neither the direct baseline nor the proxy, so the medians survive it, but anything
measured as *calls / elapsed time* (throughput) or as a tail (p99) or as one span (start-up,
recovery) measures the host's scheduler instead of the subject.

The canary (bench/canary.py) is a tiny separate process at real-time priority (SCHED_FIFO) that
sleeps ``TICK_S`` in a loop and reports every wake-up that came more than ``THRESHOLD_S`` late:
a real-time task preempts every ordinary one when it wakes, so a late wake-up means the machine
itself did not run, never that the subjects kept both cores busy.
Both processes read ``CLOCK_MONOTONIC`` (``time.perf_counter`` on Linux), so the spans line up
with the bench's own timestamps. The scenarios then

* subtract the stalled time inside a throughput window, a start-up or a recovery span, and
* leave a call that overlapped a stall out of its latency percentiles (counted and reported).

Without the privilege for real-time priority the canary says so and nothing is subtracted
(the run's notes say the figures are then uncorrected).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

import trio

from mcpvisor.bench.canary import TICK_S
from mcpvisor.bench.procs import base_env

CANARY = Path(__file__).resolve().with_name("canary.py")
"""The canary script, resolved once at import rather than on the event loop."""


class StallWatch:
    """The bench's view of the canary: the stalls seen so far, and their overlap with a span."""

    def __init__(self) -> None:
        self.spans: list[tuple[float, float]] = []
        self.running = False
        self.unavailable: str | None = None
        """Why the canary could not watch (no real-time priority): nothing is then subtracted."""

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the canary until cancelled (a nursery task). Without it every overlap is 0."""
        argv = [sys.executable, "-S", str(CANARY)]
        proc = await trio.lowlevel.open_process(argv, env=base_env(), stdin=subprocess.DEVNULL,
                                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        assert proc.stdout is not None
        buf = b""
        try:
            while b"\n" not in buf and (chunk := await proc.stdout.receive_some()):
                buf += chunk
            first, _, buf = buf.partition(b"\n")
            if first != b"ready":
                why = first.decode(errors="replace").removeprefix("unavailable ")
                self.unavailable = why or "it did not start"
                task_status.started()
                return
            self.running = True
            task_status.started()
            while chunk := await proc.stdout.receive_some():
                buf += chunk
                *lines, buf = buf.split(b"\n")
                for line in lines:
                    start, end = line.split()
                    self.spans.append((float(start), float(end)))
        finally:
            self.running = False
            with trio.CancelScope(shield=True):
                proc.kill()
                await proc.wait()

    async def settle(self) -> None:
        """Let a stall that ended just now reach us: the canary reports it on its next tick."""
        if self.running:
            await trio.sleep(3 * TICK_S)

    def overlap(self, t0: float, t1: float) -> float:
        """Seconds of ``[t0, t1]`` the machine spent stalled."""
        total = 0.0
        for start, end in reversed(self.spans):
            if end <= t0:
                break  # spans arrive in time order
            total += max(0.0, min(end, t1) - max(start, t0))
        return total

    def clean(self, calls: Iterable[tuple[float, float]]) -> tuple[list[float], int]:
        """Durations of the ``(t0, t1)`` calls that overlapped no stall, and how many did."""
        kept, dropped = [], 0
        for t0, t1 in calls:
            if self.overlap(t0, t1) > 0:
                dropped += 1
            else:
                kept.append(t1 - t0)
        return kept, dropped

    @property
    def total(self) -> float:
        return sum(end - start for start, end in self.spans)

WATCH = StallWatch()
"""The run's one watch (started by bench.cli); scenarios read it."""
