"""Shared by the dashboard tests: a ``mcpvisor serve --transport http`` subprocess with
real fixture servers, its dashboard token, and what the page and API are asked."""

from __future__ import annotations

import json
import stat
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import httpx2

from tests.helpers import PY, SERVERS_DIR, everything, flaky, write_config
from tests.security.proxy import Proxy, running_proxy

SECRET: Final = "s3cret-value-0123456789"
"""An env value that must never leave the proxy."""


def fleet(tmp_path: Path, **settings: Any) -> Path:
    """alpha (everything.py, with a secret in its env) and beta (flaky.py)."""
    return write_config(tmp_path, {
        "alpha": everything("--name", "alpha", env={"API_KEY": SECRET}),
        "beta": flaky("--name", "beta"),
    }, **settings)


def flaky_entry(name: str, *flags: str) -> dict[str, Any]:
    args = [str(SERVERS_DIR / "flaky.py"), "--name", name, *flags]
    return {"command": PY, "args": args, "protocol": "legacy"}


@dataclass
class Dashboard:
    proxy: Proxy
    base: str
    token: str
    token_file: Path
    config: Path

    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def file_entry(self, name: str) -> Any:
        return json.loads(self.config.read_text())["mcpServers"].get(name)


@asynccontextmanager
async def serving(
    tmp_path: Path, config: Path, env: Mapping[str, str] | None = None
) -> AsyncIterator[Dashboard]:
    state = tmp_path / "state"
    async with running_proxy(config, "--transport", "http", "--port", "0", "--state-dir", str(state),
                             env={"MCPVISOR_TOKEN": "", **(env or {})}) as proxy:
        token_file = state / "dashboard-token"
        token = token_file.read_text().strip()
        base = f"http://127.0.0.1:{proxy.port}"
        yield Dashboard(proxy, base, token, token_file, config)


def private(path: Path) -> bool:
    return stat.S_IMODE(path.stat().st_mode) == 0o600


async def server_state(http: httpx2.AsyncClient, base: str, name: str) -> str:
    reply = await http.get(f"{base}/api/servers/{name}")
    assert reply.status_code == 200, reply.text
    state: str = reply.json()["status"]["state"]
    return state
