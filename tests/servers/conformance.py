"""The conformance fixture: an MCP server implementing every scenario of the official
conformance suite's active server suite (npm ``@modelcontextprotocol/conformance``, the
version pinned in ``tests/conformance/package.json``).

Built on the SDK's low-level ``mcp.server.lowlevel.Server`` the way a server author
would write one today; ``Server.run`` serves both protocol eras (the client's first
request decides). What each scenario expects is read from the package's own scenario
code (``node_modules/@modelcontextprotocol/conformance/dist/index.js``):

* tools ``test_simple_text``, ``test_image_content``, ``test_audio_content``,
  ``test_embedded_resource``, ``test_multiple_content_types``, ``test_tool_with_logging``
  (three info logs ~50 ms apart), ``test_tool_with_progress`` (0, 50, 100 of 100),
  ``test_error_handling`` (``isError``), ``test_sampling``, ``test_elicitation``,
  ``test_elicitation_sep1034_defaults``, ``test_elicitation_sep1330_enums``,
  ``json_schema_2020_12_tool`` (``$schema``/``$defs``/``additionalProperties`` kept),
  ``test_reconnection`` (closes its SSE stream mid-call on HTTP, SEP-1699);
* resources ``test://static-text``, ``test://static-binary``, ``test://watched-resource``
  (subscribe/unsubscribe), template ``test://template/{id}/data``;
* prompts ``test_simple_prompt``, ``test_prompt_with_arguments``,
  ``test_prompt_with_embedded_resource``, ``test_prompt_with_image``;
* completion for ``test_prompt_with_arguments`` and the template's ``id``;
  ``logging/setLevel``, ``ping``.

Sampling and elicitation: on the handshake era the tool sends the request to the client
mid-call (``ctx.session.create_message`` / ``elicit_form``); on 2026-07-28, where a server
has no back-channel, it answers with an ``InputRequiredResult`` and reads the client's
answer from ``inputResponses`` on the retry, as the SDK intends.

``--always-back-channel`` makes the tools ask through ``ctx.session`` in both eras, the way
most servers are written today (the SDK refuses that on 2026-07-28): the kind of server a
proxy must open in the handshake era to keep sampling and elicitation working.

Run: ``python tests/servers/conformance.py`` (stdio) or
``python tests/servers/conformance.py --http [--port N]`` (streamable HTTP at
``http://127.0.0.1:N/mcp``, port 0 picks one; hypercorn's trio worker, DNS-rebinding
protection on, an in-memory event store for resumable SSE streams). Prints
``conformance ready [URL]`` on stderr once it serves.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import hmac
import itertools
import json
import secrets
import sys
import warnings
from collections.abc import Awaitable, Callable
from typing import Any, Final

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.streamable_http import EventCallback, EventId, EventMessage, EventStore, StreamId
from mcp.server.subscriptions import (
    InMemorySubscriptionBus,
    ListenHandler,
    PromptsListChanged,
    ToolsListChanged,
)
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

# Sampling and logging are deprecated as of 2026-07-28; the handshake era still has them.
warnings.filterwarnings("ignore", category=MCPDeprecationWarning)

Ctx = ServerRequestContext[Any]
ToolFn = Callable[[Ctx, types.CallToolRequestParams], Awaitable[Any]]

# A 1x1 red PNG and a 1-sample 8 kHz mono WAV: the smallest valid payloads of each kind.
PNG_B64: Final = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
)
WAV_B64: Final = base64.b64encode(
    b"RIFF"
    + (37).to_bytes(4, "little")
    + b"WAVEfmt "
    + (16).to_bytes(4, "little")
    + (1).to_bytes(2, "little")
    + (1).to_bytes(2, "little")
    + (8000).to_bytes(4, "little")
    + (8000).to_bytes(4, "little")
    + (1).to_bytes(2, "little")
    + (8).to_bytes(2, "little")
    + b"data"
    + (1).to_bytes(4, "little")
    + b"\x80"
).decode()

STEP_DELAY_S: Final = 0.05
"""Pause between the logging and progress tool's notifications: the suite asks for ~50 ms."""
RECONNECT_DELAY_S: Final = 0.3
"""How long ``test_reconnection`` works after closing its stream, so the result is stored
for replay rather than sent on the closed stream (the suite reconnects at once)."""
STREAM_FLUSH_S: Final = 0.1
"""How long ``test_reconnection`` lets its SSE response write what it sent before closing it."""
SSE_RETRY_MS: Final = 500
"""The ``retry`` hint on priming events (the suite's own client scenario uses 500 ms)."""

