"""Running the official MCP conformance suite from the tests.

The suite is the npm package pinned in ``package.json`` beside this file, installed by
``.ci/run`` with ``npm ci --prefix tests/conformance``. It needs node >= 22 (it imports
``fs.globSync``), so the same ``package.json`` pins the npm ``node`` package and the suite
runs with ``node_modules/.bin`` first on ``PATH``.

* `suite_or_skip` finds the installed suite; where it is missing the test is skipped
  saying how to install it, except with ``CI=true``, where that is a failure.
* `run_server_suite` runs ``conformance server --url URL --suite all --spec-version V`` (as
  the Python SDK's own CI runs it, one invocation per wire) and reads every check the suite
  wrote (``checks.json`` per scenario) into a `SuiteResult`.
* `serving_fixture` and `serving_proxy` start the fixture server over HTTP and
  ``mcpvisor serve --transport http`` as subprocesses on port 0, read the URL they print,
  and stop them (SIGTERM, then SIGKILL) when the block ends.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import pytest
import trio

HERE: Final = Path(__file__).parent
REPO: Final = HERE.parent.parent
FIXTURE: Final = HERE.parent / "servers" / "conformance.py"
BIN: Final = HERE / "node_modules" / ".bin"
CONFORMANCE: Final = BIN / "conformance"
SUITE_VERSION: Final = json.loads((HERE / "package.json").read_text())["dependencies"][
    "@modelcontextprotocol/conformance"
]

START_TIMEOUT_S: Final = 60.0
"""How long a fixture or proxy subprocess gets to print its URL: ``import mcp`` in a cold
child takes seconds on a busy 2-core machine."""
SUITE_TIMEOUT_S: Final = 150.0
"""Bound for one whole suite run; it takes 5-10 s on the 2-core machine (33 scenarios at
2025-11-25, 40 at 2026-07-28; the slowest wait ~1.5 s on a listen stream)."""
SCENARIO_TIMEOUT_MS: Final = 15_000
"""The suite's own per-scenario bound (default 30 s): a scenario that hangs through the
proxy fails in seconds instead of stalling the whole run."""
WIRES: Final = ("2025-11-25", "2026-07-28")
"""The protocol revisions every leg runs at (``--spec-version``)."""
STOP_GRACE_S: Final = 10.0
"""SIGTERM to SIGKILL: mcpvisor closes its stdio upstreams in up to ~4 s (docs/sdk.md §7)."""
FIXTURE_READY: Final = re.compile(rb"conformance ready (http://\S+)")
PROXY_READY: Final = re.compile(rb"serving (http://[^\s;]+)")
INSTALL: Final = "npm ci --prefix tests/conformance"


class SuiteFailed(AssertionError):
    """The suite reported failed checks (the message lists them)."""


@dataclass
class Check:
    scenario: str
    id: str
    status: str
    message: str


@dataclass
class SuiteResult:
    checks: list[Check] = field(default_factory=list)
    seconds: float = 0.0
    output: str = ""

    @property
    def passed(self) -> list[Check]:
        return [c for c in self.checks if c.status == "SUCCESS"]

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if c.status == "FAILURE"]

    @property
    def warnings(self) -> list[Check]:
        return [c for c in self.checks if c.status == "WARNING"]

    @property
    def scenarios(self) -> set[str]:
        return {c.scenario for c in self.checks}

    def lost(self) -> dict[str, list[str]]:
        """Every scenario with a failed or warned check, with the suite's words for each."""
        out: dict[str, list[str]] = {}
        for c in self.failed + self.warnings:
            out.setdefault(c.scenario, []).append(f"{c.id}: {c.message}")
        return out

    @property
    def passing(self) -> set[str]:
        """The scenarios whose every counted check passed and none warned."""
        return self.scenarios - set(self.lost())

    def summary(self) -> str:
        counted = len(self.passed) + len(self.failed)
        lines = [
            f"conformance {SUITE_VERSION}: {len(self.passed)}/{counted} checks passed "
            f"({len(self.scenarios)} scenarios, {len(self.warnings)} warnings) in {self.seconds:.1f} s"
        ]
        lines += [f"  FAILED {c.scenario} / {c.id}: {c.message}" for c in self.failed]
        lines += [f"  WARNING {c.scenario} / {c.id}: {c.message}" for c in self.warnings]
        return "\n".join(lines)

    def assert_all_passed(self) -> None:
        """100 %: every counted check passed and none warned; at least one scenario ran."""
        if not self.checks:
            raise SuiteFailed(f"the suite reported no checks:\n{self.output[-3000:]}")
        if self.failed or self.warnings:
            raise SuiteFailed(self.summary())


def suite_or_skip() -> Path:
    """The installed suite's CLI; skip (or fail under ``CI=true``) when it or node is missing."""
    problem = None
    if not CONFORMANCE.exists():
        problem = f"the conformance suite is not installed ({CONFORMANCE} missing): run `{INSTALL}`"
    elif not (BIN / "node").exists():
        problem = f"node >= 22 is not installed under tests/conformance: run `{INSTALL}`"
    if problem is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true: {problem}")
        pytest.skip(problem)
    return CONFORMANCE


