"""A handshake-era MCP server that leaks its secrets on stderr (stdio, STANDARD LIBRARY ONLY).

At start it prints every argument and the value of every environment variable named in
``--print-env`` to stderr, as a careless server does ("starting with key sk-..."). Its
tools:

* ``environment(name)``: whether the variable ``name`` is in its environment (``"set"``
  or ``"unset"``), to see what the proxy let it inherit;
* ``say(text)``: ``text`` back, and the same text on stderr.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

TOOLS = [
    {
        "name": "environment",
        "description": "Whether an environment variable is set.",
        "inputSchema": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
    },
    {
        "name": "say",
        "description": "Say the text back, and on stderr.",
        "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    },
]


def answer(request_id: Any, result: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}) + "\n")
    sys.stdout.flush()


def text(value: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": value}]}


def main() -> None:
    args = sys.argv[1:]
    names: list[str] = []
    if "--print-env" in args:
        names = args[args.index("--print-env") + 1].split(",")
    sys.stderr.write(f"leaky starting with arguments {' '.join(args)}\n")
    for name in names:
        sys.stderr.write(f"leaky: {name}={os.environ.get(name, '')}\n")
    sys.stderr.flush()
    for line in sys.stdin:
        message = json.loads(line)
        method, request_id = message.get("method"), message.get("id")
        if request_id is None:
            continue
        if method == "initialize":
            answer(request_id, {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "leaky", "version": "1"},
            })
        elif method == "tools/list":
            answer(request_id, {"tools": TOOLS})
        elif method == "tools/call":
            name, arguments = message["params"]["name"], message["params"].get("arguments") or {}
            if name == "environment":
                answer(request_id, text("set" if arguments["name"] in os.environ else "unset"))
            else:
                sys.stderr.write(f"leaky says {arguments['text']}\n")
                sys.stderr.flush()
                answer(request_id, text(arguments["text"]))
        elif method == "ping":
            answer(request_id, {})
        else:
            sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": request_id,
                                         "error": {"code": -32601, "message": "method not found"}}) + "\n")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
