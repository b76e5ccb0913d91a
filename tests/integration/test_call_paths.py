"""The same ``tools/call`` through every caller gives the same answer (one plan, issue 24).

A call's plan (`mcpvisor.actors.core.plan`) is executed by four callers; this runs one list of
calls through each of them, every leg on its own proxy with its own real subprocess
upstreams (the stdlib fixture server), and compares what comes back:

* ``api``: `Supervisor.call_tool` in this process;
* ``session``: a harness session (``sup.session(...)``) in this process;
* ``sdk-front``: a real SDK client over OS pipes to the stdio front in this process, with
  the fast path off, so the SDK front's `ToolCalls` executes every call (its statistics
  say so);
* ``fast-path``: a real SDK client over stdio to a ``mcpvisor serve`` subprocess, where the
  fast path is on;
* ``fast-path-here``: the same front as ``sdk-front`` with the fast path on, whose
  statistics say which calls the fast path executed itself: a routed tool, a compound
  tool's subtool, ``use_tool``'s tool. A fast path that handed those to the SDK, or took
  one it must not (a lazy server to load, a refusal), shows there.

Compared: each answer (``isError`` and its text, so the words of an unknown name's "did
you mean" and of a refused compound or ``use_tool`` call too); the names listed, before
and after equipping a toolset (a session equips its own; the names must be the proxy's,
``my_box_add``, flattened); a lazy server loaded by the first call of one of its tools;
the session-scoped server's counter, which counts 1, 2 only when a direct call and a
``use_tool`` call of one caller reach the same instance; and the journal's rows. A
regression shows as a leg whose answer, names or rows differ from the others' (the
failure names the leg and the call).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol

import pytest
import trio
from mcp import Client

from mcpvisor.actors.core.toolsets import MANAGEMENT_TOOLS
from mcpvisor.tree import open_supervisor
from tests.helpers import (
    REAL_IO_BOUND_S,
    embedded_connection,
    flaky,
    pipe_transport,
    proxy_client,
    write_config,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(REAL_IO_BOUND_S * 2.5)]

Answer = tuple[bool, str]
"""A call's answer as compared: (isError, the text of its content)."""

COMPOUND: Final = {"kit": {"description": "The box's echo, through one tool",
                           "subtools": {"my-box": {"tools": [{"name": "echo"}]}}}}
TOOLSET: Final = "small"


@dataclass(frozen=True)
class Call:
    """One call of the list, what it must answer, and whether the fast path executes it itself."""

    name: str
    arguments: Mapping[str, Any]
    expect: Answer
    fast: bool


def ok(text: str) -> Answer:
    return False, text


def refused(text: str) -> Answer:
    return True, text


ALL_CALLS: Final = (
    Call("my_box_echo", {"text": "hi"}, ok("echo: hi"), fast=True),
    Call("kit", {"server": "my-box", "tool": "echo", "args": {"text": "c"}}, ok("echo: c"), fast=True),
    Call("kit", {"server": "my-box", "tool": "add", "args": {}},
         refused("kit: field 'tool': my-box.add is not a subtool of kit. Subtools: my-box.echo."),
         fast=False),
    Call("my_box_ech", {"text": "x"},
         refused("Unknown tool 'my_box_ech': server my-box has no such tool. Did you mean: "
                 "my_box_echo, my_box_crash, my_box_idem_echo, my_box_plain_echo, my_box_sleep?"),
         fast=False),
    Call("lazy_one_echo", {"text": "l"}, ok("echo: l"), fast=False),  # loads lazy-one first
    Call("lazy_one_echo", {"text": "again"}, ok("echo: again"), fast=True),
    Call("own_counter", {}, ok("1"), fast=True),  # the caller's own instance starts; the call waits
    Call("own_counter", {}, ok("2"), fast=True),
)
"""``exposure: all``: names, a compound tool, an unknown name, a lazy server, a session-scoped one."""

AFTER_EQUIP: Final = (Call("my_box_add", {"a": 2, "b": 3}, ok("5"), fast=True),)

