"""The official MCP conformance suite proves that a server behaves through mcpvisor as it
does when the client connects to it directly (issue 14).

* Directly: the fixture (``tests/servers/conformance.py``) over streamable HTTP passes
  100 % of the suite's active server suite.
* Through ``mcpvisor serve --transport http`` (one upstream, ``exposure: all``,
  ``namespacing: none``) with the fixture as a stdio upstream and as an HTTP upstream,
  each opened in both eras (``protocol: "legacy"`` and ``"2026-07-28"``), and with
  ``protocol: "auto"`` in front of a fixture written the usual way
  (``--always-back-channel``: sampling/elicitation through ``ctx.session``): again 100 %.
* The suite's client scenarios that need no OAuth, with mcpvisor as the client of the
  suite's server (``client_driver.py``).

A failing check fails its test with the suite's own words (`SuiteFailed`); there are no
expected failures: every pairing passes 100 %.

Times measured on the 2-core machine: a suite run takes 1-3 s; each proxied test ~4-8 s
with start-up and shutdown.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final

import pytest
import trio

from tests.conformance import suite as conformance_suite
from tests.conformance.suite import (
    HERE,
    SuiteResult,
    fixture_argv,
    run_client_scenario,
    run_server_suite,
    serving_fixture,
    serving_proxy,
    suite_or_skip,
)

pytestmark = pytest.mark.slow

TEST_BOUND_S: Final = 110.0
"""One test: start-ups (seconds each when the box is busy), one suite run, shutdowns."""

@pytest.fixture
def suite() -> None:
    """Skip where the suite or its node is not installed; fail instead under ``CI=true``."""
    suite_or_skip()


def run(fn: Callable[..., Awaitable[SuiteResult]], *args: Any) -> SuiteResult:
    """Run one suite under its own ``trio.run``, bounded by `TEST_BOUND_S`, and print its summary.

    The tests are synchronous so a `SuiteFailed` reaches pytest as itself (pytest-trio
    would wrap it in an ExceptionGroup), its summary naming the failed checks.
    """

    async def bounded() -> SuiteResult:
        with trio.fail_after(TEST_BOUND_S):
            return await fn(*args)

    result = trio.run(bounded)
    print(result.summary())
    return result


async def _direct(tmp_path: Path) -> SuiteResult:
    async with serving_fixture() as url:
        return await run_server_suite(url, tmp_path / "results")


@pytest.mark.usefixtures("suite")
def test_the_fixture_passes_the_whole_active_server_suite_directly(tmp_path: Path) -> None:
    result = run(_direct, tmp_path)
    result.assert_all_passed()
    # The active suite of the pinned version: 30 scenarios, 40 checks when everything passes.
    assert len(result.scenarios) >= 30, result.summary()


PAIRINGS: Final = [
    pytest.param("stdio", "legacy", (), id="stdio-legacy"),
    pytest.param("stdio", "2026-07-28", (), id="stdio-2026-07-28"),
    pytest.param("http", "legacy", (), id="http-legacy"),
    pytest.param("http", "2026-07-28", (), id="http-2026-07-28"),
    pytest.param("stdio", "auto", ("--always-back-channel",), id="stdio-auto-usual-server"),
    pytest.param("http", "auto", ("--always-back-channel",), id="http-auto-usual-server"),
]


async def _proxied(tmp_path: Path, transport: str, protocol: str, flags: tuple[str, ...]) -> SuiteResult:
    if transport == "stdio":
        argv = fixture_argv(*flags)
        upstream: dict[str, Any] = {"command": argv[0], "args": argv[1:], "protocol": protocol}
        async with serving_proxy(upstream, tmp_path / "proxy") as url:
            return await run_server_suite(url, tmp_path / "results")
    async with (
        serving_fixture(*flags) as upstream_url,
        serving_proxy({"type": "http", "url": upstream_url, "protocol": protocol}, tmp_path / "proxy") as url,
    ):
        return await run_server_suite(url, tmp_path / "results")


@pytest.mark.usefixtures("suite")
@pytest.mark.parametrize(("transport", "protocol", "flags"), PAIRINGS)
def test_the_suite_passes_through_the_http_proxy(
    tmp_path: Path, transport: str, protocol: str, flags: tuple[str, ...]
) -> None:
    """The same fixture, the same suite, with ``mcpvisor serve --transport http`` in between."""
    run(_proxied, tmp_path, transport, protocol, flags).assert_all_passed()


DRIVER: Final = HERE / "client_driver.py"
CLIENT_SCENARIOS: Final = [
    pytest.param("initialize", id="initialize"),
    pytest.param("tools_call", id="tools_call"),
    pytest.param("elicitation-sep1034-client-defaults", id="elicitation-sep1034-client-defaults"),
    pytest.param("sse-retry", id="sse-retry"),
]


@pytest.mark.usefixtures("suite")
@pytest.mark.parametrize("scenario", CLIENT_SCENARIOS)
def test_client_scenarios_through_the_proxy(tmp_path: Path, scenario: str) -> None:
    """The suite serves a scenario; mcpvisor (its upstream side) is the client under test,
    driven through the proxy by ``client_driver.py``."""
    command = [sys.executable, str(DRIVER), "--work", str(tmp_path / "drv")]
    result = run(run_client_scenario, scenario, command, tmp_path / "results")
    print(result.output[-4000:])
    result.assert_all_passed()


@pytest.mark.parametrize(("ci", "outcome"), [("true", pytest.fail.Exception), (None, pytest.skip.Exception)])
def test_a_missing_suite_skips_saying_how_to_install_it_but_fails_on_ci(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, ci: str | None, outcome: type[BaseException]
) -> None:
    monkeypatch.setattr(conformance_suite, "CONFORMANCE", tmp_path / "missing" / "conformance")
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    with pytest.raises(outcome, match="npm ci --prefix tests/conformance"):
        suite_or_skip()
