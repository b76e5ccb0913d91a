"""A small dual-era upstream for the proxy's 2026-07-28 server side: questions, capabilities, lists.

Built on the SDK's low-level ``Server`` over stdio; the client's first request decides the
era (``initialize``: handshake era; an enveloped request: 2026-07-28). What each era gets:

* ``steps``: two questions in two rounds (a name, then a colour). At 2026-07-28 each
  round is an ``InputRequiredResult`` whose ``requestState`` is signed (HMAC with a key
  of this process) and changes between rounds; a state that fails the check is refused
  with -32602, and a retry that lacks the answer the state expects gets the same question
  again. In the handshake era the two questions are ``elicitation/create`` requests.
* ``both``: two questions in one round (``elicitation/create`` and
  ``sampling/createMessage``); handshake era: both requests at once, before either is
  answered.
* ``needs_sampling``: refused with -32021 (``requiredCapabilities: {"sampling": {}}``)
  before anything else when the client did not declare sampling (a 2026-07-28 request's
  ``_meta``, the handshake's ``initialize``); otherwise it samples once. ``--record``
  notes every call, so a test can tell a call the proxy refused never came here.
* prompt ``intro`` and resource ``mrtr://note``: ``prompts/get`` and ``resources/read``
  ask for a name first (``input_required`` / ``elicitation/create``).
* ``change`` (``kind``: tools, prompts or resources) adds an item to that list and
  announces it; ``announce`` (same ``kind``) announces a change of a list it leaves as
  it was (as servers that add and remove an item do); ``touch`` reports ``mrtr://note``
  updated. Handshake era: notifications (an update only after ``resources/subscribe``);
  2026-07-28: ``subscriptions/listen`` events.

Run: ``python tests/servers/mrtr.py [--record PATH] [--http]``; with ``--http`` it serves
streamable HTTP on a free port of 127.0.0.1 (every session shares one state) and prints
``mrtr ready URL`` on stderr.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import os
import secrets
import sys
import warnings
from typing import Any

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.stdio import stdio_server
from mcp.server.subscriptions import (
    InMemorySubscriptionBus,
    ListenHandler,
    PromptsListChanged,
    ResourcesListChanged,
    ResourceUpdated,
    ToolsListChanged,
)
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp_types import CLIENT_CAPABILITIES_META_KEY
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

warnings.filterwarnings("ignore", category=MCPDeprecationWarning)

Ctx = ServerRequestContext[Any]
NOTE = "mrtr://note"
NAME_SCHEMA: dict[str, Any] = {"type": "object", "properties": {"name": {"type": "string"}},
                               "required": ["name"]}
COLOR_SCHEMA: dict[str, Any] = {"type": "object", "properties": {"color": {"type": "string"}},
                                "required": ["color"]}
MISSING_REQUIRED_CLIENT_CAPABILITY = -32021


def _modern(ctx: Ctx) -> bool:
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS


def _declared(ctx: Ctx, capability: str) -> bool:
    if _modern(ctx):
        meta = (ctx.params or {}).get("_meta") or {}
        caps = meta.get(CLIENT_CAPABILITIES_META_KEY) or {}
        return isinstance(caps, dict) and caps.get(capability) is not None
    caps = ctx.session.client_capabilities
    return caps is not None and getattr(caps, capability) is not None


def _text(value: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=value)])


def _elicit(message: str, schema: dict[str, Any]) -> types.ElicitRequest:
    return types.ElicitRequest(params=types.ElicitRequestFormParams(message=message, requested_schema=schema))


def _sample(prompt: str) -> types.CreateMessageRequest:
    message = types.SamplingMessage(role="user", content=types.TextContent(type="text", text=prompt))
    params = types.CreateMessageRequestParams(messages=[message], max_tokens=50)
    return types.CreateMessageRequest(params=params)


class Mrtr:
    """The process's state: one stdio process serves one connection."""

    def __init__(self, record: str | None) -> None:
        self.key = secrets.token_bytes(32)
        self.record_path = record
        self.bus = InMemorySubscriptionBus()
        self.subscriptions: set[str] = set()
        self.extra: dict[str, list[str]] = {"tools": [], "prompts": [], "resources": []}

    def record(self, event: str, **fields: Any) -> None:
        if self.record_path is not None:
            with open(self.record_path, "a", encoding="utf-8") as f:
                f.write(json.dumps({"event": event, "pid": os.getpid(), **fields}) + "\n")

    # --- requestState: signed, so the server (not the proxy) tells a tampered one --------
    def seal(self, payload: str) -> str:
        mac = hmac.new(self.key, payload.encode(), hashlib.sha256).hexdigest()[:32]
        return f"{payload}.{mac}"

    def unseal(self, state: str | None) -> str | None:
        if state is None:
            return None
        payload, _, mac = state.rpartition(".")
        if not payload or not hmac.compare_digest(mac, self.seal(payload).rpartition(".")[2]):
            raise MCPError(types.INVALID_PARAMS, "requestState failed its integrity check")
        return payload

    # --- questions, in either era ----------------------------------------------------------
    async def ask_legacy(self, ctx: Ctx, request: Any) -> dict[str, Any]:
        if isinstance(request, types.ElicitRequest):
            params = request.params
            assert isinstance(params, types.ElicitRequestFormParams)
            answer: Any = await ctx.session.elicit_form(params.message, params.requested_schema,
                                                        related_request_id=ctx.request_id)
        else:
            answer = await ctx.session.create_message(request.params.messages, max_tokens=50,
                                                      related_request_id=ctx.request_id)
        dumped: dict[str, Any] = answer.model_dump(by_alias=True, mode="json", exclude_none=True)
        return dumped

    def responses(self, params: Any) -> dict[str, dict[str, Any]]:
        raw = getattr(params, "input_responses", None) or {}
        return {k: v.model_dump(by_alias=True, mode="json", exclude_none=True) for k, v in raw.items()}

    # --- tools -----------------------------------------------------------------------------
    def tool_list(self) -> list[types.Tool]:
        empty: dict[str, Any] = {"type": "object", "properties": {}}
        kind = {"type": "object", "properties": {"kind": {"type": "string"}}, "required": ["kind"]}
        tools = [types.Tool(name=n, description=f"mrtr {n}", input_schema=empty)
                 for n in ("steps", "both", "needs_sampling", "touch")]
        tools.append(types.Tool(name="change", description="add an item to a list", input_schema=kind))
        tools.append(types.Tool(name="announce", description="announce a list as changed", input_schema=kind))
        tools += [types.Tool(name=n, description="added", input_schema=empty) for n in self.extra["tools"]]
        return tools

    async def call_tool(self, ctx: Ctx, params: types.CallToolRequestParams) -> Any:
        self.record("call", name=params.name)
        if params.name == "steps":
            return await self.steps(ctx, params)
        if params.name == "both":
            return await self.both(ctx, params)
        if params.name == "needs_sampling":
            if not _declared(ctx, "sampling"):
                raise MCPError(MISSING_REQUIRED_CLIENT_CAPABILITY, "this tool needs the sampling capability",
                               data={"requiredCapabilities": {"sampling": {}}})
            if _modern(ctx):
                answers = self.responses(params)
                if "draft" not in answers:
                    return types.InputRequiredResult(input_requests={"draft": _sample("draft")})
                return _text(f"sampled: {answers['draft']['content']['text']}")
            answer = await self.ask_legacy(ctx, _sample("draft"))
            return _text(f"sampled: {answer['content']['text']}")
        if params.name == "change":
            kind = str((params.arguments or {}).get("kind"))
            if kind not in self.extra:
                raise MCPError(types.INVALID_PARAMS, f"kind must be one of {sorted(self.extra)}")
            name = f"added_{len(self.extra[kind]) + 1}"
            self.extra[kind].append(name)
            await self.announce(ctx, kind)
            return _text(f"added {kind} {name}")
        if params.name == "announce":
            kind = str((params.arguments or {}).get("kind"))
            if kind not in self.extra:
                raise MCPError(types.INVALID_PARAMS, f"kind must be one of {sorted(self.extra)}")
            await self.announce(ctx, kind)
            return _text(f"announced {kind}")
        if params.name == "touch":
            await self.bus.publish(ResourceUpdated(uri=NOTE))
            if not _modern(ctx) and NOTE in self.subscriptions:
                await ctx.session.send_resource_updated(NOTE)
            return _text(f"touched {NOTE}")
        raise MCPError(types.INVALID_PARAMS, f"Unknown tool: {params.name}")

    async def steps(self, ctx: Ctx, params: types.CallToolRequestParams) -> Any:
        if not _declared(ctx, "elicitation"):
            raise MCPError(MISSING_REQUIRED_CLIENT_CAPABILITY, "this tool needs the elicitation capability",
                           data={"requiredCapabilities": {"elicitation": {}}})
        step1 = _elicit("Step 1: your name?", NAME_SCHEMA)
        step2 = _elicit("Step 2: your colour?", COLOR_SCHEMA)
        if not _modern(ctx):
            name = (await self.ask_legacy(ctx, step1))["content"]["name"]
            color = (await self.ask_legacy(ctx, step2))["content"]["color"]
            return _text(f"{name} likes {color}")
        state = self.unseal(params.request_state)
        answers = self.responses(params)
        again = types.InputRequiredResult(input_requests={"step1": step1}, request_state=self.seal("r1"))
        if state is None:
            if "step1" not in answers:
                return again
            state = "r1"
        if state == "r1":
            if "step1" not in answers:  # the answer this round expects is missing: ask again
                return again
            name = answers["step1"]["content"]["name"]
            return types.InputRequiredResult(input_requests={"step2": step2},
                                             request_state=self.seal(f"r2:{name}"))
        name = state.removeprefix("r2:")
        if "step2" not in answers:
            return types.InputRequiredResult(input_requests={"step2": step2}, request_state=self.seal(state))
        return _text(f"{name} likes {answers['step2']['content']['color']}")

    async def both(self, ctx: Ctx, params: types.CallToolRequestParams) -> Any:
        who, draft = _elicit("your name?", NAME_SCHEMA), _sample("draft")
        if not _modern(ctx):
            got: dict[str, dict[str, Any]] = {}

            async def ask(key: str, request: Any) -> None:
                got[key] = await self.ask_legacy(ctx, request)

            async with anyio.create_task_group() as tg:
                tg.start_soon(ask, "who", who)
                tg.start_soon(ask, "draft", draft)
            return _text(f"{got['who']['content']['name']} / {got['draft']['content']['text']}")
        answers = self.responses(params)
        if "who" not in answers or "draft" not in answers:
            return types.InputRequiredResult(input_requests={"who": who, "draft": draft})
        return _text(f"{answers['who']['content']['name']} / {answers['draft']['content']['text']}")

    async def announce(self, ctx: Ctx, kind: str) -> None:
        events: dict[str, Any] = {"tools": ToolsListChanged, "prompts": PromptsListChanged,
                                  "resources": ResourcesListChanged}
        await self.bus.publish(events[kind]())
        if not _modern(ctx):
            session = ctx.session
            send = {"tools": session.send_tool_list_changed, "prompts": session.send_prompt_list_changed,
                    "resources": session.send_resource_list_changed}[kind]
            await send()

    # --- prompts and resources: they ask too ------------------------------------------------
    async def named(self, ctx: Ctx, params: Any, message: str) -> str | types.InputRequiredResult:
        if not _modern(ctx):
            return str((await self.ask_legacy(ctx, _elicit(message, NAME_SCHEMA)))["content"]["name"])
        answers = self.responses(params)
        if "who" not in answers:
            return types.InputRequiredResult(input_requests={"who": _elicit(message, NAME_SCHEMA)})
        return str(answers["who"]["content"]["name"])

    async def list_prompts(self, ctx: Ctx, params: Any) -> types.ListPromptsResult:
        names = ["intro", *self.extra["prompts"]]
        prompts = [types.Prompt(name=n, description=f"prompt {n}") for n in names]
        return types.ListPromptsResult(prompts=prompts)

    async def get_prompt(self, ctx: Ctx, params: types.GetPromptRequestParams) -> Any:
        name = await self.named(ctx, params, "who is it for?")
        if isinstance(name, types.InputRequiredResult):
            return name
        message = types.PromptMessage(role="user", content=types.TextContent(type="text", text=f"Hi {name}"))
        return types.GetPromptResult(description="intro", messages=[message])

    async def list_resources(self, ctx: Ctx, params: Any) -> types.ListResourcesResult:
        uris = [NOTE, *(f"mrtr://{n}" for n in self.extra["resources"])]
        return types.ListResourcesResult(resources=[types.Resource(uri=u, name=u.removeprefix("mrtr://"))
                                                    for u in uris])

    async def read_resource(self, ctx: Ctx, params: types.ReadResourceRequestParams) -> Any:
        name = await self.named(ctx, params, "who reads the note?")
        if isinstance(name, types.InputRequiredResult):
            return name
        return types.ReadResourceResult(contents=[types.TextResourceContents(uri=str(params.uri),
                                                                            text=f"note for {name}")])

    async def subscribe(self, ctx: Ctx, params: types.SubscribeRequestParams) -> types.EmptyResult:
        self.subscriptions.add(str(params.uri))
        return types.EmptyResult()

    async def unsubscribe(self, ctx: Ctx, params: types.UnsubscribeRequestParams) -> types.EmptyResult:
        self.subscriptions.discard(str(params.uri))
        return types.EmptyResult()

    def build(self) -> Server[Any]:
        async def list_tools(ctx: Ctx, params: Any) -> types.ListToolsResult:
            return types.ListToolsResult(tools=self.tool_list())

        return Server(
            "mrtr", version="1.0.0",
            on_list_tools=list_tools, on_call_tool=self.call_tool,
            on_list_prompts=self.list_prompts, on_get_prompt=self.get_prompt,
            on_list_resources=self.list_resources, on_read_resource=self.read_resource,
            on_subscribe_resource=self.subscribe, on_unsubscribe_resource=self.unsubscribe,
            on_subscriptions_listen=ListenHandler(self.bus),
        )


async def serve_http(server: Server[Any]) -> None:
    import hypercorn.config
    import hypercorn.trio
    import trio

    app = server.streamable_http_app(streamable_http_path="/mcp", host="127.0.0.1")
    config = hypercorn.config.Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    config.graceful_timeout = 1.0
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(hypercorn.trio.serve, app, config)
        print(f"mrtr ready {binds[0].rstrip('/')}/mcp", file=sys.stderr, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", metavar="PATH", help="append one JSON line per call")
    parser.add_argument("--http", action="store_true", help="serve streamable HTTP instead of stdio")
    opts = parser.parse_args()
    state = Mrtr(opts.record)
    server = state.build()
    init = server.create_initialization_options(
        NotificationOptions(tools_changed=True, resources_changed=True, prompts_changed=True))
    if opts.http:
        anyio.run(serve_http, server, backend="trio")
        return

    async def serve() -> None:
        async with stdio_server() as (read_stream, write_stream):
            print("mrtr ready", file=sys.stderr, flush=True)
            await server.run(read_stream, write_stream, init)

    anyio.run(serve)


if __name__ == "__main__":
    main()
