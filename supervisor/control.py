"""The control channel: how ``mcpvisor status`` (and toolset commands) reach a running proxy.

A proxy usually runs under its client over stdio, so it cannot be asked on stdin; instead
each running proxy serves a local unix socket in the state directory:

* ``<state>/run/<pid>.sock`` (mode 0600, in a 0700 directory): the socket. When that path
  is too long for a unix socket (about 107 bytes) or cannot be created, a short one under
  ``$XDG_RUNTIME_DIR/mcpvisor/`` or ``$TMPDIR/mcpvisor-<uid>/`` (``/tmp``) is used instead.
* ``<state>/run/<pid>.json``: ``{"pid", "socket", "config", "startedAt", "transport"}``,
  how a CLI finds the socket. Both are removed when the proxy exits; entries left by a
  proxy that was killed are pruned by `list_running`.

Protocol: one JSON object per line each way. A request is ``{"op": ..., **args}``; a reply
is ``{"ok": true, ...}`` or ``{"ok": false, "error": "..."}``. Operations:

* ``status`` -> ``{"pid", "config", "exposure", "toolset", "startedAt", "transport",
  "servers": [one `status_dict` per server]}``
* ``equip {"name"}`` / ``unequip`` / ``reload`` -> ``{"result": ...}`` from the
  `Supervisor` method of that name (a method that is not there yet answers ok=false);
* ``ping`` -> ``{"pid"}``.

Owns: `serve_control` (the server, for the supervisor's lifetime: the socket, the line
protocol and its limits, the registration), `list_running` and `request` (the synchronous
client side, for the CLI). What each operation does, and `status_dict` (one server's
status as JSON, wall-clock times in ISO 8601 UTC), are `mcpvisor.control_ops`'s. A failure
to set the channel up is logged and never stops the proxy.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import socket
import stat
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import msgspec
import trio

from mcpvisor._atomic import atomic_write_text
from mcpvisor.actors import wire
from mcpvisor.actors.framing import FrameWriter, LineReader, OversizedLine, StreamBroken
from mcpvisor.control_ops import config_path, dispatch
from mcpvisor.state import now_iso

if TYPE_CHECKING:
    from collections.abc import Iterator

    from mcpvisor.ports import ControlHost

logger = logging.getLogger(__name__)

RUN_DIR: Final = "run"
"""Subdirectory of the state directory holding one socket and one .json per running proxy."""

MAX_SOCKET_PATH: Final = 107
"""Longest unix socket path Linux accepts (``sun_path`` is 108 bytes with its NUL)."""

MAX_REQUEST_BYTES: Final = 64 * 1024
"""Longest request line; control requests are tiny, a longer line is refused."""

CONNECTION_MAX_S: Final = 300.0
"""A control connection is closed after this long (a reload may take a while; a stuck
client must not hold a task forever)."""

MAX_CONNECTIONS: Final = 32
"""Control connections served at once; more wait for a slot."""

LISTEN_BACKLOG: Final = 16

ACCEPT_RETRY_S: Final = 0.1
"""Pause after a failed accept (EMFILE and friends) before trying again."""

PROBE_TIMEOUT_S: Final = 1.0
"""How long `list_running` waits for a proxy's socket to accept a connection."""

DEFAULT_REQUEST_TIMEOUT_S: Final = 5.0

MAX_REPLY_BYTES: Final = 16 * 1024 * 1024
"""Longest reply the client reads (a status of hundreds of servers is a few hundred KiB)."""


