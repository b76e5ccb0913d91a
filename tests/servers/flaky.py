"""A fault-injecting handshake-era MCP server for tests (stdio, STANDARD LIBRARY ONLY).

Speaks newline-delimited JSON-RPC 2.0 on stdin/stdout, protocol era 2024-11-05 ..
2025-11-25 only (no ``server/discover``: it gets -32601 like any unknown method, or no
answer at all with ``--ignore-unknown``). Imports nothing from ``mcp`` so it starts in
tens of milliseconds and behaves exactly as the flags say, byte for byte.

Run ``python tests/servers/flaky.py --help`` for the flags; they combine.

Tools: echo(text), add(a, b), sleep(seconds), progress(steps, interval), crash(status),
counter(), idem_echo(text) [idempotentHint: true], plain_echo(text) [no annotations];
with ``--sampling-flood`` also sampling_flood(count, wait_for).

``--record PATH`` appends one JSON line per event: ``{"event": "initialize",
"protocolVersion"}``, ``{"event": "call", "name", "id", "arguments"}``,
``{"event": "cancelled", "requestId", "reason"}``, ``{"event": "ping"}``; each line also
has ``"server"``, ``"pid"`` and ``"t"``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

SUPPORTED_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
DEFAULT_VERSION = "2025-11-25"

METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
PARSE_ERROR = -32700
INVALID_REQUEST = -32600


def _schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema


_S = {"type": "string"}
_N = {"type": "number"}
TOOLS: list[dict[str, Any]] = [
    {
        "name": "echo",
        "description": "Echo the text back as 'echo: {text}'.",
        "inputSchema": _schema({"text": _S}, ["text"]),
        "annotations": {"readOnlyHint": True},
    },
    {
        "name": "add",
        "description": "Add two numbers.",
        "inputSchema": _schema({"a": _N, "b": _N}, ["a", "b"]),
        "outputSchema": _schema({"sum": _N}, ["sum"]),
        "annotations": {"readOnlyHint": True},
    },
    {
        "name": "sleep",
        "description": "Answer 'slept {seconds}' after the delay (other requests keep being served).",
        "inputSchema": _schema({"seconds": _N}, ["seconds"]),
    },
    {
        "name": "progress",
        "description": "Send `steps` progress notifications `interval` s apart, then 'done {steps}'.",
        "inputSchema": _schema(
            {"steps": {"type": "integer"}, "interval": {"type": "number", "default": 0.05}}, ["steps"]
        ),
    },
    {
        "name": "crash",
        "description": "Exit the process with `status` (default 3) mid-call.",
        "inputSchema": _schema({"status": {"type": "integer", "default": 3}}, []),
    },
    {
        "name": "counter",
        "description": "Increment a per-process counter and return it.",
        "inputSchema": _schema({}, []),
        "annotations": {"idempotentHint": False},
    },
    {
        "name": "idem_echo",
        "description": "Echo, declared idempotent (retry-safe).",
        "inputSchema": _schema({"text": _S}, ["text"]),
        "annotations": {"idempotentHint": True},
    },
    {
        "name": "plain_echo",
        "description": "Echo with no annotations (not retry-safe).",
        "inputSchema": _schema({"text": _S}, ["text"]),
    },
]
TOOL_NAMES = {tool["name"] for tool in TOOLS}
FLOOD_TOOL: dict[str, Any] = {
    "name": "sampling_flood",
    "description": "Send `count` sampling/createMessage requests at once; answer once `wait_for` of "
    "them got a response: 'responses R errors E first_error M'.",
    "inputSchema": _schema({"count": {"type": "integer"}, "wait_for": {"type": "integer"}}, ["count"]),
}
"""Listed only with ``--sampling-flood`` (the other tests count the tools above)."""


class Flaky:
    def __init__(self, opts: argparse.Namespace) -> None:
        self.opts = opts
        self.write_lock = threading.Lock()
        self.state_lock = threading.Lock()
        self.out = sys.stdout.buffer
        self.calls = 0
        self.counter = 0
        self.hung = opts.hang_after is not None and opts.hang_after <= 0
        # In-flight requests that answer later (sleep, progress): id -> cancel event.
        self.pending: dict[Any, threading.Event] = {}
        # sampling_flood: responses to its requests so far.
        self.flood = threading.Condition()
        self.flood_responses = 0
        self.flood_errors = 0
        self.flood_first_error: str | None = None

    # ------------------------------------------------------------------ output
    def write_raw(self, data: bytes) -> None:
        with self.write_lock:
            try:
                self.out.write(data)
                self.out.flush()
            except (BrokenPipeError, ValueError, OSError):
                os._exit(0)

    def send(self, message: dict[str, Any]) -> None:
        self.write_raw(json.dumps(message, separators=(",", ":")).encode() + b"\n")

    def result(self, request_id: Any, result: dict[str, Any]) -> None:
        self.send({"jsonrpc": "2.0", "id": request_id, "result": result})

    def error(self, request_id: Any, code: int, message: str) -> None:
        self.send({"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}})

    def record(self, event: str, **fields: Any) -> None:
        if self.opts.record is None:
            return
        line = {"event": event, "server": self.opts.name, "pid": os.getpid(), "t": time.time(), **fields}
        with self.state_lock, open(self.opts.record, "a", encoding="utf-8") as f:
            f.write(json.dumps(line, default=str) + "\n")

    # ------------------------------------------------------------------ pending requests
    def start_pending(self, request_id: Any) -> threading.Event:
        cancel = threading.Event()
        with self.state_lock:
            self.pending[request_id] = cancel
        return cancel

    def finish_pending(self, request_id: Any, result: dict[str, Any]) -> None:
        """Answer a deferred request unless it was cancelled meanwhile."""
        with self.state_lock:
            cancel = self.pending.pop(request_id, None)
        if cancel is None or cancel.is_set():
            return
        self.call_result(request_id, result)

    def call_result(self, request_id: Any, result: dict[str, Any]) -> None:
        if self.opts.garbage_stdout == "calls":
            self.write_raw(b"garbage: this line is not JSON-RPC\n")
        self.result(request_id, result)

    # ------------------------------------------------------------------ dispatch
    def handle_line(self, line: bytes) -> None:
        line = line.strip()
        if not line:
            return
        try:
            msg = json.loads(line)
        except ValueError:
            self.error(None, PARSE_ERROR, "Parse error")
            return
        if not isinstance(msg, dict):
            self.error(None, INVALID_REQUEST, "Invalid request")
            return
        method = msg.get("method")
        if not isinstance(method, str):
            self.handle_response(msg)
            return
        if "id" not in msg:
            self.handle_notification(method, msg.get("params") or {})
            return
        request_id = msg["id"]
        params = msg.get("params") or {}
        if self.hung:
            return
        if method == "initialize":
            self.handle_initialize(request_id, params)
        elif method == "ping":
            self.record("ping")
            self.result(request_id, {})
        elif method == "tools/list":
            self.result(request_id, {"tools": TOOLS + ([FLOOD_TOOL] if self.opts.sampling_flood else [])})
            if self.opts.exit_after_start is not None:
                # Up and listed, then gone before any client call: a start that did nothing.
                timer = threading.Timer(self.opts.exit_after_start, os._exit, args=(3,))
                timer.daemon = True
                timer.start()
        elif method == "tools/call":
            self.handle_call(request_id, params)
        elif self.opts.ignore_unknown:
            return
        else:
            self.error(request_id, METHOD_NOT_FOUND, "Method not found")

    def handle_response(self, msg: dict[str, Any]) -> None:
        """A response to one of our sampling_flood requests (anything else is ignored)."""
        rid = msg.get("id")
        if not (isinstance(rid, str) and rid.startswith("flood-")):
            return
        with self.flood:
            self.flood_responses += 1
            error = msg.get("error")
            if isinstance(error, dict):
                self.flood_errors += 1
                if self.flood_first_error is None:
                    self.flood_first_error = str(error.get("message"))
            self.flood.notify_all()

    def handle_notification(self, method: str, params: dict[str, Any]) -> None:
        if method != "notifications/cancelled":
            return
        request_id = params.get("requestId")
        self.record("cancelled", requestId=request_id, reason=params.get("reason"))
        with self.state_lock:
            cancel = self.pending.pop(request_id, None)
        if cancel is not None:
            cancel.set()

    def handle_initialize(self, request_id: Any, params: dict[str, Any]) -> None:
        requested = params.get("protocolVersion")
        self.record("initialize", protocolVersion=requested)
        if self.opts.slow_start:
            time.sleep(self.opts.slow_start)
        if self.opts.start_gate:
            while not os.path.exists(self.opts.start_gate):  # the test opens the gate when it is ready
                time.sleep(0.01)
        if self.opts.refuse_initialize:
            self.error(request_id, INVALID_REQUEST, "flaky refuses initialize")
            return
        if self.opts.legacy_version is not None:
            version = self.opts.legacy_version
        elif requested in SUPPORTED_VERSIONS:
            version = requested
        else:
            version = DEFAULT_VERSION
        self.result(
            request_id,
            {
                "protocolVersion": version,
                "capabilities": {"tools": {"listChanged": False}},
                "serverInfo": {"name": self.opts.name, "version": "1.0.0"},
                "instructions": "Fault-injecting test server.",
            },
        )

    def handle_call(self, request_id: Any, params: dict[str, Any]) -> None:
        name = params.get("name")
        args = params.get("arguments") or {}
        meta = params.get("_meta") or {}
        self.record("call", name=name, id=request_id, arguments=args, traceparent=meta.get("traceparent"))
        with self.state_lock:
            self.calls += 1
            n = self.calls
            if self.opts.hang_after is not None and n >= self.opts.hang_after:
                # This call is still answered; everything after it is not.
                self.hung = True
        if self.opts.crash_on_call is not None and n == self.opts.crash_on_call:
            os._exit(3)
        if self.opts.crash_every is not None and n % self.opts.crash_every == 0:
            os._exit(3)
        if self.opts.hang_on_call:
            return
        if self.opts.deep_notice:
            # A notification nested deeper than any parser's recursion limit, before the answer.
            depth = self.opts.deep_notice
            self.write_raw(b'{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info",'
                           b'"data":' + b"[" * depth + b"]" * depth + b"}}\n")
        if name not in TOOL_NAMES and not (self.opts.sampling_flood and name == FLOOD_TOOL["name"]):
            self.error(request_id, INVALID_PARAMS, f"Unknown tool: {name}")
            return
        try:
            getattr(self, f"tool_{name}")(request_id, params, args)
        except (KeyError, TypeError, ValueError) as exc:
            self.error(request_id, INVALID_PARAMS, f"Invalid arguments for {name}: {exc!r}")

    # ------------------------------------------------------------------ tools
    def tool_echo(self, request_id: Any, params: dict[str, Any], args: dict[str, Any]) -> None:
        self.call_result(request_id, text(f"echo: {args['text']}"))

    def tool_idem_echo(self, request_id: Any, params: dict[str, Any], args: dict[str, Any]) -> None:
        self.call_result(request_id, text(f"echo: {args['text']}"))

    def tool_sampling_flood(self, request_id: Any, params: dict[str, Any], args: dict[str, Any]) -> None:
        count = int(args["count"])
        wait_for = int(args.get("wait_for", count))
        ask = {"messages": [{"role": "user", "content": {"type": "text", "text": "flood"}}], "maxTokens": 1}

        def answer() -> None:  # off the stdin thread, which keeps reading the answers meanwhile
            for i in range(count):
                self.send({"jsonrpc": "2.0", "id": f"flood-{i}", "method": "sampling/createMessage",
                           "params": ask})
            with self.flood:
                self.flood.wait_for(lambda: self.flood_responses >= wait_for)
                summary = (f"responses {self.flood_responses} errors {self.flood_errors} "
                           f"first_error {self.flood_first_error}")
            self.call_result(request_id, text(summary))

        threading.Thread(target=answer, daemon=True).start()

    def tool_plain_echo(self, request_id: Any, params: dict[str, Any], args: dict[str, Any]) -> None:
        self.call_result(request_id, text(f"echo: {args['text']}"))

    def tool_add(self, request_id: Any, params: dict[str, Any], args: dict[str, Any]) -> None:
        a, b = args["a"], args["b"]
        if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in (a, b)):
            raise ValueError("a and b must be numbers")
        result = text(f"{a + b}")
        result["structuredContent"] = {"sum": a + b}
        self.call_result(request_id, result)

    def tool_counter(self, request_id: Any, params: dict[str, Any], args: dict[str, Any]) -> None:
        with self.state_lock:
            self.counter += 1
            value = self.counter
        self.call_result(request_id, text(str(value)))

    def tool_crash(self, request_id: Any, params: dict[str, Any], args: dict[str, Any]) -> None:
        os._exit(int(args.get("status", 3)))

    def tool_sleep(self, request_id: Any, params: dict[str, Any], args: dict[str, Any]) -> None:
        seconds = float(args["seconds"])
        cancel = self.start_pending(request_id)

        def answer() -> None:
            if not cancel.wait(seconds):
                self.finish_pending(request_id, text(f"slept {args['seconds']}"))

        threading.Thread(target=answer, daemon=True).start()

    def tool_progress(self, request_id: Any, params: dict[str, Any], args: dict[str, Any]) -> None:
        forever = self.opts.progress_forever
        steps = int(args.get("steps", 0))
        interval = float(forever if forever is not None else args.get("interval", 0.05))
        token = (params.get("_meta") or {}).get("progressToken")
        cancel = self.start_pending(request_id)

        def notify(progress: int, total: int | None) -> None:
            if token is None:
                return
            body: dict[str, Any] = {
                "progressToken": token,
                "progress": progress,
                "message": f"step {progress}",
            }
            if total is not None:
                body["total"] = total
            self.send({"jsonrpc": "2.0", "method": "notifications/progress", "params": body})

        def run() -> None:
            step = 0
            while forever is not None or step < steps:
                if cancel.wait(interval):
                    return
                step += 1
                notify(step, None if forever is not None else steps)
            self.finish_pending(request_id, text(f"done {steps}"))

        threading.Thread(target=run, daemon=True).start()

    # ------------------------------------------------------------------ main loop
    def serve(self) -> None:
        stdin = sys.stdin.buffer
        while True:
            try:
                line = stdin.readline()
            except (OSError, ValueError):
                line = b""
            if not line:
                break
            self.handle_line(line)
        # stdin EOF
        if self.opts.ignore_sigterm:
            while True:  # keep running until SIGKILL
                time.sleep(3600)
        with self.write_lock:
            try:
                self.out.flush()
            except OSError:
                pass
        os._exit(0)


def text(value: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": value}], "isError": False}


def flood_garbage(server: Flaky) -> None:
    i = 0
    while True:
        server.write_raw(f"flood {i}: this line is not JSON-RPC\n".encode())
        i += 1
        time.sleep(0.01)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Fault-injecting handshake-era MCP test server (stdlib only).")
    p.add_argument("--name", default="flaky", help="serverInfo name (default: flaky)")
    p.add_argument("--record", metavar="PATH", help="append one JSON line per call start / cancel / ping")
    p.add_argument("--crash-on-call", type=int, metavar="N", help="exit(3) when the Nth tools/call arrives")
    p.add_argument("--crash-every", type=int, metavar="N", help="exit(3) on every Nth tools/call")
    p.add_argument(
        "--exit-at-start",
        type=int,
        metavar="STATUS",
        help="print --stderr-text to stderr and exit with STATUS before reading anything",
    )
    p.add_argument("--deep-notice", type=int, metavar="DEPTH", default=0,
                   help="before answering each tools/call, send a notification nested DEPTH levels")
    p.add_argument("--stderr-text", default="fatal: cannot start", help="stderr line for --exit-at-start")
    p.add_argument(
        "--exit-after-start",
        type=float,
        metavar="SECONDS",
        help="exit(3) this long after answering tools/list (so after the proxy saw it ready)",
    )
    p.add_argument("--start-gate", metavar="PATH",
                   help="answer initialize only once PATH exists (a test decides when the server is up)")
    p.add_argument(
        "--slow-start",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="sleep this long before answering initialize",
    )
    p.add_argument(
        "--hang-after",
        type=int,
        metavar="N",
        help="after the Nth tools/call (which is answered) answer nothing at all, ping included, "
        "but keep reading stdin; 0 = answer nothing from the start",
    )
    p.add_argument(
        "--hang-on-call", action="store_true", help="never answer tools/call (ping still answered)"
    )
    p.add_argument(
        "--garbage-stdout",
        choices=["start", "calls", "flood"],
        help="start: 2 non-JSON lines first; calls: a non-JSON line before each tools/call answer; "
        "flood: a non-JSON line every 10 ms",
    )
    p.add_argument(
        "--ignore-sigterm", action="store_true", help="ignore SIGTERM and stdin EOF (only SIGKILL ends it)"
    )
    p.add_argument(
        "--spawn-grandchild",
        action="store_true",
        help="spawn a sleeping child in the same process group; print 'grandchild pid N' to stderr",
    )
    p.add_argument(
        "--grandchild-keeps-pipes",
        action="store_true",
        help="spawn a sleeping child that inherits stdin, stdout and stderr (what npx/uvx wrappers "
        "leave behind): when this process exits its pipes stay open; recorded as 'grandchild'",
    )
    p.add_argument(
        "--stderr-flood",
        type=int,
        default=0,
        metavar="BYTES",
        help="write this many bytes of stderr lines at start, before serving (blocks if not drained)",
    )
    p.add_argument(
        "--ignore-unknown",
        action="store_true",
        help="never answer unknown methods (server/discover included) instead of -32601",
    )
    p.add_argument(
        "--legacy-version", metavar="V", help="answer initialize with protocolVersion V, whatever was asked"
    )
    p.add_argument("--refuse-initialize", action="store_true",
                   help="answer initialize with a JSON-RPC error (-32600): with no server/discover either, "
                   "a server that refuses both eras")
    p.add_argument(
        "--sampling-flood", action="store_true",
        help="also list sampling_flood(count, wait_for): count sampling requests at once, answered "
        "once wait_for of them got a response",
    )
    p.add_argument(
        "--progress-forever",
        type=float,
        metavar="INTERVAL",
        help="the progress tool never finishes; progress every INTERVAL seconds",
    )
    return p.parse_args(argv)


def main() -> None:
    opts = parse_args()
    if opts.exit_at_start is not None:
        sys.stderr.write(opts.stderr_text + "\n")
        sys.stderr.flush()
        os._exit(opts.exit_at_start)
    if opts.ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if opts.spawn_grandchild:
        child = subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(3600)"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        sys.stderr.write(f"grandchild pid {child.pid}\n")
        sys.stderr.flush()
    server = Flaky(opts)
    if opts.grandchild_keeps_pipes:
        keeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
        server.record("grandchild", child=keeper.pid)
    if opts.stderr_flood > 0:
        line = b"flaky stderr flood " + b"." * 100 + b"\n"
        remaining = opts.stderr_flood
        err = sys.stderr.buffer
        while remaining > 0:
            chunk = line[:remaining] if remaining < len(line) else line
            err.write(chunk)
            remaining -= len(chunk)
        err.flush()
    if opts.garbage_stdout == "start":
        server.write_raw(b"flaky: starting up (not JSON)\n")
        server.write_raw(b"flaky: still starting (not JSON either)\n")
    elif opts.garbage_stdout == "flood":
        threading.Thread(target=flood_garbage, args=(server,), daemon=True).start()
    server.serve()


if __name__ == "__main__":
    main()