ELICIT_DEFAULTS_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "description": "User name", "default": "John Doe"},
        "age": {"type": "integer", "description": "User age", "default": 30},
        "score": {"type": "number", "description": "User score", "default": 95.5},
        "status": {
            "type": "string",
            "description": "User status",
            "enum": ["active", "inactive", "pending"],
            "default": "active",
        },
        "verified": {"type": "boolean", "description": "Verification status", "default": True},
    },
    "required": [],
}
ELICIT_ENUMS_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "untitledSingle": {"type": "string", "enum": ["option1", "option2", "option3"]},
        "titledSingle": {
            "type": "string",
            "oneOf": [
                {"const": "value1", "title": "First Option"},
                {"const": "value2", "title": "Second Option"},
                {"const": "value3", "title": "Third Option"},
            ],
        },
        "legacyEnum": {
            "type": "string",
            "enum": ["opt1", "opt2", "opt3"],
            "enumNames": ["Option One", "Option Two", "Option Three"],
        },
        "untitledMulti": {
            "type": "array",
            "items": {"type": "string", "enum": ["option1", "option2", "option3"]},
        },
        "titledMulti": {
            "type": "array",
            "items": {
                "anyOf": [
                    {"const": "value1", "title": "First Choice"},
                    {"const": "value2", "title": "Second Choice"},
                    {"const": "value3", "title": "Third Choice"},
                ]
            },
        },
    },
    "required": [],
}
ELICIT_USER_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "username": {"type": "string", "description": "User's response"},
        "email": {"type": "string", "description": "User's email address"},
    },
    "required": ["username", "email"],
}
JSON_SCHEMA_2020_12: Final[dict[str, Any]] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "address": {
            "$anchor": "addressDef",
            "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
        }
    },
    "properties": {
        "name": {"type": "string"},
        "address": {"$ref": "#/$defs/address"},
        "contactMethod": {"type": "string", "enum": ["phone", "email"]},
        "phone": {"type": "string"},
        "email": {"type": "string"},
    },
    "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
    "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
    "then": {"required": ["phone"]},
    "else": {"required": ["email"]},
    "additionalProperties": False,
}
CUSTOM_HEADER_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "region": {"type": "string", "description": "Mirrored as Mcp-Param-Region", "x-mcp-header": "Region"},
        "query": {"type": "string", "description": "Not mirrored"},
    },
    "required": ["region"],
}
NO_ARGS: Final[dict[str, Any]] = {"type": "object", "properties": {}}


class MemoryEventStore(EventStore):
    """Every SSE event kept in memory, so a client that lost a stream resumes it with
    ``Last-Event-ID`` (SEP-1699). A test process lives seconds; nothing is evicted."""

    def __init__(self) -> None:
        self._events: list[tuple[EventId, StreamId, types.JSONRPCMessage | None]] = []
        self._ids = itertools.count(1)

    async def store_event(self, stream_id: StreamId, message: types.JSONRPCMessage | None) -> EventId:
        event_id = str(next(self._ids))
        self._events.append((event_id, stream_id, message))
        return event_id

    async def replay_events_after(
        self, last_event_id: EventId, send_callback: EventCallback
    ) -> StreamId | None:
        found = [i for i, (eid, _, _) in enumerate(self._events) if eid == last_event_id]
        if not found:
            return None
        stream = self._events[found[0]][1]
        for event_id, stream_id, message in self._events[found[0] + 1 :]:
            if stream_id == stream and message is not None:
                await send_callback(EventMessage(message, event_id))
        return stream


def text(value: str, *, is_error: bool = False) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=value)], is_error=is_error)


def _modern(ctx: Ctx) -> bool:
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS and not ALWAYS_BACK_CHANNEL


ALWAYS_BACK_CHANNEL = False
"""``--always-back-channel``: sampling and elicitation go through ``ctx.session`` in both eras,
as a server written the usual way does; on 2026-07-28 the SDK then refuses them ("no
back-channel for server-initiated requests"), so only the handshake era serves them."""


def _answer(params: types.CallToolRequestParams, key: str, model: type[Any]) -> Any:
    """The client's answer to input request ``key`` of an earlier round, or None on round one."""
    answer = (params.input_responses or {}).get(key)
    if answer is None:
        return None
    return model.model_validate(
        answer.model_dump(by_alias=True, mode="json", exclude_none=True), by_name=False
    )


STATE_KEY: Final = secrets.token_bytes(32)
"""Signs ``requestState`` for this process's lifetime: a client (or a proxy) that alters
the state it echoes is refused, as the multi-round-trip rules ask of a server."""


def seal_state(payload: str) -> str:
    """``payload`` as an opaque, integrity-protected ``requestState``."""
    mac = hmac.new(STATE_KEY, payload.encode(), hashlib.sha256).hexdigest()
    return f"{base64.urlsafe_b64encode(payload.encode()).decode()}.{mac}"


