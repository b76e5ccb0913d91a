"""Atomic, locked writes of the user's files: the one primitive every persistent write uses.

Owns:

* :func:`atomic_write_text` — write a file so that a reader sees either the old bytes or
  the new bytes, never a mixture, and a crash at any point leaves the old file whole.
* :func:`locked` — the inter-process lock that turns read-modify-write into a transaction;
  it also removes the temporary files a killed writer of the same file left behind.
* :func:`read_json` / :func:`dump_json` — the JSON reading and writing conventions of the
  files mcpvisor edits (a clear error naming the file and position; 2-space indent, key
  order kept, non-ASCII kept readable, trailing newline).

A user's files are sacred: these functions never truncate a file in place, never leave a
temporary file behind (one left by a process killed mid-write is removed by the next
:func:`locked` of that file), and keep the file's permission bits. Everything here is blocking
file I/O; call it from a worker thread (``trio.to_thread.run_sync``) inside async code.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Final

try:
    import fcntl as _flock
except ImportError:  # Windows: filelock's lock, whose file is deleted on release there anyway
    _flock = None  # type: ignore[assignment]

__all__ = [
    "DEFAULT_LOCK_TIMEOUT_S",
    "JSONFileError",
    "LockTimeout",
    "atomic_write_text",
    "dump_json",
    "locked",
    "parse_json",
    "read_json",
    "remove_stale_temps",
    "to_plain",
]

DEFAULT_LOCK_TIMEOUT_S: Final = 10.0
"""How long to wait for another process's lock. Every holder only reads, edits and
rewrites one small JSON file (milliseconds), so ten seconds means the holder is stuck,
not busy; waiting longer would only hang the CLI."""

DEFAULT_FILE_MODE: Final = 0o666
"""Permission bits of a newly created file before the umask, as ``open()`` would use."""

LOCK_SUFFIX: Final = ".lock"
"""The lock file sits next to its target: ``<file>.lock`` (filelock's convention)."""

LOCK_POLL_S: Final = 0.05
"""How often a waiter retries a held lock: filelock's default ``poll_interval``."""

TEMP_PREFIX_FORMAT: Final = ".{name}."
TEMP_SUFFIX: Final = ".tmp"
"""A temporary file of :func:`atomic_write_text` is ``.<name>.<8 random chars>.tmp``
(`tempfile.mkstemp`'s random part is 8 characters of ``[a-z0-9_]``)."""


class LockTimeout(TimeoutError):
    """Another process held the lock on :attr:`path` for longer than the timeout.

    Attributes:
        path: The file that was to be locked.
        lock_path: The lock file (``<path>.lock``) that another process holds.
        timeout: How long we waited, in seconds.
    """

    def __init__(self, path: Path, lock_path: Path, timeout: float) -> None:
        super().__init__(
            f"could not lock {path}: another process has held {lock_path} for more than "
            f"{timeout:g} s (another mcpvisor command or proxy is editing it; try again)"
        )
        self.path = path
        self.lock_path = lock_path
        self.timeout = timeout


class JSONFileError(ValueError):
    """A file that should hold a JSON object does not parse as one.

    Attributes:
        path: The file.
        line: 1-based line of the problem, or None when it is not about a position.
        column: 1-based column of the problem, or None.
        problem: What is wrong, without the file name.
    """

    def __init__(self, path: Path, problem: str, line: int | None = None, column: int | None = None) -> None:
        where = f"{path}" if line is None else f"{path}:{line}:{column}"
        super().__init__(f"{where}: {problem}")
        self.path = path
        self.line = line
        self.column = column
        self.problem = problem


def _target(path: Path) -> Path:
    """The file a write really lands in: a symlinked file is written through, not replaced."""
    return Path(os.path.realpath(path)) if path.is_symlink() else path


def _umask() -> int:
    """The process umask, read without changing it where the platform allows."""
    with contextlib.suppress(OSError, ValueError):
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    mask = os.umask(0o022)  # not thread-safe, hence the /proc read first
    os.umask(mask)
    return mask


def _fsync_directory(directory: Path) -> None:
    """Make a rename in ``directory`` durable (POSIX: the entry lives in the directory)."""
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)
    try:
        fd = os.open(directory, flags)
    except OSError:  # Windows cannot open a directory; its rename is already durable
        return
    try:
        os.fsync(fd)
    except OSError:  # some filesystems refuse fsync on directories; the data itself is synced
        pass
    finally:
        os.close(fd)


