"""The shared store of several replicas, in PostgreSQL (``settings.store``, ``$MCPVISOR_STORE``).

Without a store URL mcpvisor keeps everything in files and SQLite, as always. With a
``postgresql://`` (or ``postgres://``) URL, every replica pointing at it shares the state
(user-built toolsets, the equipped toolset, annotations, schema pins), the remembered
catalog, the upstream OAuth tokens (encrypted with ``$MCPVISOR_STORE_KEY``) and the call
journal (one table, each row naming its replica), and hears of each other's changes
through ``LISTEN/NOTIFY`` (`mcpvisor.pgstore.follow`).

This module holds what needs no driver (so a files-only install, the config checks and
the menu never import psycopg): the variables' names, the URL checks and the redaction of
its password, the replica's name, and the errors. The rest:

* `mcpvisor.pgstore.link`: one connection per purpose, used from worker threads;
* `mcpvisor.pgstore.schema`: the numbered migrations, applied under an advisory lock;
* `mcpvisor.pgstore.data`: the state, catalog and token stores;
* `mcpvisor.pgstore.journal`: the journal's table;
* `mcpvisor.pgstore.store`: `PgStore`, the one object a supervisor or a command holds;
* `mcpvisor.pgstore.follow`: the listener thread and how a change is applied here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Final
from urllib.parse import urlsplit

from mcpvisor._config_types import REPLICA_ENV, STORE_ENV, is_store_url, scheme_of
from mcpvisor.state import StateError

__all__ = [
    "KEY_ENV",
    "REPLICA_ENV",
    "STORE_ENV",
    "StoreError",
    "StoreKeyError",
    "StoreUnreachable",
    "is_store_url",
    "replica_name",
    "scheme_of",
    "shown_url",
]

KEY_ENV: Final = "MCPVISOR_STORE_KEY"
"""The secret the upstream OAuth tokens are encrypted with in PostgreSQL (every replica the same)."""


class StoreError(StateError):
    """The PostgreSQL store cannot do what was asked; the message names no secret."""


class StoreUnreachable(StoreError):
    """The store cannot be reached (down, refused, timed out, the connection lost)."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"the store at {shown_url(url)} is unreachable: {reason}")
        self.reason = reason


class StoreKeyError(StoreError):
    """``$MCPVISOR_STORE_KEY`` is missing, too short, or not the key the tokens were sealed with."""


def shown_url(url: str) -> str:
    """``url`` as logs, errors and status views show it: ``postgresql://host:port/db``
    (no user, no password, no query: any of them may carry a secret)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or "localhost"
        port = parts.port or 5432
    except ValueError:
        return "postgresql://(unparsable URL)"
    host = f"[{host}]" if ":" in host else host
    return f"postgresql://{host}:{port}{parts.path or '/'}"


def replica_name(env: Mapping[str, str] | None = None) -> str:
    """``$MCPVISOR_REPLICA``, else the host name (what a Kubernetes pod is named)."""
    value = (os.environ if env is None else env).get(REPLICA_ENV, "").strip()
    import socket  # here: only a store (or a session id's prefix) needs the host's name

    return value or socket.gethostname()
