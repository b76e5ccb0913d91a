"""A full-featured, well-behaved upstream MCP server for tests (stdio).

Built on the SDK's low-level ``mcp.server.lowlevel.Server`` and served with
``mcp.server.stdio.stdio_server``. ``Server.run`` serves both protocol eras: the
client's first request decides (``initialize`` -> handshake era 2024-11-05 ..
2025-11-25; an enveloped request such as ``server/discover`` -> 2026-07-28).

Run: ``python tests/servers/everything.py [--name NAME] [--tools N] [--record PATH]``

``--record PATH`` appends one JSON object per line for every event a test may want
to assert reached the upstream: ``{"event": "call", "name", "id", "arguments"}``,
``{"event": "cancelled", "requestId", "reason"}``, ``{"event": "ping"}``,
``{"event": "set_level", "level"}``, ``{"event": "roots_list_changed"}``,
``{"event": "initialize", "protocolVersion"}``, ``{"event": "discover"}``,
``{"event": "subscribe" | "unsubscribe", "uri"}``. Every line also carries
``"server"`` (the ``--name``), ``"pid"`` and ``"t"`` (``time.time()``).

Era notes:
* 2026-07-28 forbids server->client requests, so ``sample``, ``elicit`` and ``roots``
  answer with an ``InputRequiredResult`` there (the multi-round-trip flow) and read
  the client's answers from ``inputResponses`` on the retry; on the handshake era
  they send the standalone request mid-call.
* list_changed / resources/updated: handshake era gets the notification on the
  connection's standalone channel; 2026-07-28 gets the event on
  ``subscriptions/listen`` streams (``InMemorySubscriptionBus`` + ``ListenHandler``).
* ``log`` on 2026-07-28 only reaches clients whose request opted in (``_meta`` log level).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import mcp_types as types
from mcp.server.caching import CacheHint
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.stdio import stdio_server
from mcp.server.subscriptions import (
    InMemorySubscriptionBus,
    ListenHandler,
    ResourceUpdated,
    ToolsListChanged,
)
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

# Sampling, roots and logging are deprecated as of 2026-07-28; this server serves them
# on purpose (the handshake era still has them), so the warnings are noise on stderr.
warnings.filterwarnings("ignore", category=MCPDeprecationWarning)

Ctx = ServerRequestContext[Any]
ToolFn = Callable[[Ctx, types.CallToolRequestParams, dict[str, Any]], Awaitable[Any]]

READ_ONLY = types.ToolAnnotations(read_only_hint=True)
NOT_IDEMPOTENT = types.ToolAnnotations(idempotent_hint=False)
LOG_LEVELS = ["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"]
COMPLETION_NAMES = ["alice", "bob", "carol"]
COMPLETION_IDS = ["1", "2", "3"]


class Everything:
    """All process-global state; one stdio process serves exactly one connection."""

    def __init__(self, name: str, extra_tools: int, record_path: str | None) -> None:
        self.name = name
        self.record_path = record_path
        self.counter = 0
        self.subscriptions: set[str] = set()
        self.bus = InMemorySubscriptionBus()
        self.tools: dict[str, tuple[types.Tool, ToolFn]] = {}
        self._register_builtin_tools()
        for i in range(extra_tools):
            self.add_echo_tool(f"tool_{i}")

    # ------------------------------------------------------------------ recording
    def record(self, event: str, **fields: Any) -> None:
        if self.record_path is None:
            return
        line = {"event": event, "server": self.name, "pid": os.getpid(), "t": time.time(), **fields}
        with open(self.record_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(line, default=str) + "\n")

    # ------------------------------------------------------------------ tool table
    def _tool(
        self,
        name: str,
        description: str,
        properties: dict[str, Any],
        required: list[str],
        fn: ToolFn,
        *,
        annotations: types.ToolAnnotations | None = None,
        output_schema: dict[str, Any] | None = None,
    ) -> None:
        schema: dict[str, Any] = {"type": "object", "properties": properties}
        if required:
            schema["required"] = required
        tool = types.Tool(
            name=name,
            description=description,
            input_schema=schema,
            output_schema=output_schema,
            annotations=annotations,
        )
        self.tools[name] = (tool, fn)

    def add_echo_tool(self, name: str) -> None:
        async def generated(ctx: Ctx, params: types.CallToolRequestParams, args: dict[str, Any]) -> Any:
            return text(f"{name}: {_str_arg(args, 'text', default='')}")

        self._tool(
            name,
            f"Generated echo-like tool {name!r}: returns '{name}: {{text}}'.",
            {"text": {"type": "string"}},
            [],
            generated,
            annotations=READ_ONLY,
        )

    def _register_builtin_tools(self) -> None:
        s = {"type": "string"}
        n = {"type": "number"}
        i = {"type": "integer"}
        self._tool(
            "echo",
            "Echo the text back as 'echo: {text}'.",
            {"text": s},
            ["text"],
            self.t_echo,
            annotations=READ_ONLY,
        )
        self._tool(
            "add",
            "Add two numbers; also returns structuredContent {sum}.",
            {"a": n, "b": n},
            ["a", "b"],
            self.t_add,
            annotations=READ_ONLY,
            output_schema={"type": "object", "properties": {"sum": n}, "required": ["sum"]},
        )
        self._tool(
            "sleep",
            "Sleep for the given seconds (cancellable); returns 'slept {seconds}'.",
            {"seconds": n},
            ["seconds"],
            self.t_sleep,
        )
        self._tool(
            "slow_echo",
            "Sleep for the given seconds, then echo the text.",
            {"text": s, "seconds": n},
            ["text", "seconds"],
            self.t_slow_echo,
            annotations=READ_ONLY,
        )
        self._tool(
            "progress",
            "Send `steps` progress notifications, `interval` seconds apart.",
            {"steps": i, "interval": {"type": "number", "default": 0.05}},
            ["steps"],
            self.t_progress,
        )
        self._tool(
            "log",
            "Emit a notifications/message at the given level.",
            {"level": {"type": "string", "enum": LOG_LEVELS}, "message": s},
            ["level", "message"],
            self.t_log,
        )
        self._tool(
            "sample",
            "Ask the client's LLM (sampling/createMessage); returns 'sampled: {text}'.",
            {"prompt": s},
            ["prompt"],
            self.t_sample,
        )
        self._tool(
            "elicit",
            "Ask the user for a name (form elicitation); returns 'elicited: {action} {content}'.",
            {"message": s},
            ["message"],
            self.t_elicit,
        )
        self._tool("roots", "List the client's roots, one URI per line.", {}, [], self.t_roots)
        self._tool(
            "fail",
            "Return a tool error (isError: true) with the message.",
            {"message": s},
            ["message"],
            self.t_fail,
        )
        self._tool(
            "raise_error",
            "Answer with a JSON-RPC error of the given code.",
            {"code": i, "message": s},
            ["code", "message"],
            self.t_raise_error,
        )
        self._tool("big", "Return a text of `size` bytes.", {"size": i}, ["size"], self.t_big)
        self._tool(
            "add_tool",
            "Register an echo-like tool and announce tools/list_changed.",
            {"name": s},
            ["name"],
            self.t_add_tool,
        )
        self._tool(
            "remove_tool",
            "Remove a tool and announce tools/list_changed.",
            {"name": s},
            ["name"],
            self.t_remove_tool,
        )
        self._tool(
            "touch",
            "Announce notifications/resources/updated for the URI (to subscribers).",
            {"uri": s},
            ["uri"],
            self.t_touch,
        )
        self._tool(
            "crash",
            "Exit the process immediately (os._exit) mid-call.",
            {"status": {"type": "integer", "default": 3}},
            [],
            self.t_crash,
        )
        self._tool(
            "counter",
            "Increment a process-global counter and return it.",
            {},
            [],
            self.t_counter,
            annotations=NOT_IDEMPOTENT,
        )

    # ------------------------------------------------------------------ tools
    async def t_echo(self, ctx: Ctx, params: types.CallToolRequestParams, args: dict[str, Any]) -> Any:
        return text(f"echo: {_str_arg(args, 'text')}")

    async def t_add(self, ctx: Ctx, params: types.CallToolRequestParams, args: dict[str, Any]) -> Any:
        total = _num_arg(args, "a") + _num_arg(args, "b")
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=f"{total}")], structured_content={"sum": total}
        )

    async def t_sleep(self, ctx: Ctx, params: types.CallToolRequestParams, args: dict[str, Any]) -> Any:
        seconds = _num_arg(args, "seconds")
        await anyio.sleep(seconds)
        return text(f"slept {args['seconds']}")

    async def t_slow_echo(self, ctx: Ctx, params: types.CallToolRequestParams, args: dict[str, Any]) -> Any:
        await anyio.sleep(_num_arg(args, "seconds"))
        return text(f"echo: {_str_arg(args, 'text')}")

    async def t_progress(self, ctx: Ctx, params: types.CallToolRequestParams, args: dict[str, Any]) -> Any:
        steps = int(_num_arg(args, "steps"))
        interval = float(args.get("interval", 0.05))
        for step in range(1, steps + 1):
            await anyio.sleep(interval)
            await ctx.session.report_progress(step, steps, f"step {step}")
        return text(f"done {steps}")

    async def t_log(self, ctx: Ctx, params: types.CallToolRequestParams, args: dict[str, Any]) -> Any:
        level = _str_arg(args, "level")
        if level not in LOG_LEVELS:
            raise MCPError(types.INVALID_PARAMS, f"invalid log level {level!r}")
        message = _str_arg(args, "message")
        await ctx.session.send_log_message(level, message, logger=self.name)  # type: ignore[arg-type]
        return text(f"logged {level}")

    async def t_sample(self, ctx: Ctx, params: types.CallToolRequestParams, args: dict[str, Any]) -> Any:
        prompt = _str_arg(args, "prompt")
        messages = [types.SamplingMessage(role="user", content=types.TextContent(type="text", text=prompt))]
        if _modern(ctx):
            answer = _input_response(params, "sample", types.CreateMessageResult)
            if answer is None:
                request = types.CreateMessageRequest(
                    params=types.CreateMessageRequestParams(messages=messages, max_tokens=100)
                )
                return types.InputRequiredResult(input_requests={"sample": request})
            result = answer
        else:
            result = await ctx.session.create_message(
                messages, max_tokens=100, related_request_id=ctx.request_id
            )
        content = result.content
        sampled = content.text if isinstance(content, types.TextContent) else str(content)
        return text(f"sampled: {sampled}")

    async def t_elicit(self, ctx: Ctx, params: types.CallToolRequestParams, args: dict[str, Any]) -> Any:
        message = _str_arg(args, "message")
        schema: dict[str, Any] = {
            "type": "object",
            "properties": {"name": {"type": "string"}},
            "required": ["name"],
        }
        if _modern(ctx):
            answer = _input_response(params, "elicit", types.ElicitResult)
            if answer is None:
                request = types.ElicitRequest(
                    params=types.ElicitRequestFormParams(message=message, requested_schema=schema)
                )
                return types.InputRequiredResult(input_requests={"elicit": request})
            result = answer
        else:
            result = await ctx.session.elicit_form(message, schema, related_request_id=ctx.request_id)
        return text(f"elicited: {result.action} {json.dumps(result.content)}")

    async def t_roots(self, ctx: Ctx, params: types.CallToolRequestParams, args: dict[str, Any]) -> Any:
        if _modern(ctx):
            answer = _input_response(params, "roots", types.ListRootsResult)
            if answer is None:
                return types.InputRequiredResult(input_requests={"roots": types.ListRootsRequest()})
            result = answer
        else:
            result = await ctx.session.list_roots()
        return text("\n".join(str(root.uri) for root in result.roots))

    async def t_fail(self, ctx: Ctx, params: types.CallToolRequestParams, args: dict[str, Any]) -> Any:
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=_str_arg(args, "message"))], is_error=True
        )

    async def t_raise_error(self, ctx: Ctx, params: types.CallToolRequestParams, args: dict[str, Any]) -> Any:
        raise MCPError(int(_num_arg(args, "code")), _str_arg(args, "message"))

    async def t_big(self, ctx: Ctx, params: types.CallToolRequestParams, args: dict[str, Any]) -> Any:
        return text("x" * int(_num_arg(args, "size")))

    async def t_add_tool(self, ctx: Ctx, params: types.CallToolRequestParams, args: dict[str, Any]) -> Any:
        name = _str_arg(args, "name")
        if name in self.tools:
            raise MCPError(types.INVALID_PARAMS, f"tool {name!r} already exists")
        self.add_echo_tool(name)
        await self.announce_tools_changed(ctx)
        return text(f"added {name}")

    async def t_remove_tool(self, ctx: Ctx, params: types.CallToolRequestParams, args: dict[str, Any]) -> Any:
        name = _str_arg(args, "name")
        if self.tools.pop(name, None) is None:
            raise MCPError(types.INVALID_PARAMS, f"no tool {name!r}")
        await self.announce_tools_changed(ctx)
        return text(f"removed {name}")

    async def t_touch(self, ctx: Ctx, params: types.CallToolRequestParams, args: dict[str, Any]) -> Any:
        uri = _str_arg(args, "uri")
        # Listen streams filter by URI themselves; the handshake era needs resources/subscribe first.
        await self.bus.publish(ResourceUpdated(uri=uri))
        if not _modern(ctx) and uri in self.subscriptions:
            await ctx.session.send_resource_updated(uri)
        return text(f"touched {uri}")

    async def t_crash(self, ctx: Ctx, params: types.CallToolRequestParams, args: dict[str, Any]) -> Any:
        os._exit(int(args.get("status", 3)))

    async def t_counter(self, ctx: Ctx, params: types.CallToolRequestParams, args: dict[str, Any]) -> Any:
        self.counter += 1
        return text(str(self.counter))

    async def announce_tools_changed(self, ctx: Ctx) -> None:
        await self.bus.publish(ToolsListChanged())
        if not _modern(ctx):
            await ctx.session.send_tool_list_changed()

    # ------------------------------------------------------------------ handlers
    async def on_list_tools(
        self, ctx: Ctx, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[tool for tool, _ in self.tools.values()])

    async def on_call_tool(self, ctx: Ctx, params: types.CallToolRequestParams) -> Any:
        args = params.arguments or {}
        self.record("call", name=params.name, id=ctx.request_id, arguments=args)
        entry = self.tools.get(params.name)
        if entry is None:
            raise MCPError(types.INVALID_PARAMS, f"Unknown tool: {params.name}")
        return await entry[1](ctx, params, args)

    async def on_list_resources(self, ctx: Ctx, params: Any) -> types.ListResourcesResult:
        return types.ListResourcesResult(
            resources=[
                types.Resource(uri="mem://greeting", name="greeting", mime_type="text/plain"),
                types.Resource(uri="mem://data.json", name="data", mime_type="application/json"),
            ]
        )

    async def on_list_resource_templates(self, ctx: Ctx, params: Any) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(
            resource_templates=[
                types.ResourceTemplate(uri_template="mem://items/{id}", name="item", mime_type="text/plain")
            ]
        )

    async def on_read_resource(
        self, ctx: Ctx, params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        uri = str(params.uri)
        if uri == "mem://greeting":
            body, mime = "hello", "text/plain"
        elif uri == "mem://data.json":
            body, mime = json.dumps({"name": self.name, "items": [1, 2, 3]}), "application/json"
        elif uri.startswith("mem://items/") and len(uri) > len("mem://items/"):
            body, mime = f"item {uri.removeprefix('mem://items/')}", "text/plain"
        else:
            raise MCPError(types.INVALID_PARAMS, f"Resource not found: {uri}", data={"uri": uri})
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=uri, mime_type=mime, text=body)]
        )

    async def on_subscribe(self, ctx: Ctx, params: types.SubscribeRequestParams) -> types.EmptyResult:
        self.subscriptions.add(str(params.uri))
        self.record("subscribe", uri=str(params.uri))
        return types.EmptyResult()

    async def on_unsubscribe(self, ctx: Ctx, params: types.UnsubscribeRequestParams) -> types.EmptyResult:
        self.subscriptions.discard(str(params.uri))
        self.record("unsubscribe", uri=str(params.uri))
        return types.EmptyResult()

    async def on_list_prompts(self, ctx: Ctx, params: Any) -> types.ListPromptsResult:
        return types.ListPromptsResult(
            prompts=[
                types.Prompt(
                    name="greet",
                    description="Greet someone by name.",
                    arguments=[types.PromptArgument(name="name", description="Who to greet", required=True)],
                )
            ]
        )

    async def on_get_prompt(self, ctx: Ctx, params: types.GetPromptRequestParams) -> types.GetPromptResult:
        if params.name != "greet":
            raise MCPError(types.INVALID_PARAMS, f"Unknown prompt: {params.name}")
        who = (params.arguments or {}).get("name")
        if who is None:
            raise MCPError(types.INVALID_PARAMS, "Missing required argument 'name'")
        return types.GetPromptResult(
            description="A greeting",
            messages=[
                types.PromptMessage(
                    role="user", content=types.TextContent(type="text", text=f"Hello, {who}!")
                )
            ],
        )

    async def on_completion(self, ctx: Ctx, params: types.CompleteRequestParams) -> types.CompleteResult:
        ref, arg = params.ref, params.argument
        values: list[str] = []
        if isinstance(ref, types.PromptReference) and ref.name == "greet" and arg.name == "name":
            values = [v for v in COMPLETION_NAMES if v.startswith(arg.value)]
        elif (
            isinstance(ref, types.ResourceTemplateReference)
            and ref.uri == "mem://items/{id}"
            and arg.name == "id"
        ):
            values = [v for v in COMPLETION_IDS if v.startswith(arg.value)]
        return types.CompleteResult(
            completion=types.Completion(values=values, total=len(values), has_more=False)
        )

    async def on_set_logging_level(self, ctx: Ctx, params: types.SetLevelRequestParams) -> types.EmptyResult:
        self.record("set_level", level=params.level)
        return types.EmptyResult()

    async def on_ping(self, ctx: Ctx, params: Any) -> types.EmptyResult:
        self.record("ping")
        return types.EmptyResult()

    async def on_roots_list_changed(self, ctx: Ctx, params: Any) -> None:
        self.record("roots_list_changed")

    async def on_cancelled(self, ctx: Ctx, params: types.CancelledNotificationParams) -> None:
        self.record("cancelled", requestId=params.request_id, reason=params.reason)

    async def observe(self, ctx: Ctx, call_next: Any) -> Any:
        """Middleware: record the handshake / discovery (which era the client opened)."""
        if ctx.method == "initialize":
            self.record("initialize", protocolVersion=(ctx.params or {}).get("protocolVersion"))
        elif ctx.method == "server/discover":
            self.record("discover")
        return await call_next(ctx)

    def build_server(self) -> Server[Any]:
        server: Server[Any] = Server(
            self.name,
            version="1.0.0",
            instructions="Reference upstream for mcpvisor tests.",
            on_list_tools=self.on_list_tools,
            on_call_tool=self.on_call_tool,
            on_list_resources=self.on_list_resources,
            on_list_resource_templates=self.on_list_resource_templates,
            on_read_resource=self.on_read_resource,
            on_subscribe_resource=self.on_subscribe,
            on_unsubscribe_resource=self.on_unsubscribe,
            on_subscriptions_listen=ListenHandler(self.bus),
            on_list_prompts=self.on_list_prompts,
            on_get_prompt=self.on_get_prompt,
            on_completion=self.on_completion,
            on_set_logging_level=self.on_set_logging_level,
            on_ping=self.on_ping,
            on_roots_list_changed=self.on_roots_list_changed,
        )
        server.add_notification_handler(
            "notifications/cancelled", types.CancelledNotificationParams, self.on_cancelled
        )
        server.middleware.append(self.observe)
        return server


def text(value: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=value)])


def _modern(ctx: Ctx) -> bool:
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS


def _input_response(params: types.CallToolRequestParams, key: str, model: type[Any]) -> Any:
    """The client's answer to input request `key` from an earlier round, as `model`; None on round one."""
    responses = params.input_responses or {}
    answer = responses.get(key)
    if answer is None:
        return None
    return model.model_validate(
        answer.model_dump(by_alias=True, mode="json", exclude_none=True), by_name=False
    )


