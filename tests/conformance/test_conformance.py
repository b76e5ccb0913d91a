"""The official MCP conformance suite proves that a server behaves through mcpvisor as it
does when the client connects to it directly (issue 14).

* Directly: the fixture (``tests/servers/conformance.py``) over streamable HTTP passes
  100 % of the suite's active server suite.
* Through ``mcpvisor serve --transport http`` (one upstream, ``exposure: all``,
  ``namespacing: none``) with the fixture as a stdio upstream and as an HTTP upstream,
  each opened ``auto``, ``legacy`` and ``2026-07-28``, and an HTTP upstream opened
  ``auto`` in front of the fixture written the usual way (``--always-back-channel``:
  sampling/elicitation through ``ctx.session`` in both eras), held to what the fixture
  does directly: again 100 %, but for `EXPECTED_LOSSES`.
* The suite's client scenarios that need no OAuth, with mcpvisor as the client of the
  suite's server (``client_driver.py``).
* The suite's ``auth/*`` client scenarios at both wires and its auth extensions, with
  mcpvisor as the OAuth client (issue 27): all pass but DPoP, workload identity and
  enterprise-managed authorization, which the SDK's client auth does not do either.

A failing check fails its test with the suite's own words (`SuiteFailed`). A scenario lost
through the proxy fails its pairing unless `EXPECTED_LOSSES` names it with the reason (one
is left: ``basic-elicitation`` where the round is bridged from the handshake era, whose
elicitation/create carries no key: ``legacy`` forces that era, a stdio server opened
``auto`` serves one era per process, and the fixture written the usual way asks only
through the back-channel; an HTTP one opened ``auto`` answers a 2026-07-28 client in its
own era beside its session, so it passes), and an expected loss that passes again fails
too.

Times measured on the 2-core machine: a suite run takes 1-3 s; each proxied test ~4-8 s
with start-up and shutdown.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any, Final

import pytest
import trio

from tests.conformance import suite as conformance_suite
from tests.conformance.suite import (
    HERE,
    WIRES,
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
PAIRING_BOUND_S: Final = 2 * conformance_suite.SUITE_TIMEOUT_S + 60.0
"""One pairing: start-ups, a suite run at each wire, shutdowns."""


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


@pytest.fixture(scope="module")
def direct() -> dict[str, SuiteResult]:
    """The fixture over streamable HTTP, measured once per module at each wire."""
    suite_or_skip()

    async def measure() -> dict[str, SuiteResult]:
        out = {}
        with tempfile.TemporaryDirectory(prefix="conformance-direct-") as tmp:
            async with serving_fixture() as url:
                for wire in WIRES:
                    out[wire] = await run_server_suite(url, Path(tmp) / wire, wire)
        return out

    return trio.run(measure)


@pytest.mark.parametrize("wire", WIRES)
def test_the_fixture_passes_every_server_scenario_directly(direct: dict[str, SuiteResult], wire: str) -> None:
    """``--suite all`` at each wire, 100 %: the model a proxied run is held to."""
    result = direct[wire]
    print(result.summary())
    result.assert_all_passed()
    # 0.2.0-alpha.12 with every check passing: 33 scenarios at 2025-11-25, 40 at 2026-07-28.
    assert len(result.scenarios) >= {"2025-11-25": 33, "2026-07-28": 40}[wire], result.summary()


USUAL: Final = ("--always-back-channel",)
"""The fixture written the usual way: it asks through ``ctx.session`` in both eras."""
PAIRINGS: Final = [
    *(pytest.param(transport, protocol, (), id=f"{transport}-{protocol}")
      for transport in ("http", "stdio")
      for protocol in ("auto", "legacy", "2026-07-28")),
    # ``auto`` sends a 2026-07-28 client's calls to a dual-era HTTP server in that era; a
    # server written the usual way refuses them there at its first question, and keeps every
    # other scenario through the proxy (its later questions bridged, as before).
    pytest.param("http", "auto", USUAL, id="http-auto-usual"),
]

_LEGACY: Final = (
    "protocol: legacy forces the handshake era, whose elicitation/create carries no key: the "
    "scenario's first check is that the input_required round names its question user_name, a "
    "key only the fixture's 2026-07-28 code knows (mcpvisor names it elicitation-1); answers "
    "under guessed keys are taken by fit (ignore-extra-params passes)"
)
_STDIO_AUTO: Final = (
    "a stdio server has one connection, and initialize scopes the handshake era to the whole "
    "process (MCP 2026-07-28, versioning); serving a 2026-07-28 request on it as well is a MAY "
    "the SDK's server does not take (it refuses it with -32600), so the round is bridged from "
    "elicitation/create, which carries no key, as under legacy. A second process for 2026-07-28 "
    "clients would split the server's state between the eras' clients"
)
_USUAL_WAY: Final = (
    "the fixture written the usual way asks through elicitation/create in either era (directly, "
    "a 2026-07-28 client gets the SDK's no-back-channel error instead of any round): its round "
    "is bridged, and elicitation/create carries no key"
)
_USUAL_FIRST: Final = (
    "the first tool of the fixture written the usual way that asks a question at 2026-07-28 (this "
    "scenario's, in the suite's order) is refused by the SDK at that question, as it is directly; "
    "mcpvisor does not run a tool again that is not marked idempotent (it may have done something "
    "before asking), so that one call gets the refusal, and the server's later calls are bridged"
)
EXPECTED_LOSSES: Final[dict[tuple[str, str, str], str]] = {
    ("http-auto-usual", "2026-07-28", "input-required-result-basic-elicitation"): _USUAL_WAY,
    ("http-auto-usual", "2026-07-28", "server-stateless"): _USUAL_FIRST,
    ("http-legacy", "2026-07-28", "input-required-result-basic-elicitation"): _LEGACY,
    ("stdio-legacy", "2026-07-28", "input-required-result-basic-elicitation"): _LEGACY,
    ("stdio-auto", "2026-07-28", "input-required-result-basic-elicitation"): _STDIO_AUTO,
}
"""(pairing id or ``*``, wire, scenario) -> why the scenario is lost through mcpvisor although
it passes directly. The rule of the test is that this stays empty: an entry whose scenario
passes again fails the test until it is removed."""


async def _proxied(tmp_path: Path, transport: str, protocol: str,
                   flags: tuple[str, ...]) -> dict[str, SuiteResult]:
    """One ``mcpvisor serve --transport http`` in front of the fixture (started with
    ``flags``), measured at each wire."""
    out = {}
    async with AsyncExitStack() as stack:
        if transport == "stdio":
            argv = fixture_argv(*flags)
            upstream: dict[str, Any] = {"command": argv[0], "args": argv[1:], "protocol": protocol}
        else:
            upstream_url = await stack.enter_async_context(serving_fixture(*flags))
            upstream = {"type": "http", "url": upstream_url, "protocol": protocol}
        url = await stack.enter_async_context(serving_proxy(upstream, tmp_path / "proxy"))
        for wire in WIRES:
            out[wire] = await run_server_suite(url, tmp_path / "results" / wire, wire)
    return out


def lost_through_proxy(
    pairing: str, direct: dict[str, SuiteResult], proxied: dict[str, SuiteResult]
) -> tuple[list[str], list[str]]:
    """(scenarios that pass directly but not through mcpvisor and are not expected to,
    expected losses that no longer happen), each line in the suite's own words."""
    lost, stale = [], []
    for wire in WIRES:
        words = proxied[wire].lost()
        missing = direct[wire].passing - proxied[wire].scenarios
        for scenario in sorted(direct[wire].passing):
            expected = EXPECTED_LOSSES.get((pairing, wire, scenario)) or EXPECTED_LOSSES.get(
                ("*", wire, scenario)
            )
            is_lost = scenario in words or scenario in missing
            if is_lost and expected is None:
                why = "; ".join(words.get(scenario, ["the scenario did not run through the proxy"]))
                lost.append(f"{wire} {scenario}: {why}")
            elif expected is not None and not is_lost:
                stale.append(f"{wire} {scenario} passes now: remove it from EXPECTED_LOSSES ({expected})")
    return lost, stale