def open_state(state: str | None) -> str | None:
    """The payload of a ``requestState`` this fixture sealed; None when there is none.
    A state that fails its integrity check is refused with -32602."""
    if state is None:
        return None
    body, _, mac = state.rpartition(".")
    try:
        payload = base64.urlsafe_b64decode(body.encode()).decode()
    except (ValueError, UnicodeDecodeError):
        payload = None
    expected = hmac.new(STATE_KEY, (payload or "").encode(), hashlib.sha256).hexdigest()
    if payload is None or not hmac.compare_digest(mac, expected):
        raise MCPError(types.INVALID_PARAMS, "requestState failed its integrity check")
    return payload


def ask_form(message: str, field: str, kind: str = "string") -> types.ElicitRequest:
    schema = {"type": "object", "properties": {field: {"type": kind}}, "required": [field]}
    return types.ElicitRequest(params=types.ElicitRequestFormParams(message=message, requested_schema=schema))


def ask_llm(prompt: str, max_tokens: int) -> types.CreateMessageRequest:
    content = types.TextContent(type="text", text=prompt)
    messages = [types.SamplingMessage(role="user", content=content)]
    return types.CreateMessageRequest(
        params=types.CreateMessageRequestParams(messages=messages, max_tokens=max_tokens)
    )


ASK_ROOTS: Final = types.ListRootsRequest()

Answers = dict[str, dict[str, Any]]


async def gather(
    ctx: Ctx,
    params: types.CallToolRequestParams | types.GetPromptRequestParams,
    asks: dict[str, types.InputRequest],
    state: str | None = None,
    *,
    together: bool = False,
) -> Answers | types.InputRequiredResult:
    """The client's answers to ``asks``, keyed as asked.

    On 2026-07-28 the answers come from ``inputResponses``; any missing one is asked for
    (again) with an ``InputRequiredResult`` carrying ``state``; keys nobody asked for are
    ignored. In the handshake era the requests go to the client mid-call, one after the
    other, or with ``together`` all at once (as a server that needs several answers at the
    same time sends them), each answer kept under its key.
    """
    if _modern(ctx):
        got = {
            key: answer.model_dump(by_alias=True, mode="json", exclude_none=True)
            for key, answer in (params.input_responses or {}).items()
        }
        missing = {key: ask for key, ask in asks.items() if key not in got}
        if missing:
            return types.InputRequiredResult(input_requests=missing, request_state=state)
        return {key: got[key] for key in asks}
    answers: Answers = {}

    async def ask_one(key: str, ask: types.InputRequest) -> None:
        result: Any
        if isinstance(ask, types.ElicitRequest):
            form = ask.params
            assert isinstance(form, types.ElicitRequestFormParams)
            result = await ctx.session.elicit_form(
                form.message, form.requested_schema, related_request_id=ctx.request_id
            )
        elif isinstance(ask, types.CreateMessageRequest):
            result = await ctx.session.create_message(
                ask.params.messages, max_tokens=ask.params.max_tokens, related_request_id=ctx.request_id
            )
        else:
            result = await ctx.session.list_roots()
        answers[key] = result.model_dump(by_alias=True, mode="json", exclude_none=True)

    if not together:
        for key, ask in asks.items():
            await ask_one(key, ask)
        return answers
    async with anyio.create_task_group() as tg:
        for key, ask in asks.items():
            tg.start_soon(ask_one, key, ask)
    return {key: answers[key] for key in asks}


def said(answer: dict[str, Any], field: str) -> str:
    """One field of an accepted form, or what the LLM said."""
    content = answer.get("content")
    if isinstance(content, dict) and content.get("type") == "text":
        return str(content.get("text", ""))
    if isinstance(content, dict):
        return str(content.get(field, ""))
    return ""


