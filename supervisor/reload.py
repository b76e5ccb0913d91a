"""Hot reload: a running supervisor follows its config file.

Owns (the plan itself, what a new config changes, is `mcpvisor.reload_plan`):

* `reload_supervisor`: applies a plan to a running `Supervisor` (what
  `Supervisor.reload` and SIGHUP do). Clients see the whole reload as **one** router
  step, so they get one ``list_changed``: new and restarted servers are started first
  with their messages to the router held back; then a single message run inside the
  router applies the new server order, filters and naming, the held messages, and
  withdraws the tools of removed servers; removed servers are stopped afterwards
  (their tools are already gone, so their going is invisible);
* `watch_config`: the task that polls the config file (mtime, size, inode) every
  second, debounced, compares the content hash, validates, and reloads. A bad edit is
  logged with every problem and ignored: the running setup stays.

Reloads are serialized per supervisor, and each one runs as a task of the supervisor's
own tree, so a caller that gives up waiting (a control-socket client, say) never leaves
a reload half applied.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import trio

from mcpvisor.actors.core.registry import RegistryCore, diff
from mcpvisor.actors.messages import Reply
from mcpvisor.actors.process import withhold_values
from mcpvisor.actors.upstream import RouterPort
from mcpvisor.config import (
    Config,
    ConfigError,
    ServerSpec,
    load_config,
    parse_config,
    server_filter,
)
from mcpvisor.redact import remember, secret_values
from mcpvisor.reload_plan import ReloadPlan, auth_change, live_settings, plan_reload
from mcpvisor.settings import with_env_overrides

if TYPE_CHECKING:
    from mcpvisor.actors.upstream import Upstream
    from mcpvisor.ports import ReloadHost

__all__ = [
    "DEBOUNCE_S",
    "WATCH_INTERVAL_S",
    "apply_config",
    "reload_supervisor",
    "watch_config",
]

logger = logging.getLogger(__name__)

WATCH_INTERVAL_S: Final = 1.0
"""How often the config file's mtime, size and inode are checked (the decision of the
issue: polling, no extra dependency; one `stat` a second costs nothing)."""

DEBOUNCE_S: Final = 0.2
"""After a change is seen, the file must hold still this long before it is read: an
editor's save (truncate + write, or write temp + rename) is over well within it."""

DEBOUNCE_MAX_S: Final = 5.0
"""A file that keeps changing for this long is read anyway (a log appended to it?)."""

STOP_MARGIN_S: Final = 1.0
"""Extra wait, beyond a server's own stop sequence (3 x shutdownGrace), for its old
process to be reaped before the changed one starts."""


# --- applying a plan ----------------------------------------------------------------------


class _HeldPort(RouterPort):
    """The router as a new or restarted upstream sees it during a reload.

    Until `release`, its messages are kept (a `submit` returns at once: the server is not
    routable before the commit anyway); `release` hands them over to be applied in the
    commit step and from then on everything goes straight to the router.
    """

    def __init__(self, router: Any) -> None:
        self._router = router
        self._held: list[object] | None = []

    async def send(self, message: object) -> None:
        if self._held is None:
            await self._router.send(message)
        else:
            self._held.append(message)

    async def submit(self, message: object) -> None:
        if self._held is None:
            await self._router.submit(message)
        else:
            self._held.append(message)

    def release(self) -> list[object]:
        """The held messages, in order; later ones pass straight through."""
        held, self._held = self._held or [], None
        return held


class _Gone(RouterPort):
    """The router as an old upstream being replaced sees it: nothing it says matters any more
    (its successor's lists replace its own in the commit step)."""

    async def send(self, message: object) -> None:
        pass

    async def submit(self, message: object) -> None:
        pass


class _Commit:
    """The one router step of a reload (runs inside the router, between two messages)."""

    def __init__(
        self,
        sup: ReloadHost,
        plan: ReloadPlan,
        config: Config,
        fresh: Mapping[str, Upstream],
        ports: Sequence[_HeldPort],
    ) -> None:
        self.reply: Reply[list[Upstream]] = Reply()
        self._sup = sup
        self._plan = plan
        self._config = config
        self._fresh = fresh
        self._ports = ports

    def run(self, core: RegistryCore) -> tuple[list[Upstream], Any]:

        sup, plan = self._sup, self._plan
        before = core.snapshot
        for port in self._ports:
            for message in port.release():
                core.apply(message)
        filters = {spec.name: server_filter(spec) for spec in self._config.servers.values()}
        # Removed servers leave the order here: their tools are withdrawn in this same step.
        _redeclare(core, self._config)
        core.reconfigure(plan.order, filters, self._config.settings.namespacing,
                         tuple(self._config.compound_tools.values()))
        leaving = [sup.upstreams[name] for name in plan.removed if name in sup.upstreams]
        table = {name: self._fresh.get(name) or sup.upstreams[name] for name in plan.order}
        sup.upstreams.clear()
        sup.upstreams.update(table)
        return leaving, diff(before, core.snapshot)


