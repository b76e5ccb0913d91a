"""What `mcpvisor.tree.open_supervisor` reads before anything runs.

The config as given (a `Config`, a file, a dict), the saved toolsets of the state
directory (with ``--toolset`` recorded as equipped), the tracing settings, the proxy's
``instructions``, and each eager server's remembered lists (listed until the server
lists its own, and the era it answered in last time).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import trio

from mcpvisor.actors import telemetry
from mcpvisor.actors.core.model import SavedState
from mcpvisor.actors.core.registry import RegistryCore
from mcpvisor.actors.core.toolsets import ToolsetError
from mcpvisor.config import Config, ConfigError, Settings, load_config, parse_config
from mcpvisor.remembered import CatalogWriter, Remembered, catalog_fingerprint
from mcpvisor.state import CorruptState, StateStore

if TYPE_CHECKING:
    from mcpvisor.pgstore.store import PgStore

logger = logging.getLogger("mcpvisor.tree")
"""The tree's logger: these are the tree's own start-up steps, logged as they were."""


def coerce_config(config: Config | str | Path | Mapping[str, Any]) -> Config:
    if isinstance(config, Config):
        return config
    # A problem in one server's entry makes that server misconfigured; the others run.
    if isinstance(config, str | Path):
        return load_config(config, isolate_servers=True)
    return parse_config(dict(config), isolate_servers=True)


NAMING_NOTES: Final = {
    "prefix": "tool and prompt names are prefixed with the name of the server that provides them.",
    "auto": "tool and prompt names are the servers' own, prefixed with the server's name only where "
            "two servers offer the same name.",
    "none": "tool and prompt names are the servers' own.",
}
"""What the proxy's ``instructions`` say about names, per ``settings.namespacing``."""


def instructions(namespacing: str) -> str:
    """The proxy's ``instructions``: true to the naming in force (no prefix claimed under ``none``)."""
    note = NAMING_NOTES.get(namespacing, NAMING_NOTES["prefix"])
    return f"mcpvisor: one MCP server in front of several; {note}"


async def load_state(store: StateStore, config: Config, toolset: str | None) -> SavedState:
    """The state directory's toolsets at start, with ``toolset`` (if given) recorded as equipped."""
    try:
        saved = await trio.to_thread.run_sync(store.load)
    except (CorruptState, OSError) as exc:
        logger.error("%s; starting without saved toolsets (changing toolsets fails until it is fixed)", exc)
        saved = SavedState(equipped=None, toolsets={}, annotations={})
    if toolset is not None:
        if toolset not in config.toolsets and toolset not in saved.toolsets:
            known = [*config.toolsets, *(n for n in saved.toolsets if n not in config.toolsets)]
            raise ToolsetError("unknown_toolset", f"no toolset named {toolset!r} (--toolset); toolsets: "
                               f"{', '.join(known) or 'none'} (state directory {store.directory})",
                               toolsets=known)
        if saved.equipped != toolset:
            try:
                saved = await trio.to_thread.run_sync(store.set_equipped, toolset)
            except Exception as exc:  # the toolset is still equipped for this run
                logger.warning("could not record the equipped toolset in %s: %s", store.path, exc)
    elif saved.equipped and saved.equipped not in config.toolsets and saved.equipped not in saved.toolsets:
        logger.warning("the equipped toolset %r no longer exists; starting with none equipped",
                       saved.equipped)
    return saved


@asynccontextmanager
async def open_shared(settings: Settings, directory: Path) -> AsyncIterator[PgStore | None]:
    """The PostgreSQL store of ``settings.store`` (``$MCPVISOR_STORE`` applied), migrated, for
    the block; None without one (files and SQLite in ``directory``, as always).

    Raises:
        ConfigError: a store is set but psycopg is not installed.
        mcpvisor.pgstore.StoreError: it cannot be reached, or its schema is newer than ours.
    """
    if settings.store is None:
        yield None
        return
    try:
        from mcpvisor.pgstore.store import open_store
    except ImportError as exc:
        raise ConfigError(f"settings.store is a PostgreSQL URL, which needs the postgres extra "
                          f"(pip install 'mcpvisor[postgres]'): {exc}") from None
    async with open_store(settings.store, state_dir=directory) as shared:
        logger.info("store: PostgreSQL at %s, shared with the other replicas; this replica is %s",
                    shared.shown, shared.replica)
        yield shared


def journal_opener(shared: PgStore | None, payloads: bool) -> Callable[[], Any] | None:
    """Where journal rows go: the shared store's table, or None (the SQLite file)."""
    if shared is None:
        return None
    return lambda: shared.journal_db(payloads=payloads)


def trace_config(cfg: Config) -> telemetry.TelemetryConfig | None:
    """Whether to trace, from the ``OTEL_*`` variables and ``settings.telemetry``.

    Raises:
        ConfigError: an unknown OTLP protocol (naming where it was set).
    """
    tele = cfg.settings.telemetry
    try:
        if tele is None:
            return telemetry.config_from()
        return telemetry.config_from(endpoint=tele.endpoint, protocol=tele.protocol,
                                     service_name=tele.service_name, sample_ratio=tele.sample_ratio,
                                     enabled=tele.enabled)
    except telemetry.TelemetryError as exc:
        raise ConfigError(str(exc), cfg.path) from None


async def recall(catalog: CatalogWriter, config: Config, core: RegistryCore,
                 era_memory: dict[str, str]) -> dict[str, Remembered]:
    """List each eager server's remembered lists (`mcpvisor.remembered`) in ``core`` until it
    lists its own, and note in ``era_memory`` the era it answered in last time. A server whose
    command, args, env, url or headers changed since is not listed from memory. Returns the
    servers listed from memory."""
    listed: dict[str, Remembered] = {}
    try:
        memory = await trio.to_thread.run_sync(catalog.file.load)
    except Exception as exc:  # a cache: start as the first time
        logger.warning("could not read the remembered catalog %s: %s", catalog.file.path, exc)
        return {}
    for spec in config.enabled_servers():
        entry = memory.get(spec.name)
        if spec.lazy or spec.scope != "shared" or entry is None:
            continue
        if entry.fingerprint != catalog_fingerprint(spec):
            logger.info("%s: its remembered lists are of an earlier command, args, env or url; "
                        "not listed until it starts", spec.name)
            continue
        if spec.protocol == "auto" and entry.era:
            era_memory.setdefault(spec.fingerprint(), entry.era)
        if not entry.listable():
            logger.info("%s: its remembered lists are %s; not listed until it starts", spec.name,
                        "private to its authorization" if entry.withheld else "past their ttl")
            continue
        core.remember(spec.name, entry.lists)
        listed[spec.name] = entry
        logger.info("%s: listing %d remembered tools (seen %s) until it is up", spec.name,
                    len(entry.lists.tools), entry.seen)
    return listed
