"""The benchmark upstream: a lean handshake-era MCP server on stdio.

Standard library + msgspec only (no ``mcp`` import), so it starts in tens of
milliseconds and answers in microseconds: what the bench measures is the client's and
the proxy's cost, not this server's. Started with ``python -S`` (no site-packages) it uses
the standard library's json instead of msgspec and starts in half the time (the recovery
scenario, which waits for its start). Speaks newline-delimited JSON-RPC 2.0, protocol
2025-11-25 (older handshake versions are echoed back); answers ``initialize``,
``notifications/initialized``, ``ping``, ``tools/list`` and ``tools/call``; anything
else (``server/discover`` included) gets -32601.

Tools:
    echo(text)     the text back, as it came
    payload(size)  a text result of exactly ``size`` bytes
    sleep(ms)      answers after ``ms`` milliseconds from a timer thread; other requests keep being served
    work(ms)       burns ``ms`` milliseconds of CPU, then answers (a "real" tool's cost)
    tool_0..       ``--tools N`` generated tools with realistic descriptions and schemas
                   (for the tools/list size scenario); each answers like echo

Usage: ``python [-S] bench/upstream.py [--name NAME] [--tools N] [--bare] [--start-delay S]``. Exits 0 on
stdin EOF.
"""

from __future__ import annotations

import os
import sys
import threading
import time

TYPE_CHECKING = False  # not typing's: its import is a tenth of a lean start (mypy knows the name)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, Final

try:
    import msgspec
except ImportError:  # started with ``python -S`` (no site-packages): the standard library's json
    msgspec = None  # type: ignore[assignment]

PROTOCOL_VERSION: Final = "2025-11-25"
SUPPORTED_VERSIONS: Final = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
PARSE_ERROR: Final = -32700
MAX_PAYLOAD: Final = 64 * 1024 * 1024
"""payload(size) refuses more than this: the bench never asks for more than a few MiB."""

_S: Final = {"type": "string"}
_I: Final = {"type": "integer", "minimum": 0}

BASE_TOOLS: Final[list[dict[str, Any]]] = [
    {"name": "echo", "description": "Return the given text unchanged.",
     "inputSchema": {"type": "object", "properties": {"text": _S}, "required": ["text"]},
     "annotations": {"readOnlyHint": True}},
    {"name": "payload", "description": "Return a text result of exactly `size` bytes.",
     "inputSchema": {"type": "object", "properties": {"size": _I}, "required": ["size"]},
     "annotations": {"readOnlyHint": True}},
    {"name": "sleep", "description": "Answer after `ms` milliseconds (other calls are served meanwhile).",
     "inputSchema": {"type": "object", "properties": {"ms": {"type": "number", "minimum": 0}},
                     "required": ["ms"]}},
    {"name": "work",
     "description": "Burn `ms` milliseconds of CPU, then answer (a tool that does real work).",
     "inputSchema": {"type": "object", "properties": {"ms": {"type": "number", "minimum": 0}},
                     "required": ["ms"]}},
]

_VERBS: Final = ("search", "get", "create", "update", "list", "delete", "summarize", "export", "sync",
                 "inspect")
_NOUNS: Final = ("issues", "pull requests", "documents", "calendar events", "files", "messages",
                 "deployments", "tickets", "records", "commits")


def generated_tool(server: str, i: int) -> dict[str, Any]:
    """A plausible tool definition: a paragraph of description and a schema with a few typed fields."""
    verb, noun = _VERBS[i % len(_VERBS)], _NOUNS[(i // len(_VERBS) + i) % len(_NOUNS)]
    return {
        "name": f"tool_{i}",
        "title": f"{verb.title()} {noun}",
        "description": (
            f"{verb.title()} {noun} in the {server} workspace. Use this when the user asks to {verb} "
            f"{noun} by keyword, owner or date range. Results are paginated: pass the returned cursor to "
            f"get the next page. Returns a JSON list with id, title, author, created and updated times."
        ),
        "inputSchema": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": f"Free-text filter for the {noun}."},
                "owner": {"type": "string", "description": "Only items owned by this user (login name)."},
                "since": {"type": "string", "format": "date-time",
                          "description": "Only items changed after this."},
                "limit": {"type": "integer", "minimum": 1, "maximum": 100, "default": 20,
                          "description": "Page size."},
                "cursor": {"type": "string", "description": "Cursor from a previous page."},
            },
            "required": ["query"],
            "additionalProperties": False,
        },
        "annotations": {"readOnlyHint": verb in ("search", "get", "list", "summarize", "export", "inspect")},
    }


