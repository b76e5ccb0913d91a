"""The supervision tree: the nurseries that own every actor, and the order they stop in.

Owns `open_supervisor`, which runs a `mcpvisor.proxy.Supervisor` (the object an
embedding program, or the CLI, holds) for the duration of a block:

* the root nursery runs the router and the broadcaster; inside it the tree nursery
  runs one upstream actor per enabled server, all started concurrently, so on the
  way out the upstreams stop first (each process group stopped and reaped, in
  parallel) and the router sees them leave (docs/style.md rule 4);
* the process watchdog (`mcpvisor.actors.process.Reaper`) lives around both, so children
  die even if the proxy itself is SIGKILLed;
* start-up: ``initialize`` and every list are answered at once with what is known (the
  servers that are up, the remembered lists of those still starting); the list changes
  of start-up are gathered into a few notifications (`mcpvisor.startup`) until every
  eager server made its first start attempt, at most ``settings.startupWait``;
* the toolsets saved in the state directory are restored before the router starts;
  the config file watcher (`mcpvisor.reload_watch`) and the control socket run in the tree;
* the journal wraps everything else, so it closes last;
* beside it: `mcpvisor._boot` (what is read before it runs).
"""

from __future__ import annotations

import os
import random
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from mcpvisor._boot import coerce_config, journal_opener, load_state, open_shared, trace_config
from mcpvisor.actors import __version__, telemetry
from mcpvisor.actors.core.model import SavedState
from mcpvisor.actors.process import open_reaper
from mcpvisor.config import Config, ConfigError
from mcpvisor.proxy import Supervisor
from mcpvisor.redact import remember, secret_values
from mcpvisor.settings import state_dir as resolve_state_dir
from mcpvisor.settings import with_env_overrides
from mcpvisor.state import StateStore

if TYPE_CHECKING:
    from mcpvisor.journal import Journal
    from mcpvisor.metrics import Metrics
    from mcpvisor.pgstore.store import PgStore


@asynccontextmanager
async def open_supervisor(
    config: Config | str | Path | Mapping[str, Any],
    *,
    rng: random.Random | None = None,
    state_dir: str | os.PathLike[str] | None = None,
    toolset: str | None = None,
    watch: bool = True,
    control: str | os.PathLike[str] | None = None,
    control_transport: str = "embedded",
    journal: str | os.PathLike[str] | None = None,
    journal_payloads: bool | None = None,
    metrics: bool = False,
) -> AsyncIterator[Supervisor]:
    """Start every enabled server under supervision for the duration of the block.

    Args:
        config: a `Config`, a path to a config file, or the config as a dict.
        state_dir: where toolsets live (default: ``$MCPVISOR_STATE_DIR``,
            ``settings.stateDir``, the user state dir). The toolset equipped there
            is equipped again, in normal mode.
        toolset: equip this toolset at start (``serve --toolset``) instead.
        watch: follow the config file (when ``config`` came from one; `mcpvisor.reload_watch`):
            each valid edit is applied by `Supervisor.reload`; a bad edit is logged.
        control: a state directory to register this proxy's control socket in
            (`mcpvisor.control`, what ``mcpvisor status`` reads) for the block's lifetime;
            None: no control channel. A socket that cannot be created is only logged.
        control_transport: the transport the registration reports (``stdio``, ``http``, ``ws``).
        journal: record every tool call in this SQLite file (default: ``settings.journal``;
            `mcpvisor.journal`, ``mcpvisor journal PATH``). Queued records are written
            when the block exits.
        journal_payloads: record full arguments and results too (default:
            ``settings.journalPayloads``; otherwise sizes and digests only).
        metrics: count calls, requests upstream, restarts and list changes from the start
            (`mcpvisor.metrics`: what ``/metrics`` exports and the dashboard draws).

    With ``settings.store`` (or ``$MCPVISOR_STORE``) a PostgreSQL URL, the state, the
    remembered lists, the upstream tokens and the journal are the store's, shared with the
    other replicas on it, whose changes are applied here as they are made (`mcpvisor.pgstore`).

    Raises:
        ConfigError: ``settings.exposure`` / ``$MCPVISOR_EXPOSURE`` is not usable.
        actors.core.toolsets.ToolsetError: ``toolset`` does not exist.
        mcpvisor.pgstore.StoreError: the store cannot be reached, or its schema is newer.
        (All before anything is started.)

    Leaving the block stops everything: each server's process group is stopped
    (close stdin, SIGTERM, SIGKILL, bounded) and reaped; no task or process survives.
    """
    cfg = coerce_config(config)
    remember(secret_values(cfg))  # what status views, the journal and the log must not show
    settings = with_env_overrides(cfg.settings)
    directory = resolve_state_dir(state_dir, configured=settings.state_dir)
    journal_path = journal if journal is not None else cfg.settings.journal
    payloads = cfg.settings.journal_payloads if journal_payloads is None else journal_payloads
    traces = trace_config(cfg)
    async with AsyncExitStack() as stack:
        shared = await stack.enter_async_context(open_shared(settings, directory))
        store = shared.state if shared is not None else StateStore(directory)
        saved = await load_state(store, cfg, toolset)
        try:
            await stack.enter_async_context(telemetry.tracing(traces, version=__version__))
        except telemetry.TelemetryError as exc:
            raise ConfigError(str(exc), cfg.path) from None
        # The journal wraps everything else: it closes last, after every call has finished.
        journal_handle = None
        if journal_path is not None:  # imported only then: SQLite and the writer cost ~3 ms at start
            from mcpvisor.journal import open_journal

            journal_handle = await stack.enter_async_context(open_journal(
                journal_path, payloads=payloads, opener=journal_opener(shared, payloads)))
        async with _run_tree(cfg, store, saved, toolset, rng=rng, watch=watch, control=control,
                             control_transport=control_transport, journal=journal_handle,
                             metrics=_metrics() if metrics else None, shared=shared) as sup:
            yield sup


