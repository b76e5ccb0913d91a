"""The config file watcher: a running supervisor follows edits of its config file.

Owns `watch_config`, the task (in the supervisor's tree) that polls the file's mtime,
size and inode every second, waits for it to hold still (debounced), compares the
content hash, validates the new content and hands it to `Supervisor.reload`
(`mcpvisor.reload` applies it). A bad edit is logged with every problem and ignored: the
running setup stays. Polling needs no extra dependency, and one `stat` a second costs
nothing.
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import trio

from mcpvisor.config import ConfigError, parse_config

if TYPE_CHECKING:
    from mcpvisor.ports import ReloadHost

__all__ = ["DEBOUNCE_MAX_S", "DEBOUNCE_S", "WATCH_INTERVAL_S", "watch_config"]

logger = logging.getLogger("mcpvisor.reload")
"""The reload's logger: a log filter or level set for reloads covers the file's edits too."""

WATCH_INTERVAL_S: Final = 1.0
"""How often the config file's mtime, size and inode are checked (the decision of the
issue: polling, no extra dependency; one `stat` a second costs nothing)."""

DEBOUNCE_S: Final = 0.2
"""After a change is seen, the file must hold still this long before it is read: an
editor's save (truncate + write, or write temp + rename) is over well within it."""

DEBOUNCE_MAX_S: Final = 5.0
"""A file that keeps changing for this long is read anyway (a log appended to it?)."""


_Signature = tuple[int, int, int]


def _signature(path: Path) -> _Signature | None:
    """(mtime_ns, size, inode), or None when the file is missing."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size, st.st_ino


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None


async def watch_config(
    sup: ReloadHost,
    path: Path | None = None,
    *,
    interval: float = WATCH_INTERVAL_S,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Reload ``sup`` whenever its config file changes, until cancelled.

    The file is polled every ``interval`` seconds (mtime, size, inode, so an editor that
    saves by renaming a new file over the old one is seen). A change is acted on once
    the file has held still for `DEBOUNCE_S` and its content hash differs from the last
    one read. The new content is validated first: a bad edit is logged with every
    problem and ignored (the running setup stays) until the next change.

    Args:
        sup: the running supervisor.
        path: the file (default: ``sup.config.path``; nothing to watch without one).
        interval: seconds between checks.
    """
    target = path if path is not None else sup.config.path
    task_status.started()
    if target is None:
        return
    target = Path(target)
    last_sig = await trio.to_thread.run_sync(_signature, target)
    data = await trio.to_thread.run_sync(_read, target)
    last_hash = hashlib.sha256(data).hexdigest() if data is not None else None
    if data is not None and _document(data) != dict(sup.config.raw):
        last_hash = None  # edited between the load and now: apply it
        last_sig = None
    missing_logged = False
    while True:
        sig = await trio.to_thread.run_sync(_signature, target)
        if sig == last_sig:
            await trio.sleep(interval)
            continue
        sig = await _settle(target, sig)
        last_sig = sig
        if sig is None:
            if not missing_logged:
                logger.warning("config file %s is gone; the running setup stays", target)
                missing_logged = True
            continue
        missing_logged = False
        data = await trio.to_thread.run_sync(_read, target)
        if data is None:
            continue
        digest = hashlib.sha256(data).hexdigest()
        if digest == last_hash:
            continue
        last_hash = digest
        try:
            config = parse_config(data, path=target, isolate_servers=True)
        except ConfigError as err:
            logger.error(
                "config change in %s ignored, the running setup stays; %d problem(s):\n%s",
                target,
                len(err.problems),
                err,
            )
            continue
        logger.info("config file %s changed: reloading", target)
        await sup.reload(config)


async def _settle(path: Path, sig: _Signature | None) -> _Signature | None:
    """Wait until the file's signature holds still for `DEBOUNCE_S` (at most `DEBOUNCE_MAX_S`)."""
    with trio.move_on_after(DEBOUNCE_MAX_S):
        while True:
            await trio.sleep(DEBOUNCE_S)
            again = await trio.to_thread.run_sync(_signature, path)
            if again == sig:
                return sig
            sig = again
    return sig


def _document(data: bytes) -> Any:
    """The decoded JSON document (None when it does not decode), for comparing with `Config.raw`."""
    import msgspec

    try:
        return msgspec.json.decode(data.removeprefix(b"\xef\xbb\xbf"))
    except msgspec.DecodeError:
        return None