class Conformance:
    """The scenarios' tools, resources, prompts and completions."""

    def __init__(self) -> None:
        self.subscriptions: set[str] = set()
        self.bus = InMemorySubscriptionBus()
        self.tools: dict[str, tuple[types.Tool, ToolFn]] = {}
        tool = self._tool
        tool("test_simple_text", "Returns a simple text response.", NO_ARGS, self.t_simple_text)
        tool("test_image_content", "Returns a 1x1 PNG image.", NO_ARGS, self.t_image)
        tool("test_audio_content", "Returns a tiny WAV audio clip.", NO_ARGS, self.t_audio)
        tool("test_embedded_resource", "Returns an embedded text resource.", NO_ARGS, self.t_embedded)
        tool(
            "test_multiple_content_types", "Returns text, image and resource content.", NO_ARGS, self.t_mixed
        )
        tool(
            "test_tool_with_logging", "Sends three info log messages while it runs.", NO_ARGS, self.t_logging
        )
        tool("test_tool_with_progress", "Reports progress 0, 50 and 100 of 100.", NO_ARGS, self.t_progress)
        tool("test_error_handling", "Always fails with isError: true.", NO_ARGS, self.t_error)
        tool(
            "test_sampling",
            "Asks the client's LLM to answer the prompt.",
            {
                "type": "object",
                "properties": {"prompt": {"type": "string", "description": "The prompt"}},
                "required": ["prompt"],
            },
            self.t_sampling,
        )
        tool(
            "test_elicitation",
            "Asks the user for a username and email.",
            {
                "type": "object",
                "properties": {"message": {"type": "string", "description": "Shown to the user"}},
                "required": ["message"],
            },
            self.t_elicitation,
        )
        tool(
            "test_elicitation_sep1034_defaults",
            "Elicits a form whose fields carry defaults (SEP-1034).",
            NO_ARGS,
            self.t_elicit_defaults,
        )
        tool(
            "test_elicitation_sep1330_enums",
            "Elicits a form with every enum variant (SEP-1330).",
            NO_ARGS,
            self.t_elicit_enums,
        )
        tool(
            "json_schema_2020_12_tool",
            "Tool with JSON Schema 2020-12 features",
            JSON_SCHEMA_2020_12,
            self.t_simple_text,
        )
        tool(
            "test_reconnection",
            "Closes its SSE stream mid-call, then answers (SEP-1699).",
            NO_ARGS,
            self.t_reconnection,
        )

        # 2026-07-28 multi-round-trip requests (SEP-2322): each asks for input with an
        # InputRequiredResult on 2026-07-28 and mid-call in the handshake era.
        for name, description, fn in (
            ("test_input_required_result_elicitation", "Asks the user's name.", self.t_irr_elicitation),
            ("test_input_required_result_sampling", "Asks the client's LLM a question.", self.t_irr_sampling),
            ("test_input_required_result_list_roots", "Asks for the client's roots.", self.t_irr_roots),
            (
                "test_input_required_result_request_state",
                "Asks for a confirmation, carrying signed requestState.",
                self.t_irr_request_state,
            ),
            (
                "test_input_required_result_multiple_inputs",
                "Asks for a form, an LLM answer and the roots at once.",
                self.t_irr_multiple,
            ),
            ("test_input_required_result_multi_round", "Asks twice, in two rounds.", self.t_irr_multi_round),
            (
                "test_input_required_result_tampered_state",
                "Refuses a retry whose requestState was altered.",
                self.t_irr_tampered,
            ),
            (
                "test_input_required_result_capabilities",
                "Asks only through capabilities the client declared.",
                self.t_irr_capabilities,
            ),
            (
                "test_missing_capability",
                "Needs sampling; refused (-32021) without it.",
                self.t_missing_capability,
            ),
            ("test_streaming_elicitation", "Asks the user for a value.", self.t_streaming_elicitation),
            ("test_logging_tool", "Logs at info, then answers.", self.t_logging_tool),
            ("test_trigger_tool_change", "Announces a change of the tool list.", self.t_trigger_tools),
            ("test_trigger_prompt_change", "Announces a change of the prompt list.", self.t_trigger_prompts),
        ):
            tool(name, description, NO_ARGS, fn)
        tool(
            "test_custom_header",
            "Mirrors its region argument into the Mcp-Param-Region header (SEP-2243).",
            CUSTOM_HEADER_SCHEMA,
            self.t_custom_header,
        )

    def _tool(self, name: str, description: str, schema: dict[str, Any], fn: ToolFn) -> None:
        self.tools[name] = (types.Tool(name=name, description=description, input_schema=schema), fn)

    # ------------------------------------------------------------------ tools
    async def t_simple_text(self, ctx: Ctx, params: types.CallToolRequestParams) -> Any:
        return text("This is a simple text response for testing.")

    async def t_image(self, ctx: Ctx, params: types.CallToolRequestParams) -> Any:
        return types.CallToolResult(
            content=[types.ImageContent(type="image", data=PNG_B64, mime_type="image/png")]
        )

    async def t_audio(self, ctx: Ctx, params: types.CallToolRequestParams) -> Any:
        return types.CallToolResult(
            content=[types.AudioContent(type="audio", data=WAV_B64, mime_type="audio/wav")]
        )

    async def t_embedded(self, ctx: Ctx, params: types.CallToolRequestParams) -> Any:
        resource = types.TextResourceContents(
            uri="test://embedded-resource",
            mime_type="text/plain",
            text="This is an embedded resource content.",
        )
        return types.CallToolResult(content=[types.EmbeddedResource(type="resource", resource=resource)])

    async def t_mixed(self, ctx: Ctx, params: types.CallToolRequestParams) -> Any:
        resource = types.TextResourceContents(
            uri="test://mixed-content-resource",
            mime_type="application/json",
            text=json.dumps({"test": "data", "value": 123}),
        )
        return types.CallToolResult(
            content=[
                types.TextContent(type="text", text="Multiple content types test:"),
                types.ImageContent(type="image", data=PNG_B64, mime_type="image/png"),
                types.EmbeddedResource(type="resource", resource=resource),
            ]
        )

    async def t_logging(self, ctx: Ctx, params: types.CallToolRequestParams) -> Any:
        for i, line in enumerate(
            ("Tool execution started", "Tool processing data", "Tool execution completed")
        ):
            if i:
                await anyio.sleep(STEP_DELAY_S)
            await ctx.session.send_log_message(
                "info", line, logger="conformance", related_request_id=ctx.request_id
            )
        return text("Tool with logging executed successfully")

    async def t_progress(self, ctx: Ctx, params: types.CallToolRequestParams) -> Any:
        for i, value in enumerate((0, 50, 100)):
            if i:
                await anyio.sleep(STEP_DELAY_S)
            await ctx.session.report_progress(value, 100, f"{value}%")
        return text("Tool with progress executed successfully")

    async def t_error(self, ctx: Ctx, params: types.CallToolRequestParams) -> Any:
        return text("This tool intentionally returns an error for testing", is_error=True)

    async def t_sampling(self, ctx: Ctx, params: types.CallToolRequestParams) -> Any:
        prompt = str((params.arguments or {}).get("prompt", ""))
        messages = [types.SamplingMessage(role="user", content=types.TextContent(type="text", text=prompt))]
        if _modern(ctx):
            result = _answer(params, "sampling", types.CreateMessageResult)
            if result is None:
                request = types.CreateMessageRequest(
                    params=types.CreateMessageRequestParams(messages=messages, max_tokens=100)
                )
                return types.InputRequiredResult(input_requests={"sampling": request})
        else:
            result = await ctx.session.create_message(
                messages, max_tokens=100, related_request_id=ctx.request_id
            )
        content = result.content
        answer = content.text if isinstance(content, types.TextContent) else str(content)
        return text(f"LLM response: {answer}")

    async def _elicit(
        self, ctx: Ctx, params: types.CallToolRequestParams, message: str, schema: dict[str, Any]
    ) -> Any:
        """Ask the user with a form; on 2026-07-28 as an input request (None: the round was sent)."""
        if _modern(ctx):
            result = _answer(params, "elicitation", types.ElicitResult)
            if result is None:
                request = types.ElicitRequest(
                    params=types.ElicitRequestFormParams(message=message, requested_schema=schema)
                )
                return types.InputRequiredResult(input_requests={"elicitation": request})
            return result
        return await ctx.session.elicit_form(message, schema, related_request_id=ctx.request_id)

    async def _elicit_tool(
        self, ctx: Ctx, params: types.CallToolRequestParams, message: str, schema: dict[str, Any], prefix: str
    ) -> Any:
        result = await self._elicit(ctx, params, message, schema)
        if isinstance(result, types.InputRequiredResult):
            return result
        return text(f"{prefix}action={result.action}, content={json.dumps(result.content)}")

    async def t_elicitation(self, ctx: Ctx, params: types.CallToolRequestParams) -> Any:
        message = str((params.arguments or {}).get("message", ""))
        return await self._elicit_tool(ctx, params, message, ELICIT_USER_SCHEMA, "User response: ")

    async def t_elicit_defaults(self, ctx: Ctx, params: types.CallToolRequestParams) -> Any:
        return await self._elicit_tool(
            ctx,
            params,
            "Test client default value handling - please accept with defaults",
            ELICIT_DEFAULTS_SCHEMA,
            "Elicitation completed: ",
        )

    async def t_elicit_enums(self, ctx: Ctx, params: types.CallToolRequestParams) -> Any:
        return await self._elicit_tool(
            ctx, params, "Pick from every kind of enum", ELICIT_ENUMS_SCHEMA, "Elicitation completed: "
        )

    async def t_reconnection(self, ctx: Ctx, params: types.CallToolRequestParams) -> Any:
        if ctx.close_sse_stream is not None:  # HTTP with an event store and a 2025-11-25+ client
            # One event first, so the client holds an event id to resume from.
            await ctx.session.send_log_message(
                "info", "Before disconnect", logger="conformance", related_request_id=ctx.request_id
            )
            # The SDK drops what is still queued for the stream when it closes it: give the
            # response a moment to write the priming event and the log first.
            await anyio.sleep(STREAM_FLUSH_S)
            await ctx.close_sse_stream()
            await anyio.sleep(RECONNECT_DELAY_S)
        return text("Reconnection test completed successfully")

    async def t_irr_elicitation(self, ctx: Ctx, params: types.CallToolRequestParams) -> Any:
        got = await gather(ctx, params, {"user_name": ask_form("What is your name?", "name")})
        if isinstance(got, types.InputRequiredResult):
            return got
        return text(f"Hello, {said(got['user_name'], 'name')}!")

    async def t_irr_sampling(self, ctx: Ctx, params: types.CallToolRequestParams) -> Any:
        got = await gather(ctx, params, {"capital_question": ask_llm("What is the capital of France?", 100)})
        if isinstance(got, types.InputRequiredResult):
            return got
        return text(f"LLM response: {said(got['capital_question'], 'text')}")

    async def t_irr_roots(self, ctx: Ctx, params: types.CallToolRequestParams) -> Any:
        got = await gather(ctx, params, {"client_roots": ASK_ROOTS})
        if isinstance(got, types.InputRequiredResult):
            return got
        uris = [str(root.get("uri")) for root in got["client_roots"].get("roots", [])]
        return text(f"Roots: {', '.join(uris) or '(none)'}")

    async def t_irr_request_state(self, ctx: Ctx, params: types.CallToolRequestParams) -> Any:
        ask: dict[str, types.InputRequest] = {"confirm": ask_form("Please confirm", "ok", "boolean")}
        if open_state(params.request_state) != "confirm" and _modern(ctx):
            return types.InputRequiredResult(input_requests=ask, request_state=seal_state("confirm"))
        got = await gather(ctx, params, ask, seal_state("confirm"))
        if isinstance(got, types.InputRequiredResult):
            return got
        return text(f"state-ok: confirmed={said(got['confirm'], 'ok')}")

    async def t_irr_multiple(self, ctx: Ctx, params: types.CallToolRequestParams) -> Any:
        asks: dict[str, types.InputRequest] = {
            "user_name": ask_form("What is your name?", "name"),
            "greeting": ask_llm("Generate a greeting", 50),
            "client_roots": ASK_ROOTS,
        }
        open_state(params.request_state)
        got = await gather(ctx, params, asks, seal_state("multiple"), together=True)
        if isinstance(got, types.InputRequiredResult):
            return got
        return text(f"All inputs received: {said(got['user_name'], 'name')}, {said(got['greeting'], 'text')}")

    async def t_irr_multi_round(self, ctx: Ctx, params: types.CallToolRequestParams) -> Any:
        step1: dict[str, types.InputRequest] = {"step1": ask_form("Step 1: What is your name?", "name")}
        step2: dict[str, types.InputRequest] = {
            "step2": ask_form("Step 2: What is your favorite color?", "color")}
        if not _modern(ctx):  # the handshake era asks both, in order, within the call
            one, two = await gather(ctx, params, step1), await gather(ctx, params, step2)
            assert not isinstance(one, types.InputRequiredResult)
            assert not isinstance(two, types.InputRequiredResult)
            return text(f"{said(one['step1'], 'name')} likes {said(two['step2'], 'color')}")
        state = open_state(params.request_state)
        responses = params.input_responses or {}
        if state is not None and state.startswith("round-2:") and "step2" in responses:
            name = state.removeprefix("round-2:")
            color = said(responses["step2"].model_dump(by_alias=True, mode="json"), "color")
            return text(f"{name} likes {color}")
        if state == "round-1" and "step1" in responses:
            name = said(responses["step1"].model_dump(by_alias=True, mode="json"), "name")
            return types.InputRequiredResult(
                input_requests=step2, request_state=seal_state(f"round-2:{name}")
            )
        return types.InputRequiredResult(input_requests=step1, request_state=seal_state("round-1"))

    async def t_irr_tampered(self, ctx: Ctx, params: types.CallToolRequestParams) -> Any:
        open_state(params.request_state)
        got = await gather(
            ctx, params, {"confirm": ask_form("Please confirm", "ok", "boolean")}, seal_state("t")
        )
        if isinstance(got, types.InputRequiredResult):
            return got
        return text("state verified")

    async def t_irr_capabilities(self, ctx: Ctx, params: types.CallToolRequestParams) -> Any:
        caps = ctx.session.client_capabilities or types.ClientCapabilities()
        asks: dict[str, types.InputRequest] = {}
        if caps.sampling is not None:
            asks["capital_question"] = ask_llm("What is the capital of France?", 100)
        if caps.elicitation is not None:
            asks["user_name"] = ask_form("What is your name?", "name")
        if not asks:
            return text("The client declared neither sampling nor elicitation: nothing to ask.")
        got = await gather(ctx, params, asks)
        if isinstance(got, types.InputRequiredResult):
            return got
        return text(f"Answered: {', '.join(sorted(got))}")

    async def t_missing_capability(self, ctx: Ctx, params: types.CallToolRequestParams) -> Any:
        caps = ctx.session.client_capabilities
        if caps is None or caps.sampling is None:
            raise MCPError(
                types.MISSING_REQUIRED_CLIENT_CAPABILITY,
                "test_missing_capability needs the client's sampling capability",
                data={"requiredCapabilities": {"sampling": {}}},
            )
        got = await gather(ctx, params, {"capital_question": ask_llm("What is the capital of France?", 100)})
        if isinstance(got, types.InputRequiredResult):
            return got
        return text(f"LLM response: {said(got['capital_question'], 'text')}")

    async def t_streaming_elicitation(self, ctx: Ctx, params: types.CallToolRequestParams) -> Any:
        got = await gather(ctx, params, {"value": ask_form("Enter a value", "value")})
        if isinstance(got, types.InputRequiredResult):
            return got
        return text(f"Value: {said(got['value'], 'value')}")

    async def t_logging_tool(self, ctx: Ctx, params: types.CallToolRequestParams) -> Any:
        # On 2026-07-28 the SDK sends this only when the request's _meta asked for logs.
        await ctx.session.send_log_message(
            "info", "test_logging_tool ran", logger="conformance", related_request_id=ctx.request_id
        )
        return text("Logged (if the request asked for logs).")

    async def t_trigger_tools(self, ctx: Ctx, params: types.CallToolRequestParams) -> Any:
        await self.bus.publish(ToolsListChanged())
        if not _modern(ctx):
            await ctx.session.send_tool_list_changed()
        return text("Tool list change announced.")

    async def t_trigger_prompts(self, ctx: Ctx, params: types.CallToolRequestParams) -> Any:
        await self.bus.publish(PromptsListChanged())
        if not _modern(ctx):
            await ctx.session.send_prompt_list_changed()
        return text("Prompt list change announced.")

    async def t_custom_header(self, ctx: Ctx, params: types.CallToolRequestParams) -> Any:
        return text(f"Region: {(params.arguments or {}).get('region', '')}")

    # ------------------------------------------------------------------ handlers
    async def on_list_tools(
        self, ctx: Ctx, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[tool for tool, _ in self.tools.values()])

    async def on_call_tool(self, ctx: Ctx, params: types.CallToolRequestParams) -> Any:
        entry = self.tools.get(params.name)
        if entry is None:
            raise MCPError(types.INVALID_PARAMS, f"Unknown tool: {params.name}")
        return await entry[1](ctx, params)

    async def on_list_resources(self, ctx: Ctx, params: Any) -> types.ListResourcesResult:
        return types.ListResourcesResult(
            resources=[
                types.Resource(
                    uri="test://static-text",
                    name="static-text",
                    description="A static text resource",
                    mime_type="text/plain",
                ),
                types.Resource(
                    uri="test://static-binary",
                    name="static-binary",
                    description="A static PNG image",
                    mime_type="image/png",
                ),
                types.Resource(
                    uri="test://watched-resource",
                    name="watched-resource",
                    description="A resource clients may subscribe to",
                    mime_type="text/plain",
                ),
            ]
        )

    async def on_list_resource_templates(self, ctx: Ctx, params: Any) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(
            resource_templates=[
                types.ResourceTemplate(
                    uri_template="test://template/{id}/data",
                    name="template-data",
                    description="Data for an id",
                    mime_type="application/json",
                ),
            ]
        )

    async def on_read_resource(
        self, ctx: Ctx, params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        uri = str(params.uri)
        contents: types.TextResourceContents | types.BlobResourceContents
        if uri == "test://static-text":
            contents = types.TextResourceContents(
                uri=uri, mime_type="text/plain", text="This is the content of the static text resource."
            )
        elif uri == "test://static-binary":
            contents = types.BlobResourceContents(uri=uri, mime_type="image/png", blob=PNG_B64)
        elif uri == "test://watched-resource":
            contents = types.TextResourceContents(
                uri=uri, mime_type="text/plain", text="Watched resource content."
            )
        elif uri.startswith("test://template/") and uri.endswith("/data"):
            item = uri.removeprefix("test://template/").removesuffix("/data")
            body = json.dumps({"id": item, "templateTest": True, "data": f"Data for ID: {item}"})
            contents = types.TextResourceContents(uri=uri, mime_type="application/json", text=body)
        else:
            raise MCPError(types.INVALID_PARAMS, f"Resource not found: {uri}", data={"uri": uri})
        return types.ReadResourceResult(contents=[contents])

    async def on_subscribe(self, ctx: Ctx, params: types.SubscribeRequestParams) -> types.EmptyResult:
        self.subscriptions.add(str(params.uri))
        return types.EmptyResult()

    async def on_unsubscribe(self, ctx: Ctx, params: types.UnsubscribeRequestParams) -> types.EmptyResult:
        self.subscriptions.discard(str(params.uri))
        return types.EmptyResult()

    async def on_list_prompts(self, ctx: Ctx, params: Any) -> types.ListPromptsResult:
        arg = types.PromptArgument
        return types.ListPromptsResult(
            prompts=[
                types.Prompt(name="test_simple_prompt", description="A simple prompt without arguments"),
                types.Prompt(
                    name="test_prompt_with_arguments",
                    description="A prompt with two arguments",
                    arguments=[
                        arg(name="arg1", description="First test argument", required=True),
                        arg(name="arg2", description="Second test argument", required=True),
                    ],
                ),
                types.Prompt(
                    name="test_prompt_with_embedded_resource",
                    description="A prompt embedding a resource",
                    arguments=[
                        arg(name="resourceUri", description="URI of the resource to embed", required=True)
                    ],
                ),
                types.Prompt(name="test_prompt_with_image", description="A prompt with an image"),
                types.Prompt(
                    name="test_input_required_result_prompt",
                    description="A prompt that first asks the user for context (SEP-2322)",
                ),
            ]
        )

    async def on_get_prompt(
        self, ctx: Ctx, params: types.GetPromptRequestParams
    ) -> types.GetPromptResult | types.InputRequiredResult:
        args = params.arguments or {}

        def user(content: Any) -> types.PromptMessage:
            return types.PromptMessage(role="user", content=content)

        def say(value: str) -> types.PromptMessage:
            return user(types.TextContent(type="text", text=value))

        if params.name == "test_simple_prompt":
            messages = [say("This is a simple prompt for testing.")]
        elif params.name == "test_prompt_with_arguments":
            messages = [
                say(f"Prompt with arguments: arg1='{args.get('arg1', '')}', arg2='{args.get('arg2', '')}'")
            ]
        elif params.name == "test_prompt_with_embedded_resource":
            resource = types.TextResourceContents(
                uri=args.get("resourceUri", "test://example-resource"),
                mime_type="text/plain",
                text="Embedded resource content for testing.",
            )
            messages = [
                user(types.EmbeddedResource(type="resource", resource=resource)),
                say("Please process the embedded resource above."),
            ]
        elif params.name == "test_input_required_result_prompt":
            got = await gather(
                ctx, params, {"user_context": ask_form("What context should the prompt use?", "context")}
            )
            if isinstance(got, types.InputRequiredResult):
                return got
            messages = [say(f"Use this context: {said(got['user_context'], 'context')}")]
        elif params.name == "test_prompt_with_image":
            messages = [
                user(types.ImageContent(type="image", data=PNG_B64, mime_type="image/png")),
                say("Please analyze the image above."),
            ]
        else:
            raise MCPError(types.INVALID_PARAMS, f"Unknown prompt: {params.name}")
        return types.GetPromptResult(messages=messages)

    async def on_completion(self, ctx: Ctx, params: types.CompleteRequestParams) -> types.CompleteResult:
        ref, arg = params.ref, params.argument
        values: list[str] = []
        if isinstance(ref, types.PromptReference) and ref.name == "test_prompt_with_arguments":
            values = [v for v in ("paris", "park", "party", "test-value") if v.startswith(arg.value)]
        elif isinstance(ref, types.ResourceTemplateReference) and arg.name == "id":
            values = [v for v in ("1", "2", "123") if v.startswith(arg.value)]
        return types.CompleteResult(
            completion=types.Completion(values=values, total=len(values), has_more=False)
        )

    async def on_set_logging_level(self, ctx: Ctx, params: types.SetLevelRequestParams) -> types.EmptyResult:
        return types.EmptyResult()

    def build_server(self) -> Server[Any]:
        return Server(
            "conformance-fixture",
            version="1.0.0",
            instructions="mcpvisor's conformance fixture: every scenario of the official server suite.",
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
        )


async def serve_stdio(server: Server[Any]) -> None:
    from mcp.server.stdio import stdio_server

    init = server.create_initialization_options(
        NotificationOptions(tools_changed=True, prompts_changed=True, resources_changed=True)
    )
    async with stdio_server() as (read_stream, write_stream):
        print("conformance ready", file=sys.stderr, flush=True)
        await server.run(read_stream, write_stream, init)


async def serve_http(server: Server[Any], port: int) -> None:
    import hypercorn.config
    import hypercorn.trio
    import trio

    app = server.streamable_http_app(
        streamable_http_path="/mcp",
        host="127.0.0.1",
        event_store=MemoryEventStore(),
        retry_interval=SSE_RETRY_MS,
    )
    config = hypercorn.config.Config()
    config.bind = [f"127.0.0.1:{port}"]
    config.accesslog = None
    config.graceful_timeout = 1.0
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(hypercorn.trio.serve, app, config)
        print(f"conformance ready {binds[0].rstrip('/')}/mcp", file=sys.stderr, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--http", action="store_true", help="serve streamable HTTP instead of stdio")
    parser.add_argument(
        "--port", type=int, default=0, help="HTTP port on 127.0.0.1 (default: 0, any free port)"
    )
    parser.add_argument(
        "--always-back-channel",
        action="store_true",
        help="ask for sampling/elicitation through ctx.session in both eras (the usual way)",
    )
    opts = parser.parse_args()
    global ALWAYS_BACK_CHANNEL
    ALWAYS_BACK_CHANNEL = opts.always_back_channel
    server = Conformance().build_server()
    if opts.http:
        anyio.run(serve_http, server, opts.port, backend="trio")
    else:
        anyio.run(serve_stdio, server)


if __name__ == "__main__":
    main()