def atomic_write_text(path: Path, text: str, *, mode: int | None = None) -> None:
    """Replace the contents of ``path`` with ``text`` (UTF-8, newlines written as given).

    The text goes to a temporary file in the same directory, which is flushed and fsynced
    and then renamed over ``path`` with :func:`os.replace`; the directory is fsynced after
    the rename. Readers see the old contents or the new, never a partial file. A failure at
    any step (including an interrupt) removes the temporary file and leaves ``path`` as it
    was, byte for byte.

    This does not lock: a read-modify-write must hold :func:`locked` around it.

    Args:
        path: The file to write. Missing parent directories are created. When ``path`` is
            a symlink, the file it points to is rewritten and the link is kept.
        text: The complete new contents.
        mode: Permission bits for the file. Default: the existing file's bits (and its
            owner and group, where we may set them); for a new file ``0o666`` less the umask.

    Raises:
        OSError: The file could not be written; ``path`` is unchanged.
    """
    target = _target(Path(path))
    target.parent.mkdir(parents=True, exist_ok=True)
    owner: tuple[int, int] | None = None
    try:
        st = os.stat(target)
    except FileNotFoundError:
        bits = DEFAULT_FILE_MODE & ~_umask() if mode is None else mode
    else:
        bits = stat.S_IMODE(st.st_mode) if mode is None else mode
        owner = (st.st_uid, st.st_gid)
    fd, tmp_name = tempfile.mkstemp(
        prefix=TEMP_PREFIX_FORMAT.format(name=target.name), suffix=TEMP_SUFFIX, dir=target.parent
    )
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as tmp:
            tmp.write(text)
            tmp.flush()
            if owner is not None and hasattr(os, "fchown"):
                with contextlib.suppress(OSError):  # only root may give a file away; keep ours then
                    os.fchown(tmp.fileno(), *owner)
            if hasattr(os, "fchmod"):  # after chown, which may clear set-id bits
                os.fchmod(tmp.fileno(), bits)
            os.fsync(tmp.fileno())
        if not hasattr(os, "fchmod"):
            os.chmod(tmp_name, bits)
        os.replace(tmp_name, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        raise
    _fsync_directory(target.parent)


@contextlib.contextmanager
def locked(path: Path, timeout: float = DEFAULT_LOCK_TIMEOUT_S, *, remove: bool = False) -> Iterator[None]:
    """Hold the inter-process lock of ``path`` for the duration of the block.

    The lock is an OS file lock (``flock`` on POSIX) on ``<path>.lock`` next to the file,
    so a process that dies holding it releases it at once. It is advisory: every writer of
    the file must take it, the same way (the same ``remove``). It is not reentrant: do not
    nest two ``locked()`` blocks on the same path, even in one process.

    Once the lock is held, temporary files of :func:`atomic_write_text` for ``path`` are
    removed: every writer holds the lock, so any such file belongs to a writer that was
    killed mid-write.

    Args:
        path: The file to protect (it need not exist; its directory is created). A symlinked
            file is locked under its real name, so two names for one file share one lock.
        timeout: Seconds to wait for another holder.
        remove: Delete the lock file when the block ends, so that nothing is left next to
            a file the user owns (the config). On POSIX a waiter that locked a lock file
            its holder has just deleted sees that the name no longer leads to that file and
            starts over, so two processes never both hold the lock. Without ``remove`` the
            lock file stays (the state directory's own files).

    Raises:
        LockTimeout: Another process held the lock for longer than ``timeout``.
    """
    target = _target(Path(path))
    lock_path = target.with_name(target.name + LOCK_SUFFIX)
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    if _flock is not None:
        fd = _acquire_flock(Path(path), lock_path, timeout)
        try:
            remove_stale_temps(target)
            yield
        finally:
            if remove:
                with contextlib.suppress(OSError):
                    os.unlink(lock_path)  # while still holding it: see _acquire_flock
            os.close(fd)  # releases the lock
        return
    # Not POSIX: filelock's lock (imported only there: filelock 4 costs 15-40 ms of imports,
    # which `serve` would pay before its first answers, for the state directory's lock).
    import filelock

    lock = filelock.FileLock(lock_path, timeout=timeout)
    try:
        lock.acquire()
    except filelock.Timeout:
        raise LockTimeout(Path(path), lock_path, timeout) from None
    try:
        remove_stale_temps(target)
        yield
    finally:
        lock.release()


def _acquire_flock(path: Path, lock_path: Path, timeout: float) -> int:
    """Lock ``lock_path`` (created if missing) with ``flock`` and return its descriptor.

    A holder that removes the lock file deletes it before it releases the lock, so a
    waiter can win the lock of a file that no longer has a name; after locking, the
    descriptor's inode must still be what ``lock_path`` names, else we start over on the
    new file (a lock file that is never removed always passes).
    """
    assert _flock is not None
    deadline = time.monotonic() + timeout
    while True:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            _flock.flock(fd, _flock.LOCK_EX | _flock.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            if time.monotonic() >= deadline:
                raise LockTimeout(path, lock_path, timeout) from None
            time.sleep(LOCK_POLL_S)
            continue
        except BaseException:
            os.close(fd)
            raise
        try:
            named = os.stat(lock_path)
        except FileNotFoundError:
            named = None
        held = os.fstat(fd)
        if named is not None and (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino):
            return fd
        os.close(fd)  # its holder deleted it while we waited: lock the current one


def remove_stale_temps(path: Path) -> list[Path]:
    """Delete the temporary files :func:`atomic_write_text` made for ``path`` and left.

    Only call it holding :func:`locked` for ``path``: then no other writer is mid-write,
    and every such file is a killed writer's. Returns the files removed.
    """
    target = _target(Path(path))
    pattern = re.compile(
        re.escape(TEMP_PREFIX_FORMAT.format(name=target.name)) + r"[a-z0-9_]{8}" + re.escape(TEMP_SUFFIX)
    )
    removed = []
    with contextlib.suppress(OSError):
        for entry in os.scandir(target.parent):
            if pattern.fullmatch(entry.name) and entry.is_file(follow_symlinks=False):
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)
                    removed.append(Path(entry.path))
    return removed


def read_json(path: Path) -> dict[str, Any] | None:
    """Read a file that holds one JSON object.

    Returns:
        The object, with its key order, or None when the file does not exist.

    Raises:
        JSONFileError: (a ValueError) the file is not UTF-8, not JSON, or not an object;
            the message names the file and, for syntax errors, the line and column.
        OSError: The file exists but cannot be read.
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise JSONFileError(path, f"not UTF-8 text (byte {exc.start})") from exc
    return parse_json(text, path)


def parse_json(text: str, path: Path) -> dict[str, Any]:
    """Parse ``text``, read from ``path``, as one JSON object.

    Raises:
        JSONFileError: As for :func:`read_json`.
    """
    if not text.strip():
        raise JSONFileError(path, "the file is empty; expected a JSON object")
    try:
        doc = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise JSONFileError(path, f"invalid JSON: {exc.msg}", exc.lineno, exc.colno) from exc
    except _NonJSONConstant as exc:
        raise JSONFileError(path, f"invalid JSON: {exc.args[0]} is not a JSON number") from None
    if not isinstance(doc, dict):
        raise JSONFileError(path, f"expected a JSON object at the top level, found {_json_type(doc)}")
    return doc


def dump_json(doc: Any, *, indent: int | str = 2) -> str:
    """Serialize ``doc`` the way mcpvisor writes files.

    Keys keep their order, non-ASCII text is written as is, and the text ends with a
    newline. With the default 2-space indent the output matches ``JSON.stringify(doc,
    null, 2)``, which is how Claude Code writes ``.mcp.json`` (plus the trailing newline).

    Args:
        doc: A JSON-compatible value.
        indent: Spaces per level, or an indent string such as ``"\\t"``.

    Raises:
        TypeError: ``doc`` holds a value JSON cannot represent.
        ValueError: ``doc`` holds NaN or infinity, which JSON cannot represent.
    """
    return json.dumps(doc, indent=indent, ensure_ascii=False, allow_nan=False) + "\n"


def to_plain(value: Any) -> Any:
    """A deep copy of ``value`` with every Mapping a dict and every tuple a list, for :func:`dump_json`."""
    if isinstance(value, Mapping):
        return {key: to_plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [to_plain(item) for item in value]
    return value


class _NonJSONConstant(Exception):
    """Python's json accepts NaN and Infinity; JSON does not."""


def _reject_constant(name: str) -> Any:
    """``parse_constant`` hook refusing NaN, Infinity and -Infinity."""
    raise _NonJSONConstant(name)


def _json_type(value: Any) -> str:
    """The JSON name of a parsed value's type, for error messages."""
    match value:
        case bool():
            return "a boolean"
        case int() | float():
            return "a number"
        case str():
            return "a string"
        case list():
            return "an array"
        case None:
            return "null"
        case _:
            return "an object"