def node_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This environment (the conftest's process tag included) with the pinned node first on PATH
    and the worktree importable, for the suite and everything it starts."""
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env.update(extra or {})
    return env


def read_checks(out_dir: Path) -> list[Check]:
    """Every check of every scenario the suite saved under ``out_dir``
    (``<kind>-<scenario>-<time>/checks.json``; an ``auth/NAME`` scenario's folder is
    ``auth/NAME-<time>``)."""
    checks = []
    for path in sorted(out_dir.glob("**/checks.json")):
        folder = path.parent.relative_to(out_dir).as_posix()
        scenario = re.sub(r"^(server|client)-|-\d{4}-\d\d-\d\dT.*$", "", folder)
        for raw in json.loads(path.read_text()):
            message = raw.get("errorMessage") or raw.get("description") or ""
            checks.append(Check(scenario, str(raw.get("id")), str(raw.get("status")), str(message)))
    return checks


async def run_server_suite(url: str, out_dir: Path, wire: str) -> SuiteResult:
    """``conformance server --url URL --suite all --spec-version WIRE``, bounded by
    `SUITE_TIMEOUT_S`."""
    cli = suite_or_skip()
    start = trio.current_time()
    argv = [str(cli), "server", "--url", url, "--suite", "all", "--spec-version", wire]
    with trio.fail_after(SUITE_TIMEOUT_S):
        done = await trio.run_process(
            [*argv, "--timeout", str(SCENARIO_TIMEOUT_MS), "-o", str(out_dir)],
            env=node_env(),
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    result = SuiteResult(
        read_checks(out_dir),
        trio.current_time() - start,
        (done.stdout + done.stderr).decode(errors="replace"),
    )
    return result


async def run_client_scenario(scenario: str, command: Sequence[str], out_dir: Path,
                              wire: str | None) -> SuiteResult:
    """``conformance client --scenario S --spec-version WIRE --command CMD``: the suite serves
    the scenario and runs ``CMD URL``, then judges what the client did. ``wire`` None: an
    extension scenario, which is on no spec version's timeline (the suite's default)."""
    cli = suite_or_skip()
    start = trio.current_time()
    with trio.fail_after(SUITE_TIMEOUT_S):
        done = await trio.run_process(
            [
                str(cli),
                "client",
                "--scenario",
                scenario,
                *(("--spec-version", wire) if wire is not None else ()),
                "--command",
                " ".join(command),
                "-o",
                str(out_dir),
                "--timeout",
                str(int(SUITE_TIMEOUT_S * 1000 / 2)),
            ],
            env=node_env(),
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    return SuiteResult(
        read_checks(out_dir),
        trio.current_time() - start,
        (done.stdout + done.stderr).decode(errors="replace"),
    )


@asynccontextmanager
async def _serving(argv: list[str], ready: re.Pattern[bytes], what: str) -> AsyncIterator[str]:
    """Start ``argv``, wait for ``ready`` on its stderr, yield the URL it captured; stop it after."""
    proc = await trio.lowlevel.open_process(
        argv, env=node_env(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    seen = bytearray()
    found = trio.Event()
    url: list[str] = []

    async def drain() -> None:
        assert proc.stderr is not None
        async for chunk in proc.stderr:
            seen.extend(chunk)
            if not found.is_set() and (m := ready.search(seen)):
                url.append(m.group(1).decode())
                found.set()
        found.set()

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(drain)
            with trio.move_on_after(START_TIMEOUT_S):
                await found.wait()
            if not url:
                raise AssertionError(f"{what} did not start:\n{seen.decode(errors='replace')[-3000:]}")
            yield url[0]
            nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
                with trio.move_on_after(STOP_GRACE_S):
                    await proc.wait()
            if proc.returncode is None:
                proc.kill()
                await proc.wait()


def fixture_argv(*flags: str) -> list[str]:
    return [sys.executable, str(FIXTURE), *flags]


@asynccontextmanager
async def serving_fixture(*flags: str) -> AsyncIterator[str]:
    """The conformance fixture over streamable HTTP on a free port; yields its ``/mcp`` URL."""
    async with _serving(fixture_argv("--http", "--port", "0", *flags), FIXTURE_READY, "the fixture") as url:
        yield url


def write_proxy_config(upstream: Mapping[str, Any], work: Path) -> Path:
    """A config with one upstream named ``conf``, every tool exposed under its own name."""
    work.mkdir(parents=True, exist_ok=True)
    config = work / "mcpvisor.json"
    settings = {"exposure": "all", "namespacing": "none", "startupWait": "60s", "startupTimeout": "120s"}
    config.write_text(json.dumps({"mcpServers": {"conf": dict(upstream)}, "settings": settings}, indent=2))
    return config


@asynccontextmanager
async def serving_proxy(upstream: Mapping[str, Any], work: Path) -> AsyncIterator[str]:
    """``mcpvisor serve --transport http`` in front of one upstream named ``conf``, every tool
    exposed under its own name (``exposure: all``, ``namespacing: none``); yields its URL."""
    config = write_proxy_config(upstream, work)
    argv = [
        sys.executable,
        "-m",
        "mcpvisor",
        "serve",
        "--transport",
        "http",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--config",
        str(config),
        "--state-dir",
        str(work / "state"),
    ]
    async with _serving(argv, PROXY_READY, "mcpvisor serve") as url:
        yield url