def _metrics() -> Metrics:
    """The counters, imported only when asked for (a stdio ``serve`` without a metrics port
    never is): their module and the dashboard's history cost ~2 ms at start."""
    from mcpvisor.metrics import Metrics

    return Metrics()


@asynccontextmanager
async def _run_tree(cfg: Config, store: StateStore, saved: SavedState, toolset: str | None, *,
                    rng: random.Random | None, watch: bool, control: str | os.PathLike[str] | None,
                    control_transport: str, journal: Journal | None,
                    metrics: Metrics | None = None,
                    shared: PgStore | None = None) -> AsyncIterator[Supervisor]:
    """The supervision tree of `open_supervisor` (its nurseries, in their nesting order)."""
    async with open_reaper() as reaper, trio.open_nursery() as root:
        sup = Supervisor(cfg, reaper=reaper, rng=rng, state_dir=store.directory, shared=shared)
        sup.journal = journal
        sup.metrics = metrics
        if metrics is not None:  # every request the front serves but tools/call (note_call counts those)
            from mcpvisor.metrics import ServedTimer

            sup.front.middleware.append(ServedTimer(metrics))
            sup.front.on_served = metrics.request_served  # what a front answers without the SDK
        sup.toolsets.restore(saved, toolset)
        await sup.recall()
        sup.core.rebuild()  # before the router runs: no client yet, nothing to announce
        sup._root = root
        await root.start(sup.router.run)
        await root.start(sup.front.run)
        await root.start(sup.coalescer.run)
        await root.start(sup.catalog.run)
        if shared is not None:  # other replicas' changes, applied here as they are made
            from mcpvisor.pgstore.follow import follow

            await root.start(follow, shared, sup.menu)
        if control is not None:
            from mcpvisor.control import serve_control

            await root.start(lambda task_status: serve_control(
                sup, Path(control), transport=control_transport, task_status=task_status))
        try:
            async with trio.open_nursery() as tree:
                sup._tree = tree
                for spec in cfg.enabled_servers():
                    await sup.start_server(spec)
                sup.menu.load_lazy()
                sup.scoped.fill_pools()
                root.start_soon(sup._startup_gate)
                if watch and cfg.path is not None:
                    from mcpvisor.reload_watch import watch_config

                    await tree.start(watch_config, sup)
                try:
                    yield sup
                finally:
                    tree.cancel_scope.cancel()
        finally:
            sup.event_bus.close()
            root.cancel_scope.cancel()