@pytest.mark.parametrize(("transport", "protocol", "flags"), PAIRINGS)
def test_a_scenario_that_passes_directly_passes_through_the_http_proxy(
    direct: dict[str, SuiteResult], tmp_path: Path, transport: str, protocol: str, flags: tuple[str, ...]
) -> None:
    """The same fixture, the same suite at both wires, ``mcpvisor serve --transport http`` in
    between; the upstream over HTTP or stdio, opened ``auto``, ``legacy`` or ``2026-07-28``
    (and, under ``auto``, also the fixture written the usual way, held to the same model)."""

    async def bounded() -> dict[str, SuiteResult]:
        with trio.fail_after(PAIRING_BOUND_S):
            return await _proxied(tmp_path, transport, protocol, flags)

    proxied = trio.run(bounded)
    for wire in WIRES:
        print(f"[{wire}] {proxied[wire].summary()}")
    pairing = f"{transport}-{protocol}" + ("-usual" if flags == USUAL else "")
    lost, stale = lost_through_proxy(pairing, direct, proxied)
    problems = lost + stale
    assert not problems, "\n".join(
        [f"lost through mcpvisor ({transport} upstream, protocol {protocol}):", *problems]
    )


ENVELOPE: Final = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientInfo": {"name": "probe", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
}


