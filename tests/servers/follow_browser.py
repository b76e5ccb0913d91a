#!/usr/bin/env python3
"""A ``$BROWSER`` for tests (STANDARD LIBRARY ONLY): GET the URL it is given and follow the
redirects, as a person's browser does after they click "allow" (the authorization servers
of the tests and of the conformance suite redirect at once).

Python's `webbrowser` runs ``$BROWSER URL`` and waits for it; exit 0 means the page was
fetched (the last redirect reached the login's loopback listener).
"""

import sys
import urllib.request

TIMEOUT_S = 30.0
"""Bound on the whole page load (the authorization server and the loopback listener are local)."""


def main() -> int:
    with urllib.request.urlopen(sys.argv[1], timeout=TIMEOUT_S) as response:
        response.read()
    return 0


if __name__ == "__main__":
    sys.exit(main())
