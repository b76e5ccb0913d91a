"""End to end over stdio: a real SDK client -> the proxy's stdio front -> real upstreams.

The upstreams are the SDK fixture server (both eras), the stdlib handshake-era fixture
server and the third-party `mcp-server-time` from PyPI. Every forwarding path of the
core issue is exercised through the real client, in both protocol eras, with the fast
path on and off. The proxy runs in the test process behind the same stdio front
`mcpvisor serve` uses (`tests.helpers.embedded_client`: pipes, not a second `import mcp`);
tests/integration/test_front_edges.py and test_menu_e2e.py drive `mcpvisor serve` itself.
"""

from __future__ import annotations

from pathlib import Path

import mcp_types as types
import pytest
import trio
from mcp.shared.exceptions import MCPError

from tests.helpers import (
    REAL_IO_BOUND_S,
    Recorder,
    embedded_client,
    everything,
    flaky,
    read_record,
    text_of,
    time_server,
    write_config,
)
from tests.polling import poll_until

pytestmark = pytest.mark.slow


@pytest.fixture(params=[True, False], ids=["fastpath", "sdkpath"])
def fast_path(request: pytest.FixtureRequest) -> bool:
    """Protocol tests run with the byte-level tools/call path on and off: they must agree."""
    return bool(request.param)


@pytest.fixture
def three_servers(tmp_path: Path, fast_path: bool) -> tuple[Path, Path]:
    record = tmp_path / "ev.jsonl"
    config = write_config(tmp_path, {
        "ev": everything("--record", str(record)),
        "fl": flaky(),
        "time": time_server(),
    }, fastPath=fast_path)
    return config, record


@pytest.fixture
def ev_server(tmp_path: Path, fast_path: bool) -> tuple[Path, Path]:
    """Only the SDK fixture server: what a test of one forwarding path needs."""
    record = tmp_path / "ev.jsonl"
    return write_config(tmp_path, {"ev": everything("--record", str(record))}, fastPath=fast_path), record


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_client_uses_three_upstreams_through_the_proxy(three_servers: tuple[Path, Path],
                                                               mode: str) -> None:
    """Tools of all three servers are listed under prefixed names and each one answers;
    results arrive as the upstream sent them, in the client's era (auto = 2026-07-28)."""
    config, _ = three_servers
    with trio.fail_after(REAL_IO_BOUND_S):
        async with embedded_client(config, mode=mode) as client:
            if mode == "auto":
                assert client.protocol_version == "2026-07-28"
            names = {t.name for t in (await client.list_tools()).tools}
            assert {"ev_echo", "ev_add", "fl_echo", "fl_add", "time_get_current_time"} <= names
            assert text_of(await client.call_tool("ev_echo", {"text": "hi"})) == "echo: hi"
            added = await client.call_tool("ev_add", {"a": 2, "b": 40})
            assert added.structured_content == {"sum": 42}
            assert text_of(await client.call_tool("fl_add", {"a": 1, "b": 2})) == "3"
            now = await client.call_tool("time_get_current_time", {"timezone": "UTC"})
            assert not now.is_error
            assert "UTC" in text_of(now)


async def test_resources_prompts_and_completion_are_forwarded(ev_server: tuple[Path, Path]) -> None:
    """Resource URIs pass through unchanged and are read from the server that listed them;
    prompts are namespaced; completion reaches the prompt's server under its own name."""
    config, _ = ev_server
    with trio.fail_after(REAL_IO_BOUND_S):
        async with embedded_client(config) as client:
            uris = {str(r.uri) for r in (await client.list_resources()).resources}
            assert {"mem://greeting", "mem://data.json"} <= uris
            read = await client.read_resource("mem://greeting")
            assert read.contents[0].text == "hello"  # type: ignore[union-attr]
            templated = await client.read_resource("mem://items/7")
            assert "item 7" in templated.contents[0].text  # type: ignore[union-attr]
            templates = (await client.list_resource_templates()).resource_templates
            assert [t.uri_template for t in templates] == ["mem://items/{id}"]
            prompts = {p.name for p in (await client.list_prompts()).prompts}
            assert "ev_greet" in prompts
            prompt = await client.get_prompt("ev_greet", {"name": "Ada"})
            assert "Hello, Ada!" in prompt.messages[0].content.text  # type: ignore[union-attr]
            done = await client.complete(types.PromptReference(type="ref/prompt", name="ev_greet"),
                                         {"name": "name", "value": "a"})
            assert done.completion.values == ["alice"]


