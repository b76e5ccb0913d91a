"""Settings that come from the environment, and where the state directory is: one place.

* `state_dir` — the state directory: ``--state-dir``, else ``$MCPVISOR_STATE_DIR``,
  else ``settings.stateDir``, else the platform's user state dir
  (``~/.local/state/mcpvisor`` on Linux). The proxy, the ``toolset`` and ``status``
  commands and the control socket all ask here, so they always agree.
* `with_env_overrides` — ``settings`` with ``$MCPVISOR_EXPOSURE`` and ``$MCPVISOR_STORE``
  applied and checked.

Light to import (no trio, no MCP SDK): the CLI's registry commands use it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Final

import msgspec

from mcpvisor._config_types import STORE_ENV, is_store_url, scheme_of
from mcpvisor.actors.core.toolsets import MODES
from mcpvisor.config import ConfigError, Settings

__all__ = ["APP_NAME", "EXPOSURE_ENV", "STATE_DIR_ENV", "state_dir", "with_env_overrides"]

APP_NAME: Final = "mcpvisor"
"""The application name the platform's user directories are named after."""

STATE_DIR_ENV: Final = "MCPVISOR_STATE_DIR"
"""Overrides where the state directory is (below ``--state-dir``, above ``settings.stateDir``)."""

EXPOSURE_ENV: Final = "MCPVISOR_EXPOSURE"
"""Overrides ``settings.exposure`` (issue: toolsets and configuration mode)."""


def state_dir(
    explicit: str | os.PathLike[str] | None = None,
    *,
    configured: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
) -> Path:
    """The state directory: ``explicit`` (``--state-dir``), else ``$MCPVISOR_STATE_DIR``,
    else ``configured`` (``settings.stateDir``), else the platform's user state dir
    (``~/.local/state/mcpvisor`` on Linux).

    An empty value counts as unset; ``~`` is expanded. The directory is not created here.

    Args:
        explicit: The ``--state-dir`` option, if given.
        configured: ``settings.stateDir`` of the config file, if any.
        env: The environment to consult; default :data:`os.environ`.
    """
    if explicit is not None and os.fspath(explicit) != "":
        return Path(explicit).expanduser()
    value = (os.environ if env is None else env).get(STATE_DIR_ENV)
    if value:
        return Path(value).expanduser()
    if configured is not None and os.fspath(configured) != "":
        return Path(configured).expanduser()
    import platformdirs  # here: ~4 ms at every start, and a state dir given by name never needs it

    # appauthor=False: no "mcpvisor\mcpvisor" doubling on Windows.
    return Path(platformdirs.user_state_dir(APP_NAME, appauthor=False))


def with_env_overrides(settings: Settings, env: Mapping[str, str] | None = None) -> Settings:
    """``settings`` with ``$MCPVISOR_EXPOSURE`` and ``$MCPVISOR_STORE`` applied (each wins over
    its setting) and checked.

    Raises:
        ConfigError: the exposure is not one of ``menu``, ``all``, ``discovery``, or
            ``$MCPVISOR_STORE`` is not a PostgreSQL URL.
    """
    environ = os.environ if env is None else env
    value = environ.get(EXPOSURE_ENV, "").strip()
    source = f"${EXPOSURE_ENV}" if value else "settings.exposure"
    value = value or settings.exposure
    if value not in MODES:
        raise ConfigError(f"{source} is {value!r}; use one of: {', '.join(MODES)}")
    if value != settings.exposure:
        settings = msgspec.structs.replace(settings, exposure=value)
    store = environ.get(STORE_ENV, "").strip()
    if store and store != settings.store:
        if not is_store_url(store):  # the value is not shown: a mistyped URL may still hold a password
            raise ConfigError(f"${STORE_ENV} is {scheme_of(store)}, not a PostgreSQL URL "
                              "(postgresql://user@host:port/database); unset it to keep the state in files")
        settings = msgspec.structs.replace(settings, store=store)
    return settings