class Upstream:
    """One stdio session: a reader loop on the main thread, a lock around stdout."""

    def __init__(self, name: str, extra_tools: int, bare: bool = False) -> None:
        self.name = name
        self.tools = ([] if bare else BASE_TOOLS) + [generated_tool(name, i) for i in range(extra_tools)]
        self.tool_names = {t["name"] for t in self.tools}
        self.out = os.fdopen(sys.stdout.fileno(), "wb", buffering=0, closefd=False)
        self.lock = threading.Lock()
        self.encode: Callable[[Any], bytes]
        self.decode: Callable[[bytes], Any]
        if msgspec is not None:
            self.encode = msgspec.json.Encoder().encode
            self.decode = msgspec.json.Decoder().decode
            self.decode_error: type[Exception] = msgspec.DecodeError
        else:
            import json

            dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
            self.encode = lambda obj: dumps(obj).encode()
            self.decode = json.loads
            self.decode_error = ValueError

    def write(self, message: dict[str, Any]) -> None:
        data = self.encode(message) + b"\n"
        with self.lock:
            try:
                self.out.write(data)
            except (BrokenPipeError, OSError):
                os._exit(0)

    def result(self, request_id: Any, result: dict[str, Any]) -> None:
        self.write({"jsonrpc": "2.0", "id": request_id, "result": result})

    def error(self, request_id: Any, code: int, message: str) -> None:
        self.write({"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}})

    def text(self, request_id: Any, text: str) -> None:
        self.result(request_id, {"content": [{"type": "text", "text": text}], "isError": False})

    def handle(self, line: bytes) -> None:
        try:
            msg = self.decode(line)
        except self.decode_error:
            self.error(None, PARSE_ERROR, "Parse error")
            return
        if not isinstance(msg, dict):
            return
        method = msg.get("method")
        if method is None or "id" not in msg:
            return  # a notification (initialized, cancelled) or a stray response
        rid = msg["id"]
        params = msg.get("params") or {}
        if method == "tools/call":
            self.call(rid, params)
        elif method == "tools/list":
            self.result(rid, {"tools": self.tools})
        elif method == "ping":
            self.result(rid, {})
        elif method == "initialize":
            asked = params.get("protocolVersion")
            self.result(rid, {
                "protocolVersion": asked if asked in SUPPORTED_VERSIONS else PROTOCOL_VERSION,
                "capabilities": {"tools": {"listChanged": False}},
                "serverInfo": {"name": self.name, "version": "1.0.0"},
            })
        else:
            self.error(rid, METHOD_NOT_FOUND, f"Method not found: {method}")

    def call(self, rid: Any, params: dict[str, Any]) -> None:
        name = str(params.get("name") or "")
        args = params.get("arguments") or {}
        try:
            if name == "echo":
                self.text(rid, str(args["text"]))
            elif name == "payload":
                size = int(args["size"])
                if not 0 <= size <= MAX_PAYLOAD:
                    raise ValueError(f"size must be 0..{MAX_PAYLOAD}")
                self.text(rid, "x" * size)
            elif name == "sleep":
                delay = float(args["ms"]) / 1000.0
                threading.Timer(delay, self.text, (rid, f"slept {args['ms']}")).start()
            elif name == "work":
                end = time.perf_counter() + float(args["ms"]) / 1000.0
                n = 0
                while time.perf_counter() < end:
                    n += 1
                self.text(rid, f"worked {args['ms']}")
            elif name in self.tool_names or name.startswith("tool_"):
                self.text(rid, f"{name}: {self.encode(args).decode()}")
            else:
                self.error(rid, INVALID_PARAMS, f"Unknown tool: {name}")
        except (KeyError, TypeError, ValueError) as exc:
            self.error(rid, INVALID_PARAMS, f"Invalid arguments for {name}: {exc}")

    def serve(self) -> None:
        stdin = sys.stdin.buffer
        for line in stdin:
            if line.strip():
                self.handle(line)


def quick_args(argv: list[str]) -> tuple[str, int, bool, float] | None:
    """``--name``, ``--tools``, ``--bare`` and ``--start-delay`` read without argparse (its
    import is a third of a lean start); None for anything else (``--help``, a mistake), which
    argparse then reads and explains."""
    name, tools, bare, delay = "bench", 0, False, 0.0
    args = iter(argv)
    try:
        for arg in args:
            if arg == "--name":
                name = next(args)
            elif arg == "--tools":
                tools = int(next(args))
            elif arg == "--bare":
                bare = True
            elif arg == "--start-delay":
                delay = float(next(args))
            else:
                return None
    except (StopIteration, ValueError):
        return None
    return name, tools, bare, delay


def main(argv: list[str] | None = None) -> int:
    quick = quick_args(sys.argv[1:] if argv is None else argv)
    if quick is not None:
        return run(*quick)
    import argparse

    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--name", default="bench",
                        help="serverInfo name and the workspace in tool descriptions")
    parser.add_argument("--tools", type=int, default=0, metavar="N", help="add N generated tools tool_0..")
    parser.add_argument("--bare", action="store_true",
                        help="list only the generated tools (echo etc. still answer)")
    parser.add_argument("--start-delay", type=float, default=0.0, metavar="S",
                        help="read nothing for S seconds first (a server that is slow to start)")
    opts = parser.parse_args(argv)
    return run(opts.name, opts.tools, opts.bare, opts.start_delay)


def run(name: str, tools: int, bare: bool, start_delay: float) -> int:
    if start_delay > 0:
        time.sleep(start_delay)
    try:
        Upstream(name, tools, bare).serve()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