async def test_a_stdio_server_opened_in_the_handshake_era_refuses_2026_07_28_requests() -> None:
    """Why ``stdio-auto`` keeps its expected loss: on the one connection a stdio server
    has, the fixture (the SDK's dual-era ``Server.run``) serves the era ``initialize``
    opened, and refuses a request carrying the 2026-07-28 envelope (MCP lets a dual-era
    server serve both on one process, but does not make it). When the SDK serves both,
    this fails, and ``auto`` could send 2026-07-28 clients' stdio calls in their era too."""
    frames = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                    "clientInfo": {"name": "probe", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
         "params": {"name": "test_input_required_result_elicitation", "arguments": {}, "_meta": ENVELOPE}},
    ]
    proc = await trio.lowlevel.open_process(fixture_argv(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                            stderr=subprocess.DEVNULL, env=conformance_suite.node_env())
    answers: dict[int, dict[str, Any]] = {}
    try:
        assert proc.stdin is not None
        assert proc.stdout is not None
        with trio.fail_after(TEST_BOUND_S):
            await proc.stdin.send_all(b"".join(json.dumps(f).encode() + b"\n" for f in frames))
            buf = b""
            while 2 not in answers:
                chunk = await proc.stdout.receive_some(1 << 16)
                assert chunk, "the fixture exited"
                *lines, buf = (buf + chunk).split(b"\n")
                for line in filter(bytes.strip, lines):
                    message = json.loads(line)
                    if isinstance(message.get("id"), int):
                        answers[message["id"]] = message
    finally:
        proc.kill()
        await proc.wait()
    assert answers[1]["result"]["protocolVersion"] == "2025-11-25"
    assert answers[2]["error"]["code"] == -32600, answers[2]
    assert "handshake protocol era" in answers[2]["error"]["message"]


DRIVER: Final = HERE / "client_driver.py"
CLIENT_SCENARIOS: Final[dict[str, tuple[str, ...]]] = {
    "2025-11-25": (
        "initialize",
        "tools_call",
        "elicitation-sep1034-client-defaults",
        "sse-retry",
        "json-schema-2020-12-preservation",
    ),
    "2026-07-28": (
        "tools_call",
        "request-metadata",
        "sep-2322-client-request-state",
        "http-standard-headers",
        "http-custom-headers",
        "http-invalid-tool-headers",
        "json-schema-ref-no-deref",
        "json-schema-2020-12-preservation",
    ),
}
"""Every client scenario of the pinned suite at each wire except ``auth/*`` (mcpvisor's
OAuth is tested on its own) and extensions; `test_the_client_legs_cover_the_suite` keeps
this in step with the suite."""

EXPECTED_CLIENT_LOSSES: Final[dict[tuple[str, str], str]] = {}
"""(wire, scenario) -> why mcpvisor as a client fails it. Meant to stay empty; an entry whose
scenario passes again fails the test until it is removed."""


def test_the_client_legs_cover_the_suite() -> None:
    """`CLIENT_SCENARIOS` is what ``conformance list --client`` names at each wire, minus
    ``auth/*`` and ``[extension]`` scenarios."""
    cli = suite_or_skip()
    for wire in WIRES:
        listed = subprocess.run(
            [str(cli), "list", "--client", "--spec-version", wire],
            env=conformance_suite.node_env(),
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout
        names = re.findall(r"^\s*- (\S+) \[(.*)\]$", listed, re.MULTILINE)
        wanted = {name for name, tags in names if not name.startswith("auth/") and tags != "extension"}
        assert wanted == set(CLIENT_SCENARIOS[wire]), f"{wire}: the suite lists {sorted(wanted)}"


@pytest.mark.usefixtures("suite")
@pytest.mark.parametrize(
    ("wire", "scenario"),
    [pytest.param(wire, s, id=f"{wire}-{s}") for wire, names in CLIENT_SCENARIOS.items() for s in names],
)
def test_client_scenarios_through_the_proxy(tmp_path: Path, wire: str, scenario: str) -> None:
    """The suite serves a scenario; mcpvisor (its upstream side) is the client under test,
    driven through the proxy by ``client_driver.py``."""
    # The 2026-07-28 scenarios judge a 2026-07-28 client from its very first request, so the
    # upstream is configured as a user whose server speaks that revision would set it;
    # ``protocol: auto`` opens dual-era servers with ``initialize`` (docs/design.md, "Protocol
    # eras"), which those scenarios do not expect.
    protocol = "2026-07-28" if wire == "2026-07-28" else "auto"
    command = [sys.executable, str(DRIVER), "--work", str(tmp_path / "drv"), "--protocol", protocol]
    result = run(run_client_scenario, scenario, command, tmp_path / "results", wire)
    print(result.output[-4000:])
    expected = EXPECTED_CLIENT_LOSSES.get((wire, scenario))
    if expected is None:
        result.assert_all_passed()
    else:
        assert result.lost(), (
            f"{wire} {scenario} passes now: remove it from EXPECTED_CLIENT_LOSSES ({expected})"
        )


_AUTH_BOTH_WIRES: Final = (
    "auth/metadata-default", "auth/metadata-var1", "auth/metadata-var2", "auth/metadata-var3",
    "auth/basic-cimd", "auth/scope-from-www-authenticate", "auth/scope-from-scopes-supported",
    "auth/scope-omitted-when-undefined", "auth/scope-step-up", "auth/scope-retry-limit",
    "auth/token-endpoint-auth-basic", "auth/token-endpoint-auth-post", "auth/token-endpoint-auth-none",
    "auth/pre-registration",
)
AUTH_SCENARIOS: Final[dict[str | None, tuple[str, ...]]] = {
    # Servers of the 2025-03-26 authorization spec: no Protected Resource Metadata, the
    # authorization server metadata at the origin or only the default endpoints.
    "2025-03-26": ("auth/2025-03-26-oauth-metadata-backcompat", "auth/2025-03-26-oauth-endpoint-fallback"),
    "2025-11-25": _AUTH_BOTH_WIRES,
    "2026-07-28": (
        *_AUTH_BOTH_WIRES, "auth/resource-mismatch", "auth/offline-access-scope",
        "auth/offline-access-not-supported", "auth/authorization-server-migration", "auth/iss-supported",
        "auth/iss-not-advertised", "auth/iss-supported-missing", "auth/iss-wrong-issuer",
        "auth/iss-unexpected", "auth/iss-normalized", "auth/metadata-issuer-mismatch",
    ),
    # Extension scenarios are on no spec version's timeline: run at the suite's default.
    None: (
        "auth/client-credentials-jwt", "auth/client-credentials-basic",
        "auth/enterprise-managed-authorization", "auth/dpop", "auth/dpop-nonce", "auth/wif-jwt-bearer",
    ),
}
"""The suite's ``auth/*`` client scenarios at each wire, and its auth extensions (issue 27):
mcpvisor's upstream side is the OAuth client, ``serve`` logging in by itself through the
``$BROWSER`` the driver gives it."""
_NOT_IN_THE_SDK: Final = "is not in the SDK's client auth; its own client is listed as failing it"
EXPECTED_AUTH_LOSSES: Final[dict[str, str]] = {
    "auth/dpop": f"DPoP (SEP-1932) {_NOT_IN_THE_SDK}",
    "auth/dpop-nonce": f"DPoP (SEP-1932) {_NOT_IN_THE_SDK}",
    "auth/wif-jwt-bearer": f"workload identity (SEP-1933, the jwt-bearer grant) {_NOT_IN_THE_SDK}",
    "auth/enterprise-managed-authorization": f"enterprise-managed authorization (SEP-990) {_NOT_IN_THE_SDK}",
}
"""Auth scenarios mcpvisor fails because the SDK's client auth it uses does not do them (the
SDK's conformance baseline lists its own client as failing the same). An entry whose
scenario passes fails the test until it is removed."""
AUTH_PARALLEL: Final = 4
"""Auth scenarios of one wire run at once: each is its own suite server, driver and proxy
(5-13 s each; the 45 take 80-120 s on the 2-core machine this way, against ~7 min one after
another)."""
AUTH_BOUND_S: Final = 600.0


@pytest.mark.usefixtures("suite")
@pytest.mark.timeout(AUTH_BOUND_S + 60)  # the test bounds itself; this is the backstop
@pytest.mark.parametrize("wire", list(AUTH_SCENARIOS), ids=lambda w: w or "extensions")
def test_auth_scenarios_through_the_proxy(tmp_path: Path, wire: str | None) -> None:
    """Every ``auth/*`` client scenario of ``wire`` (or the auth extensions), mcpvisor's
    upstream side the client under test: all pass but `EXPECTED_AUTH_LOSSES`. Prints how
    many pass. One test per wire, so the test workers share them out."""
    names = AUTH_SCENARIOS[wire]
    results: dict[str, SuiteResult] = {}

    async def one(limiter: trio.CapacityLimiter, scenario: str, n: int) -> None:
        async with limiter:
            protocol = "2026-07-28" if wire == "2026-07-28" else "auto"
            work = tmp_path / f"s{n}"
            command = [sys.executable, str(DRIVER), "--work", str(work / "drv"), "--protocol", protocol]
            results[scenario] = await run_client_scenario(scenario, command, work / "results", wire)

    async def all_of_them() -> None:
        limiter = trio.CapacityLimiter(AUTH_PARALLEL)
        with trio.fail_after(AUTH_BOUND_S):
            async with trio.open_nursery() as nursery:
                for n, scenario in enumerate(names):
                    nursery.start_soon(one, limiter, scenario, n)

    trio.run(all_of_them)
    problems = []
    passing = [s for s in names if results[s].scenarios and not results[s].lost()]
    print(f"{wire or 'extensions'}: {len(passing)} of {len(names)} auth scenarios pass")
    for scenario in names:
        result, expected = results[scenario], EXPECTED_AUTH_LOSSES.get(scenario)
        lost = not result.scenarios or bool(result.lost())
        if lost and expected is None:
            problems.append(f"{wire} {scenario}: {result.lost() or result.output[-1500:]}")
        elif not lost and expected is not None:
            problems.append(f"{wire} {scenario} passes now: remove it from EXPECTED_AUTH_LOSSES "
                            f"({expected})")
    assert not problems, "\n".join(problems)


def test_the_auth_legs_cover_the_suite() -> None:
    """`AUTH_SCENARIOS` is what ``conformance list --client`` names: the ``auth/*`` scenarios
    of each wire, and the auth extensions."""
    cli = suite_or_skip()
    for wire in (*WIRES, None):
        listed = subprocess.run(
            [str(cli), "list", "--client", *(("--spec-version", wire) if wire else ())],
            env=conformance_suite.node_env(), capture_output=True, text=True, check=True, timeout=60,
        ).stdout
        names = re.findall(r"^\s*- (\S+) \[(.*)\]$", listed, re.MULTILINE)
        wanted = {name for name, tags in names
                  if name.startswith("auth/") and (tags == "extension") == (wire is None)}
        assert wanted == set(AUTH_SCENARIOS[wire]), f"{wire}: the suite lists {sorted(wanted)}"


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