async def test_prompts_and_their_completion_follow_namespacing_none(tmp_path: Path) -> None:
    """Under ``namespacing: none`` a prompt is listed, got and completed by its own name,
    and the proxy's instructions claim no prefixes. A regression shows as "unknown
    prompt 'greet'; did you mean ev_greet" (the conformance suite's prompts-get-*)."""
    config = write_config(tmp_path, {"ev": everything()}, namespacing="none")
    with trio.fail_after(REAL_IO_BOUND_S):
        async with embedded_client(config) as client:
            assert client.instructions is not None
            assert "prefixed" not in client.instructions
            assert "greet" in {p.name for p in (await client.list_prompts()).prompts}
            prompt = await client.get_prompt("greet", {"name": "Ada"})
            assert "Hello, Ada!" in prompt.messages[0].content.text  # type: ignore[union-attr]
            done = await client.complete(types.PromptReference(type="ref/prompt", name="greet"),
                                         {"name": "name", "value": "a"})
            assert done.completion.values == ["alice"]


async def test_progress_logging_sampling_elicitation_and_roots_reach_the_caller(
    ev_server: tuple[Path, Path],
) -> None:
    """Mid-call traffic goes to the client whose call caused it, and its answers go back."""
    config, _ = ev_server
    rec = Recorder()
    reported: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        reported.append((progress, total, message))

    with trio.fail_after(REAL_IO_BOUND_S):
        async with embedded_client(config, recorder=rec) as client:
            done = await client.call_tool("ev_progress", {"steps": 3}, progress_callback=on_progress)
            assert text_of(done) == "done 3"
            assert [p for p, _, _ in reported] == [1.0, 2.0, 3.0]
            assert text_of(await client.call_tool("ev_sample", {"prompt": "q"})) == "sampled: from the client"
            assert "elicited: accept" in text_of(await client.call_tool("ev_elicit", {"message": "who?"}))
            assert text_of(await client.call_tool("ev_roots", {})) == "file:///workspace"
            await client.set_logging_level("debug")
            await client.call_tool("ev_log", {"level": "warning", "message": "disk almost full"})
            with trio.fail_after(10):
                while not any(log.data == "disk almost full" for log in rec.logs):
                    await rec.logged.wait()
            log = next(log for log in rec.logs if log.data == "disk almost full")
            assert log.logger is not None
            assert log.logger.startswith("ev")


async def test_list_changed_from_an_upstream_reaches_the_client(ev_server: tuple[Path, Path]) -> None:
    """An upstream's tools/list_changed updates the catalog and is announced to the client."""
    config, _ = ev_server
    rec = Recorder()
    with trio.fail_after(REAL_IO_BOUND_S):
        async with embedded_client(config, recorder=rec) as client:
            before = {t.name for t in (await client.list_tools()).tools}
            changed = rec.changed
            await client.call_tool("ev_add_tool", {"name": "fresh"})
            await changed.wait()
            after = {t.name for t in (await client.list_tools()).tools}
            assert after - before == {"ev_fresh"}
            assert text_of(await client.call_tool("ev_fresh", {"text": "x"}))


async def test_cancelling_a_call_reaches_the_upstream_and_frees_it(tmp_path: Path, fast_path: bool) -> None:
    """A client's notifications/cancelled reaches the upstream (under the proxy's id) and
    the connection keeps serving."""
    record = tmp_path / "ev.jsonl"
    config = write_config(tmp_path, {"ev": everything("--record", str(record))}, fastPath=fast_path)
    with trio.fail_after(REAL_IO_BOUND_S):
        async with embedded_client(config) as client:
            await client.list_tools()
            with trio.move_on_after(1.0):
                await client.call_tool("ev_sleep", {"seconds": 30})
            with trio.fail_after(20):
                await poll_until(lambda: any(e.get("event") == "cancelled" for e in read_record(record)))
            assert text_of(await client.call_tool("ev_echo", {"text": "after"})) == "echo: after"
    calls = [e for e in read_record(record) if e.get("event") == "call" and e.get("name") == "sleep"]
    cancels = [e for e in read_record(record) if e.get("event") == "cancelled"]
    assert calls
    assert cancels[0]["requestId"] == calls[0]["id"]
    assert str(calls[0]["id"]).startswith("mv-")


async def test_unknown_tool_names_the_closest_ones(tmp_path: Path, fast_path: bool) -> None:
    config = write_config(tmp_path, {"fl": flaky()}, fastPath=fast_path)
    with trio.fail_after(REAL_IO_BOUND_S):
        async with embedded_client(config) as client:
            result = await client.call_tool("fl_ecoh", {"text": "x"})
            assert result.is_error
            assert "fl_ecoh" in text_of(result)
            assert "fl_echo" in text_of(result)


async def test_an_upstream_error_is_passed_through(tmp_path: Path, fast_path: bool) -> None:
    """A JSON-RPC error the upstream sends reaches the client with its code and message."""
    config = write_config(tmp_path, {"ev": everything()}, fastPath=fast_path)
    with trio.fail_after(REAL_IO_BOUND_S):
        async with embedded_client(config) as client:
            with pytest.raises(MCPError) as caught:
                await client.call_tool("ev_raise_error", {"code": -32099, "message": "nope, not today"})
            assert caught.value.error.code == -32099
            assert "nope, not today" in caught.value.error.message
            failed = await client.call_tool("ev_fail", {"message": "tool said no"})
            assert failed.is_error
            assert text_of(failed) == "tool said no"
