"""Start an HTTP-serving proxy, wait for its port, then become a stdio proxy in front of it.

Used for the "mcp-proxy chain" peer: ``chain.py --port N --serve JSON_ARGV -- CLIENT_ARGV...``
starts ``JSON_ARGV`` (the HTTP server, inheriting this process group so the bench's stop
reaches it), waits until 127.0.0.1:N accepts, then ``exec``s ``CLIENT_ARGV`` with this
process's stdin/stdout, so the client's stdio goes straight to the stdio end of the chain.
Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time

PORT_WAIT_S = 60.0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--serve", required=True, help="the HTTP server's argv as a JSON list")
    parser.add_argument("client", nargs=argparse.REMAINDER)
    opts = parser.parse_args()
    client = opts.client[1:] if opts.client[:1] == ["--"] else opts.client
    server = subprocess.Popen(json.loads(opts.serve), stdin=subprocess.DEVNULL, stdout=sys.stderr.fileno())
    deadline = time.monotonic() + PORT_WAIT_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            print(f"chain: server exited with {server.returncode}", file=sys.stderr)
            return 1
        try:
            socket.create_connection(("127.0.0.1", opts.port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.02)
    else:
        server.kill()
        print(f"chain: nothing listened on port {opts.port}", file=sys.stderr)
        return 1
    os.execvp(client[0], client)


if __name__ == "__main__":
    sys.exit(main())