DISCOVERY_CALLS: Final = (
    Call("use_tool", {"tool_name": "my_box_echo", "arguments": {"text": "u"}}, ok("echo: u"), fast=True),
    Call("use_tool", {"tool_name": "my-box.echo", "arguments": {"text": "v"}}, ok("echo: v"), fast=True),
    Call("use_tool", {"tool_name": "my_box_add", "arguments": {"a": "x", "b": 1}},
         refused("Invalid arguments for my_box_add: arguments.a: 'x' is not of type 'number'. Nothing was "
                 'sent; see its input schema with discover_tool {"tool_name": "my_box_add"}.'), fast=False),
    Call("use_tool", {"tool_name": "my_box_ecko"},
         refused("Unknown tool 'my_box_ecko'. Did you mean: my_box_echo, my_box_idem_echo, my_box_counter, "
                 "my_box_plain_echo, my_box_sleep?"), fast=False),
    Call("use_tool", {"tool_name": "lazy_one_echo", "arguments": {"text": "l"}}, ok("echo: l"), fast=False),
    Call("own_counter", {}, ok("1"), fast=True),  # its instance starts; the call waits for it
    # The same instance as the direct call: the caller's own.
    Call("use_tool", {"tool_name": "own_counter"}, ok("2"), fast=True),
    Call("use_tool", {"tool_name": "kit",
                      "arguments": {"server": "my-box", "tool": "echo", "args": {"text": "k"}}},
         ok("echo: k"), fast=True),
)
"""``exposure: discovery``: ``use_tool`` by exposed and namespaced name, bad arguments, an
unknown name, a lazy server, the session-scoped counter, a compound tool."""


def write_leg_config(directory: Path, exposure: str) -> Path:
    directory.mkdir()
    servers = {
        "my-box": flaky("--name", "my-box"),
        "lazy-one": flaky("--name", "lazy-one", lazy=True, description="Loaded on first use"),
        "own": flaky("--name", "own", scope="session"),
    }
    path = write_config(directory, servers, toolsets={TOOLSET: ["my-box.add"]}, exposure=exposure,
                        journal=str(directory / "journal.db"), stateDir=str(directory / "state"))
    doc = json.loads(path.read_text())
    doc["tools"] = COMPOUND
    path.write_text(json.dumps(doc, indent=2))
    return path


class Leg(Protocol):
    """One caller, as the test drives it."""

    async def call(self, name: str, arguments: Mapping[str, Any]) -> Answer: ...

    async def names(self) -> list[str]: ...

    async def equip(self, toolset: str) -> None: ...

    def sdk_calls(self) -> int | None:
        """``tools/call`` requests the SDK front served so far (None: not a front here)."""


def answer_of(result: Mapping[str, Any]) -> Answer:
    return bool(result.get("isError")), "".join(str(c.get("text", "")) for c in result["content"])


class ApiLeg:
    """The embedding API: a `Supervisor`, or a harness session's `SessionView` (same calls)."""

    def __init__(self, sup: Any) -> None:
        self.sup = sup

    async def call(self, name: str, arguments: Mapping[str, Any]) -> Answer:
        return answer_of(await self.sup.call_tool(name, arguments))

    async def names(self) -> list[str]:
        return [t["name"] for t in self.sup.tools()]

    async def equip(self, toolset: str) -> None:
        await self.sup.equip(toolset)

    def sdk_calls(self) -> int | None:
        return None


class ClientLeg:
    def __init__(self, client: Client, front: Any = None) -> None:
        self.client = client
        self.front = front

    async def call(self, name: str, arguments: Mapping[str, Any]) -> Answer:
        result = await self.client.call_tool(name, dict(arguments))
        return bool(result.is_error), "".join(getattr(c, "text", "") for c in result.content)

    async def names(self) -> list[str]:
        return [t.name for t in (await self.client.list_tools()).tools]

    async def equip(self, toolset: str) -> None:
        result = await self.client.call_tool("equip-toolset", {"name": toolset})
        assert not result.is_error, result

    def sdk_calls(self) -> int | None:
        return self.front.statistics().sdk_tool_calls if self.front is not None else None


@asynccontextmanager
async def api_leg(config: Path) -> AsyncIterator[Leg]:
    async with open_supervisor(config, watch=False) as sup:
        await sup.wait_ready()
        yield ApiLeg(sup)


@asynccontextmanager
async def session_leg(config: Path) -> AsyncIterator[Leg]:
    async with open_supervisor(config, watch=False) as sup, sup.session("episode") as session:
        await sup.wait_ready()
        yield ApiLeg(session)