class _Recompound:
    """The `tools` section changed and no server did: new compound tools, one rebuild."""

    def __init__(self, compounds: tuple[Any, ...]) -> None:
        self.compounds = compounds
        self.reply: Reply[None] = Reply()

    def run(self, core: RegistryCore) -> tuple[None, Any]:
        core.compounds = self.compounds
        return None, core.rebuild()


def _redeclare(core: RegistryCore, config: Config) -> None:
    """The config file's (read-only) toolsets, as the new file declares them.

    An equipped toolset keeps the definition it was equipped with until it is equipped
    again (actors/core/toolsets.py: ``equipped`` is a copy).
    """
    exposure = core.exposure
    if hasattr(exposure, "declared"):
        from mcpvisor.config import declared_toolset

        exposure.declared = {name: declared_toolset(decl) for name, decl in config.toolsets.items()}
    book = getattr(exposure, "lazy", None)
    if book is not None:  # lazy servers (issue 16): keep what is known of those still lazy
        book.reconfigure({s.name: s.description for s in config.enabled_servers() if s.lazy})
        descriptions = {s.name: s.description for s in config.servers.values() if s.description}
        exposure.server_descriptions = descriptions  # type: ignore[attr-defined]


async def reload_supervisor(sup: ReloadHost, config: Config | None = None) -> dict[str, Any]:
    """Re-read the config file (or apply ``config``) and make the running setup follow it.

    Starts added servers, stops removed or disabled ones, restarts changed ones (by
    fingerprint), leaves the others running untouched, and makes every connected client
    see the whole change as one ``list_changed``. Settings that cannot change live are
    logged ("restart the proxy to apply") and keep their running values.

    Args:
        sup: a running supervisor (inside `open_supervisor`).
        config: the new config; default: read `sup.config.path` again.

    Returns:
        ``{"ok": bool, "errors": [...], "added": [...], "removed": [...], "restarted": [...],
        "unchanged": [...], "needsRestart": [...]}``. A config that does not validate gives
        ``ok: false`` with every problem, and nothing changes.

    Cancellation: the reload runs as a task of the supervisor; cancelling the caller stops
    the wait, not the reload. Reloads are applied one at a time, in call order.
    """
    done: Reply[dict[str, Any]] = Reply()
    if not sup.start_soon(_reload_task, sup, config, done):
        return {"ok": False, "errors": ["the supervisor is not running"]}
    return await done.wait()


async def _reload_task(sup: ReloadHost, config: Config | None, done: Reply[dict[str, Any]]) -> None:
    try:
        async with sup.reload_lock:
            try:
                result = await _reload(sup, config)
            except Exception as exc:  # a bug, or the tree closing under us: keep the proxy up
                logger.exception("reload failed")
                result = {"ok": False, "errors": [f"reload failed: {type(exc).__name__}: {exc}"]}
            done.set(result)
    finally:
        done.fail(RuntimeError("the proxy stopped before the reload finished"))


async def _reload(sup: ReloadHost, config: Config | None) -> dict[str, Any]:
    if config is None:
        path = sup.config.path
        if path is None:
            return {"ok": False, "errors": ["nothing to re-read: the supervisor was not given a config file"]}
        try:
            config = await trio.to_thread.run_sync(partial(load_config, path, isolate_servers=True))
        except ConfigError as err:
            logger.error(
                "config not reloaded, the running setup stays; %d problem(s):\n%s", len(err.problems), err
            )
            return {"ok": False, "errors": list(err.problems)}
    for warning in config.warnings:
        logger.warning("%s", warning)
    return await apply_config(sup, config)


