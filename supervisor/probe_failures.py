"""Why a probe failed, in words a user can act on: `Failure` and its classification.

`mcpvisor.probe` runs the attempt; whatever the proxy's connection code raised on the
way (an exception group, a spawn error, an HTTP status, a JSON-RPC error, a closed
connection) is turned here into one `Failure`: its kind, one line for people, the step
it happened in, the exit or HTTP status, the last stderr lines, and a hint where there
is an obvious next step. `scrubbed` takes the server's secrets out of its text.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import trio

from mcpvisor.config import ServerSpec

__all__ = ["HTTP_HINTS", "STDERR_TAIL_LINES", "Failure", "classify", "scrubbed", "stderr_tail"]

STDERR_TAIL_LINES: Final = 5
"""Last stderr lines of a failed server shown to the user."""

HTTP_HINTS: Final[Mapping[int, str]] = {
    401: "the server wants credentials: check the Authorization header (--header)",
    403: "the credentials were refused: check the token and its scopes",
    404: "nothing is served at this URL: check the path (streamable HTTP is usually /mcp, SSE /sse)",
    405: "the URL does not accept this transport: try --transport sse or http",
}


@dataclass(frozen=True, slots=True)
class Failure:
    """Why a probe failed, classified.

    Attributes:
        kind: ``not_found`` (command not on PATH), ``spawn`` (could not start otherwise),
            ``exited`` (the process ended; ``status``), ``http`` (``http_status``),
            ``connect`` (no connection), ``handshake`` (the server refused or broke the
            MCP handshake), ``needs_login`` (an OAuth server with no usable stored
            tokens), ``timeout``, ``error`` (anything else).
        message: one line for people.
        step: the step that failed.
        status: the exit status (``exited``); negative for a signal.
        http_status: the HTTP status (``http``).
        stderr: the last lines the server wrote on stderr (stdio servers).
        hint: what to try, when there is an obvious next step.
    """

    kind: str
    message: str
    step: str
    status: int | None = None
    http_status: int | None = None
    stderr: tuple[str, ...] = ()
    hint: str | None = None


def scrubbed(failure: Failure, spec: ServerSpec) -> Failure:
    """``failure`` without any secret of ``spec`` (`mcpvisor.redact`) in its text."""
    from mcpvisor.redact import scrub, server_secrets

    secrets = server_secrets(spec)
    return dataclasses.replace(
        failure,
        message=scrub(failure.message, secrets),
        stderr=tuple(scrub(line, secrets) for line in failure.stderr),
    )


def _leaves(exc: BaseException) -> Iterator[BaseException]:
    """The non-group exceptions inside ``exc`` (itself if it is not a group), Cancelled skipped."""
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from _leaves(inner)
    elif not isinstance(exc, trio.Cancelled):
        yield exc


def stderr_tail(link: Any) -> tuple[str, ...]:
    """The last lines a stdio server wrote on stderr (``link``: its link, if it got one)."""
    stderr = getattr(link, "stderr", None)
    if stderr is None:
        return ()
    return tuple(line.rstrip() for line in list(stderr.lines)[-STDERR_TAIL_LINES:] if line.strip())


def classify(exc: BaseException, spec: ServerSpec, step: str, link: Any,
             http_statuses: Sequence[int]) -> Failure:
    """Turn whatever the connection raised into a `Failure` a user can act on.

    Args:
        exc: what the probe's connection code raised.
        spec: the server probed.
        step: the step the probe was in.
        link: the server's link if it got one (its process and stderr), else None.
        http_statuses: the statuses of the HTTP responses seen, in order.
    """
    from mcpvisor.actors.errors import ProxyError, UpstreamDied
    from mcpvisor.actors.link.session import HandshakeFailed, UnsupportedVersion
    from mcpvisor.actors.process import SpawnError, describe_exit

    leaves = list(_leaves(exc)) or [exc]
    stderr = stderr_tail(link)
    proc = getattr(link, "proc", None)
    for leaf in leaves:
        if isinstance(leaf, SpawnError):
            text = str(leaf)
            if text.startswith("command not found"):
                return Failure(
                    "not_found", text, step, hint="install it, or give the full path to the command"
                )
            return Failure("spawn", text, step)
    returncode = getattr(proc, "returncode", None)
    if returncode is not None and (step != "done"):
        text = describe_exit(returncode)
        return Failure("exited", f"the process {text} during {step}", step, status=returncode, stderr=stderr)
    from mcpvisor.actors.link.logins import NeedsLogin, NoLoginFound, login_message

    if any(isinstance(leaf, NeedsLogin) for leaf in leaves):
        return Failure("needs_login", login_message(spec.name), step,
                       hint=f"run mcpvisor mcp login {spec.name}")
    for leaf in leaves:
        if isinstance(leaf, NoLoginFound):  # its words name what was tried (the last status would not)
            return Failure("http", leaf.message, step, http_status=401, hint=HTTP_HINTS.get(401))
    status = _http_status(leaves, http_statuses)
    if status is not None:
        hint = HTTP_HINTS.get(status)
        return Failure(
            "http", f"HTTP {status} {_reason(status)} during {step}", step, http_status=status, hint=hint
        )
    for leaf in leaves:
        if _is_connect_error(leaf):
            return Failure(
                "connect",
                f"could not connect to {spec.url}: {_connect_text(leaf)}",
                step,
                hint="is the server running, and is the URL right?",
            )
    for leaf in leaves:
        if isinstance(leaf, UpstreamDied):
            return Failure(
                "exited",
                f"the server closed the connection during {step} ({leaf.reason})",
                step,
                stderr=stderr,
            )
        if isinstance(leaf, UnsupportedVersion):
            return Failure("error", f"{step} failed: {leaf.reads_as}", step, stderr=stderr)
        if isinstance(leaf, HandshakeFailed):
            return Failure("handshake", f"{step} failed: {leaf.message} (JSON-RPC error {leaf.code})", step,
                           stderr=stderr)
        if isinstance(leaf, ProxyError):
            return Failure("error", leaf.message, step, stderr=stderr)
        code = getattr(getattr(leaf, "error", None), "code", None)
        if code is not None:
            message = getattr(leaf.error, "message", str(leaf))  # type: ignore[attr-defined]
            return Failure(
                "handshake", f"{step} failed: {message} (JSON-RPC error {code})", step, stderr=stderr
            )
    leaf = leaves[0]
    return Failure("error", f"{step} failed: {_text(leaf)}", step, stderr=stderr)


def _text(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _connect_text(exc: BaseException) -> str:
    """Why a connection failed: the OS error behind a library's wrapper, when there is one."""
    seen: BaseException | None = exc
    for _ in range(10):  # a cause chain is short; never loop on a cycle
        if seen is None:
            break
        if isinstance(seen, OSError):
            return seen.strerror.lower() if seen.strerror else str(seen) or type(seen).__name__
        seen = seen.__cause__ or seen.__context__
    return _text(exc)


def _reason(status: int) -> str:
    from http import HTTPStatus

    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""


def _http_status(leaves: Sequence[BaseException], http_statuses: Sequence[int]) -> int | None:
    """The HTTP error status behind a failure: from the exception, else the last response seen."""
    for leaf in leaves:
        response = getattr(leaf, "response", None)
        code = getattr(response, "status_code", None) or getattr(leaf, "status_code", None)
        if isinstance(code, int) and code >= 400:
            return code
    errors = [s for s in http_statuses if s >= 400]
    return errors[-1] if errors else None


def _is_connect_error(exc: BaseException) -> bool:
    if isinstance(exc, OSError | ConnectionError):
        return True
    name = type(exc).__name__
    return name in ("ConnectError", "ConnectTimeout", "HandshakeError", "ConnectionRejected") or (
        isinstance(exc.__cause__, OSError)
    )