def front_leg(fast_path: bool) -> Callable[[Path], AbstractAsyncContextManager[Leg]]:
    @asynccontextmanager
    async def leg(config: Path) -> AsyncIterator[Leg]:
        async with open_supervisor(config, watch=False) as sup, \
                embedded_connection(sup, fast_path=fast_path) as (send, receive, front), \
                Client(pipe_transport(receive, send), mode="legacy", cache=None) as client:
            await sup.wait_ready()  # the fast path takes a call only to a ready server
            yield ClientLeg(client, front)
    return leg


@asynccontextmanager
async def serve_leg(config: Path) -> AsyncIterator[Leg]:
    async with proxy_client(config) as client:
        yield ClientLeg(client)


LEGS: Final[dict[str, Callable[[Path], AbstractAsyncContextManager[Leg]]]] = {
    "api": api_leg,
    "session": session_leg,
    "sdk-front": front_leg(fast_path=False),
    "fast-path": serve_leg,
    "fast-path-here": front_leg(fast_path=True),
}


@dataclass
class Seen:
    answers: list[Answer]
    names_before: list[str]
    names_after: list[str]
    journal: list[tuple[str, str, str]]


def journal_rows(path: Path) -> list[tuple[str, str, str]]:
    conn = sqlite3.connect(path)
    try:
        return [tuple(r) for r in conn.execute("SELECT server, tool, outcome FROM calls ORDER BY id")]
    finally:
        conn.close()


def upstream_names(names: Sequence[str]) -> list[str]:
    return sorted(n for n in names if n not in MANAGEMENT_TOOLS)


async def run_leg(leg_name: str, config: Path, calls: Sequence[Call], after_equip: Sequence[Call]) -> Seen:
    answers: list[Answer] = []
    async with LEGS[leg_name](config) as leg:
        for call in calls:
            before = leg.sdk_calls()
            answers.append(await leg.call(call.name, call.arguments))
            after = leg.sdk_calls()
            if leg_name == "sdk-front":
                assert before is not None
                assert after == before + 1, f"{call}: the SDK front did not execute it"
            elif before is not None and after is not None:
                took = "the fast path" if after == before else "the SDK front"
                assert (after == before) == call.fast, f"{leg_name}: {call} was executed by {took}"
        names_before = upstream_names(await leg.names())
        await leg.equip(TOOLSET)
        names_after = upstream_names(await leg.names())
        for call in after_equip:
            answers.append(await leg.call(call.name, call.arguments))
    return Seen(answers, names_before, names_after, journal_rows(config.parent / "journal.db"))


@pytest.mark.parametrize(("exposure", "calls"), [("all", ALL_CALLS), ("discovery", DISCOVERY_CALLS)],
                         ids=["all", "discovery"])
async def test_the_same_calls_through_every_path_give_the_same_answers(
        tmp_path: Path, exposure: str, calls: tuple[Call, ...]) -> None:
    """Every leg answers every call as the list says, lists the same names before and after
    equipping the toolset (``my_box_add``: flattened, whatever the path), and journals
    the same rows; see the module docstring for the legs and what a regression looks like."""
    after_equip = AFTER_EQUIP if exposure == "all" else ()
    seen: dict[str, Seen] = {}
    with trio.fail_after(REAL_IO_BOUND_S * 2):
        for leg_name in LEGS:
            config = write_leg_config(tmp_path / leg_name, exposure)
            seen[leg_name] = await run_leg(leg_name, config, calls, after_equip)
    expected = [c.expect for c in (*calls, *after_equip)]
    for leg_name, got in seen.items():
        for call, want, answer in zip((*calls, *after_equip), expected, got.answers, strict=True):
            assert answer == want, f"{leg_name}: {call.name} {dict(call.arguments)}"
    reference = seen["api"]
    if exposure == "all":
        flaky_tools = ("echo", "add", "sleep", "progress", "crash", "counter", "idem_echo", "plain_echo")
        servers = ("my_box", "lazy_one", "own")  # my-box and lazy-one flattened
        assert reference.names_before == sorted(["kit", *(f"{s}_{t}" for s in servers for t in flaky_tools)])
        assert reference.names_after == ["my_box_add"]
    for leg_name, got in seen.items():
        assert got.names_before == reference.names_before, leg_name
        assert got.names_after == reference.names_after, leg_name
        assert got.journal == reference.journal, leg_name
    assert [row for row in reference.journal if row[2] != "ok"] == []
    assert len(reference.journal) == sum(1 for c in (*calls, *after_equip) if not c.expect[0])