async def apply_config(sup: ReloadHost, config: Config) -> dict[str, Any]:
    """Apply an already validated config to ``sup`` (the body of a reload; see `reload_supervisor`).

    Call it only under the supervisor's reload lock (`reload_supervisor` does).
    """
    try:
        config = dataclasses.replace(config, settings=with_env_overrides(config.settings))
    except ConfigError as err:
        logger.error("config not reloaded, the running setup stays:\n%s", err)
        return {"ok": False, "errors": list(err.problems)}
    # Before any server of the new config starts: its first stderr line is scrubbed too.
    remember(secret_values(config))
    withhold_values(config.settings.auth_tokens.values())
    running = {name: up.spec for name, up in sup.upstreams.items()}
    plan = plan_reload(running, sup.settings, config)
    for key in plan.needs_restart:
        logger.warning('settings "%s" changed: restart the proxy to apply it', key)
    settings = live_settings(sup.settings, config.settings)
    if settings.log_level != sup.settings.log_level:
        logging.getLogger().setLevel(settings.log_level.upper())
    auth = auth_change(sup.settings, settings)
    applied = dataclasses.replace(config, settings=settings)
    if not plan.touches_servers and not plan.namespacing_changed:
        if dict(config.compound_tools) != dict(sup.config.compound_tools):
            await sup.router.ask(_Recompound(tuple(config.compound_tools.values())))
        sup.config, sup.settings = applied, settings
        logger.info("config reloaded: no server changed%s", auth)
        return {"ok": True, "errors": [], **plan.summary()}

    fresh: dict[str, Upstream] = {}
    ports: list[_HeldPort] = []
    deadline = trio.current_time() + settings.startup_wait
    async with trio.open_nursery() as nursery:
        for name in plan.changed:
            nursery.start_soon(_replace, sup, config.servers[name], fresh, ports, deadline)
        for name in plan.added:
            nursery.start_soon(_start, sup, config.servers[name], fresh, ports, deadline)
    sup.config, sup.settings = applied, settings
    leaving: list[Upstream] = await sup.router.ask(_Commit(sup, plan, applied, fresh, ports))
    for up in leaving:
        up.stop()
    menu = getattr(sup, "menu", None)
    if menu is not None:
        menu.load_lazy()  # lazy servers the equipped toolset names start now
    not_up = [name for name, up in fresh.items() if up.state.value not in ("ready", "idle")]
    logger.info(
        "config reloaded: %d started, %d stopped, %d restarted, %d unchanged%s%s",
        len(plan.added),
        len(plan.removed),
        len(plan.changed),
        len(plan.unchanged),
        f"; not up yet: {', '.join(not_up)}" if not_up else "",
        auth,
    )
    return {"ok": True, "errors": [], **plan.summary(), "notReady": not_up}


def _held_upstream(
    sup: ReloadHost, spec: ServerSpec, fresh: dict[str, Upstream], ports: list[_HeldPort]
) -> Upstream:
    """A new actor for ``spec`` whose messages to the router wait for the commit."""
    up = sup.make_upstream(spec)
    port = _HeldPort(sup.router)
    up.router = port
    ports.append(port)
    fresh[spec.name] = up
    return up


async def _start(
    sup: ReloadHost, spec: ServerSpec, fresh: dict[str, Upstream], ports: list[_HeldPort], deadline: float
) -> None:
    up = _held_upstream(sup, spec, fresh, ports)
    up.start_reason = "added to the config"
    await sup.start_actor(up)
    with trio.move_on_at(deadline):
        await up.first_attempt_done.wait()


async def _replace(
    sup: ReloadHost, spec: ServerSpec, fresh: dict[str, Upstream], ports: list[_HeldPort], deadline: float
) -> None:
    """Stop the old actor of a changed server (its process reaped), then start the new one.

    Calls that arrive meanwhile wait for the new actor (it is ``starting``), bounded by
    the server's ``restartWait``, as through any restart.
    """
    from mcpvisor.actors.upstream import State

    old = sup.upstreams[spec.name]
    up = _held_upstream(sup, spec, fresh, ports)
    up.start_reason = "restart: its config entry changed"
    old.router = _Gone()
    sup.upstreams[spec.name] = up
    old.stop()
    with trio.move_on_after(3 * old.spec.shutdown_grace + STOP_MARGIN_S) as waited:
        while old.state is not State.STOPPED:
            await old.wait_changed()
    if waited.cancelled_caught:
        logger.warning("%s: the old process is still stopping; starting the new one anyway", spec.name)
    await sup.start_actor(up)
    with trio.move_on_at(deadline):
        await up.first_attempt_done.wait()


# --- watching the file ----------------------------------------------------------------------

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
