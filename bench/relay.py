"""The least a trio stdio proxy can do: copy bytes both ways between its client and one upstream.

No parsing, no routing, no ids, no journal: what is left is trio's own cost of a call, the
two wake-ups (the client's line, then the upstream's answer) with a read and a write each,
through trio's own pipe streams (`trio.lowlevel.FdStream`). The bench runs it as the
``trio-relay`` row beside mcpvisor, so what mcpvisor's fast path costs per call can be read
against the floor any trio proxy has on the same machine in the same run, not only against
a figure in milliseconds that moves with the machine.

Usage: ``python bench/relay.py UPSTREAM_ARGV...``; exits when either side closes.
"""

from __future__ import annotations

import os
import subprocess
import sys

import trio

CHUNK = 65536


async def _pump(source: trio.abc.ReceiveStream, sink: trio.abc.SendStream) -> None:
    """Copy until ``source`` ends, then close ``sink`` (the other side sees EOF)."""
    async with sink:
        while chunk := await source.receive_some(CHUNK):
            await sink.send_all(chunk)


async def relay(argv: list[str]) -> int:
    """Relay this process's stdin/stdout to ``argv``'s; its exit status once both sides end."""
    client_in = trio.lowlevel.FdStream(os.dup(0))
    client_out = trio.lowlevel.FdStream(os.dup(1))
    proc = await trio.lowlevel.open_process(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdin is not None
    assert proc.stdout is not None
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_pump, client_in, proc.stdin)
            await _pump(proc.stdout, client_out)
            nursery.cancel_scope.cancel()  # the upstream is gone: nothing left to relay to
    finally:
        with trio.CancelScope(shield=True):
            if proc.returncode is None:
                proc.terminate()
            await proc.wait()
            await client_in.aclose()
    return proc.returncode or 0


def main() -> int:
    if len(sys.argv) < 2:
        print("usage: python bench/relay.py UPSTREAM_ARGV...", file=sys.stderr)
        return 2
    return trio.run(relay, sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
