"""Hot reload: a running supervisor applies a new config.

Owns `reload_supervisor` (what `Supervisor.reload`, SIGHUP, the control socket and the
config file watcher, `mcpvisor.reload_watch`, call) and `apply_config`: a plan
(`mcpvisor.reload_plan`: what the new config starts, stops, restarts, keeps) applied to
the running tree. Clients see the whole reload as **one** router step, so they get one
``list_changed``: new and restarted servers are started first with their messages to the
router held back; then a single message run inside the router applies the new server
order, filters and naming, the held messages, and withdraws the tools of removed
servers; removed servers are stopped afterwards (their tools are already gone, so their
going is invisible).

Reloads are serialized per supervisor, and each one runs as a task of the supervisor's
own tree, so a caller that gives up waiting (a control-socket client, say) never leaves
a reload half applied.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, Final

import msgspec
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
    server_filter,
)
from mcpvisor.redact import remember, secret_values
from mcpvisor.reload_plan import ReloadPlan, auth_change, live_settings, plan_reload
from mcpvisor.settings import with_env_overrides

if TYPE_CHECKING:
    from mcpvisor.actors.upstream import Upstream
    from mcpvisor.ports import ReloadHost

__all__ = ["apply_config", "reload_supervisor"]

logger = logging.getLogger(__name__)

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
        config = msgspec.structs.replace(config, settings=with_env_overrides(config.settings))
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
    applied = msgspec.structs.replace(config, settings=settings)
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