def _str_arg(args: dict[str, Any], name: str, *, default: str | None = None) -> str:
    value = args.get(name, default)
    if not isinstance(value, str):
        raise MCPError(types.INVALID_PARAMS, f"argument {name!r} must be a string")
    return value


def _num_arg(args: dict[str, Any], name: str) -> int | float:
    value = args.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise MCPError(types.INVALID_PARAMS, f"argument {name!r} must be a number")
    return value


async def serve_modern_only(state: Everything, server: Server[Any], init: Any, read_stream: Any,
                            write_stream: Any) -> None:
    """Serve as a server that speaks only 2026-07-28: ``initialize`` is refused with
    -32022 naming the versions it has, before the SDK sees it (the SDK would lock a
    connection opened by ``initialize`` to the handshake era); everything else goes
    to the dual-era server, whose first enveloped request opens a 2026-07-28 connection."""
    inner_send, inner_receive = anyio.create_memory_object_stream[Any](16)

    async def gate() -> None:
        async with inner_send:
            async for item in read_stream:
                message = getattr(item, "message", None)
                if isinstance(message, types.JSONRPCRequest) and message.method == "initialize":
                    requested = str((message.params or {}).get("protocolVersion"))
                    state.record("initialize", protocolVersion=requested)
                    error = types.JSONRPCError(jsonrpc="2.0", id=message.id, error=types.ErrorData(
                        code=types.UNSUPPORTED_PROTOCOL_VERSION, message="this server speaks 2026-07-28 only",
                        data={"supported": list(MODERN_PROTOCOL_VERSIONS), "requested": requested}))
                    await write_stream.send(type(item)(error))
                    continue
                await inner_send.send(item)

    async with anyio.create_task_group() as tg:
        tg.start_soon(gate)
        await server.run(inner_receive, write_stream, init)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", default="everything", help="serverInfo name (default: everything)")
    parser.add_argument(
        "--tools", type=int, default=0, help="extra generated echo-like tools tool_0..tool_{N-1}"
    )
    parser.add_argument("--record", metavar="PATH", help="append one JSON line per interesting event")
    parser.add_argument("--modern-only", action="store_true",
                        help="refuse initialize with -32022: a server that speaks only 2026-07-28")
    parser.add_argument("--list-ttl", metavar="MS", type=int,
                        help="2026-07-28: lists say ttlMs MS, cacheScope public (default: 0, private)")
    opts = parser.parse_args()

    state = Everything(opts.name, opts.tools, opts.record)
    server = state.build_server()
    if opts.list_ttl is not None:
        for method in ("tools/list", "resources/list", "resources/templates/list", "prompts/list"):
            server.cache_hints[method] = CacheHint(ttl_ms=opts.list_ttl, scope="public")
    init = server.create_initialization_options(
        NotificationOptions(tools_changed=True, resources_changed=True, prompts_changed=False)
    )

    async def serve() -> None:
        async with stdio_server() as (read_stream, write_stream):
            print("everything ready", file=sys.stderr, flush=True)
            if opts.modern_only:
                await serve_modern_only(state, server, init, read_stream, write_stream)
            else:
                await server.run(read_stream, write_stream, init)

    anyio.run(serve)


if __name__ == "__main__":
    main()