class ControlError(Exception):
    """The proxy could not be asked, or it answered ``ok: false`` (the message says which).

    Attributes:
        reply: the proxy's reply when it answered ``ok: false``, else None.
    """

    def __init__(self, message: str, reply: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.reply = reply


class RunningProxy(msgspec.Struct, frozen=True):
    """A proxy found in the state directory whose socket accepts connections."""

    pid: int
    socket: Path
    config: str | None
    started_at: str
    transport: str


def control_dir(state_dir: Path) -> Path:
    """Where running proxies register: ``state_dir / "run"``."""
    return Path(state_dir) / RUN_DIR


# --------------------------------------------------------------------------------------
# the server
# --------------------------------------------------------------------------------------


async def _answer(sup: ControlHost, line: bytes | OversizedLine, started_at: str,
                  transport: str) -> dict[str, Any]:
    if isinstance(line, OversizedLine):
        return {"ok": False, "error": f"request longer than {MAX_REQUEST_BYTES} bytes"}
    try:
        request = json.loads(line)
    except ValueError as exc:
        return {"ok": False, "error": f"not JSON: {exc}"}
    if not isinstance(request, dict):
        return {"ok": False, "error": 'a request is a JSON object like {"op": "status"}'}
    try:
        return await dispatch(sup, request, started_at, transport)
    except NotImplementedError as exc:
        return {"ok": False, "error": str(exc) or f"{request.get('op')} is not available in this proxy"}
    except Exception as exc:  # a supervisor method failed: the caller gets why, the proxy goes on
        message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
        logger.debug("control op %r failed", request.get("op"), exc_info=True)
        return {"ok": False, "error": message, "errorType": type(exc).__name__}


async def _serve_connection(sup: ControlHost, stream: trio.SocketStream, limiter: trio.CapacityLimiter,
                            started_at: str, transport: str) -> None:
    async with stream, limiter:  # the stream first: closed even if cancelled while waiting for a slot
        writer = FrameWriter(stream)
        with trio.move_on_after(CONNECTION_MAX_S):
            try:
                async for batch in LineReader(stream, MAX_REQUEST_BYTES):
                    for line in batch:
                        reply = await _answer(sup, line, started_at, transport)
                        await writer.send(wire.encode_line(reply, anything=True))
            except (trio.BrokenResourceError, trio.ClosedResourceError, StreamBroken, OSError):
                pass
            except Exception:  # the channel is a convenience: a bug here never takes the proxy down
                logger.exception("control connection failed")


def _private_dir(path: Path) -> None:
    """Create ``path`` (mode 0700) or check an existing one, never through a symbolic link.

    The fallback directory sits in a world-writable place (``/tmp``), where anyone may plant
    a symlink or a directory of their own under our name first: the directory is opened
    with ``O_NOFOLLOW | O_DIRECTORY`` and checked on that descriptor (a real directory,
    ours); only then is a loose mode tightened, through the same descriptor.

    Raises:
        PermissionError: ``path`` is a symbolic link, not a directory, or another user's;
            the message names the path and what to do.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise PermissionError(
                f"{path} is a symbolic link or not a directory: refusing to use it for the control "
                "socket (someone else may have planted it; remove it if it is yours)"
            ) from None
        raise
    try:
        st = os.fstat(fd)
        if st.st_uid != os.getuid():
            raise PermissionError(
                f"{path} belongs to another user (uid {st.st_uid}): refusing to use it for the control socket"
            )
        if stat.S_IMODE(st.st_mode) & 0o077:
            os.fchmod(fd, 0o700)
    finally:
        os.close(fd)


def _socket_candidates(state_dir: Path, pid: int) -> Iterator[Path]:
    yield control_dir(state_dir) / f"{pid}.sock"
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        yield Path(runtime) / "mcpvisor" / f"{pid}.sock"
    # $TMPDIR, else /tmp; a private 0700 directory, checked without following links
    yield Path(tempfile.gettempdir()) / f"mcpvisor-{os.getuid()}" / f"{pid}.sock"


async def _bind(state_dir: Path, pid: int) -> tuple[trio.socket.SocketType, Path]:
    """Bind and listen on the first usable socket path; OSError if none works."""
    problems = []
    for path in _socket_candidates(state_dir, pid):
        if len(os.fsencode(path)) > MAX_SOCKET_PATH:
            problems.append(f"{path}: longer than {MAX_SOCKET_PATH} bytes")
            continue
        sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            _private_dir(path.parent)
            with contextlib.suppress(FileNotFoundError):
                if stat.S_ISSOCK(os.lstat(path).st_mode):
                    os.unlink(path)  # left by a dead process that had our pid
            await sock.bind(os.fspath(path))
            os.chmod(path, 0o600)
            sock.listen(LISTEN_BACKLOG)
        except OSError as exc:
            sock.close()
            problems.append(f"{path}: {exc.strerror or exc}")
            continue
        return sock, path
    raise OSError("; ".join(problems))


def _remove(info: Path, sock_path: Path | None, pid: int) -> None:
    """Remove our registration, if it is still ours."""
    try:
        doc = json.loads(info.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        doc = None
    if isinstance(doc, dict) and doc.get("pid") == pid:
        with contextlib.suppress(OSError):
            info.unlink()
    if sock_path is not None:
        with contextlib.suppress(OSError):
            sock_path.unlink()


async def serve_control(sup: ControlHost, state_dir: Path, *, transport: str = "embedded",
                        task_status: trio.TaskStatus[Path | None] = trio.TASK_STATUS_IGNORED) -> None:
    """Serve the control socket of this proxy until cancelled.

    Creates ``run/<pid>.sock`` (0600) and ``run/<pid>.json`` in ``state_dir`` and removes
    both on exit. ``task_status.started`` receives the socket path, or None when the
    channel could not be set up (logged as a warning: the proxy runs on without it).

    Args:
        sup: the `Supervisor` (``status()``, ``settings``, ``config``; ``equip``,
            ``unequip``, ``reload`` for those ops).
        state_dir: the state directory (``mcpvisor.settings.state_dir``).
        transport: what the registration reports (``stdio``, ``http``, ``ws``).
    """
    pid = os.getpid()
    state_dir = Path(state_dir)
    info = control_dir(state_dir) / f"{pid}.json"
    started_at = now_iso()
    try:
        sock, sock_path = await _bind(state_dir, pid)
    except OSError as exc:
        logger.warning("control socket not available (`mcpvisor status` will not see this proxy): %s", exc)
        task_status.started(None)
        return
    try:
        doc = {"pid": pid, "socket": os.fspath(sock_path), "config": config_path(sup),
               "startedAt": started_at, "transport": transport}
        try:
            _private_dir(info.parent)
            atomic_write_text(info, json.dumps(doc, indent=2) + "\n", mode=0o600)
        except OSError as exc:
            logger.warning("cannot register this proxy in %s (`mcpvisor status` will not see it): %s",
                           info.parent, exc)
            sock.close()
            with contextlib.suppress(OSError):
                sock_path.unlink()
            task_status.started(None)
            return
        if sock_path.parent != control_dir(state_dir):
            logger.info("control socket at %s (the state directory's path is too long or unusable)",
                        sock_path)
        listener = trio.SocketListener(sock)
        limiter = trio.CapacityLimiter(MAX_CONNECTIONS)
        async with listener, trio.open_nursery() as nursery:
            task_status.started(sock_path)
            while True:
                try:
                    stream = await listener.accept()
                except OSError as exc:
                    logger.warning("control socket: accept failed: %s", exc)
                    await trio.sleep(ACCEPT_RETRY_S)
                    continue
                nursery.start_soon(_serve_connection, sup, stream, limiter, started_at, transport)
    finally:
        _remove(info, sock_path, pid)


# --------------------------------------------------------------------------------------
# the client (synchronous, for the CLI)
# --------------------------------------------------------------------------------------


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _answers(path: Path) -> bool:
    """Whether a proxy listens on ``path`` (a busy one that does not accept in time counts)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(PROBE_TIMEOUT_S)
        try:
            s.connect(os.fspath(path))
        except (FileNotFoundError, ConnectionRefusedError, NotADirectoryError):
            return False
        except (TimeoutError, BlockingIOError):
            return True
        except OSError:
            return False
    return True


def list_running(state_dir: Path) -> list[RunningProxy]:
    """The proxies registered in ``state_dir`` that answer, oldest first.

    Registrations whose process is gone or whose socket refuses connections (a proxy
    killed with SIGKILL leaves them behind) are removed on the way.
    """
    directory = control_dir(Path(state_dir))
    try:
        entries = sorted(directory.glob("*.json"))
    except OSError:
        return []
    found = []
    for info in entries:
        try:
            doc = json.loads(info.read_text(encoding="utf-8"))
            pid = int(doc["pid"])
            sock = Path(doc["socket"])
        except (OSError, ValueError, KeyError, TypeError):
            continue  # not ours, or being written: leave it alone
        if not _pid_alive(pid) or not _answers(sock):
            with contextlib.suppress(OSError):
                info.unlink()
            with contextlib.suppress(OSError):
                if stat.S_ISSOCK(os.lstat(sock).st_mode):
                    sock.unlink()
            continue
        found.append(RunningProxy(pid=pid, socket=sock, config=doc.get("config"),
                                  started_at=str(doc.get("startedAt", "")),
                                  transport=str(doc.get("transport", ""))))
    return sorted(found, key=lambda p: (p.started_at, p.pid))


def request(socket_path: Path, op: str, timeout: float = DEFAULT_REQUEST_TIMEOUT_S,
            **args: Any) -> dict[str, Any]:
    """Ask the proxy listening on ``socket_path`` to do ``op``; return its reply.

    Args:
        socket_path: `RunningProxy.socket`.
        op: ``status``, ``equip`` (with ``name=``), ``unequip``, ``reload``, ``ping``.
        timeout: seconds for the whole exchange.
        **args: the op's arguments.

    Returns:
        The reply, which has ``"ok": True``.

    Raises:
        ControlError: the proxy could not be reached or did not answer in time, sent
            something that is not a reply, or answered ``ok: false`` (then ``.reply``
            holds the reply and the message is its ``error``).
    """
    deadline = time.monotonic() + timeout
    payload = wire.encode_line({"op": op, **args}, anything=True)
    data = bytearray()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect(os.fspath(socket_path))
            s.sendall(payload)
            while b"\n" not in data:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError
                s.settimeout(left)
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
                if len(data) > MAX_REPLY_BYTES:
                    raise ControlError(f"the proxy at {socket_path} sent an oversized reply")
    except TimeoutError:
        raise ControlError(f"the proxy at {socket_path} did not answer {op!r} within {timeout:g}s") from None
    except (FileNotFoundError, ConnectionRefusedError):
        raise ControlError(f"no proxy is listening at {socket_path}") from None
    except OSError as exc:
        raise ControlError(f"cannot reach the proxy at {socket_path}: {exc.strerror or exc}") from None
    line = bytes(data).split(b"\n", 1)[0]
    if not line:
        raise ControlError(f"the proxy at {socket_path} closed the connection without answering {op!r}")
    try:
        reply = json.loads(line)
    except ValueError:
        raise ControlError(f"the proxy at {socket_path} sent something that is not JSON") from None
    if not isinstance(reply, dict) or "ok" not in reply:
        raise ControlError(f"the proxy at {socket_path} sent something that is not a reply")
    if reply["ok"] is not True:
        raise ControlError(str(reply.get("error") or f"{op} failed"), reply)
    return reply
