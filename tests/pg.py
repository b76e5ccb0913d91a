"""A throw-away PostgreSQL cluster for the shared-store tests (Debian's postgresql-15).

`cluster` makes one: ``initdb`` into a fresh directory, ``postgres`` on a free loopback
port with its socket in that directory, a ``mcpvisor`` database; stopped (fast shutdown,
then SIGKILL after a bound) and removed at the end. PostgreSQL refuses to run as root, so
when the tests run as root (CI) both commands run as the ``postgres`` user through
``runuser`` in a directory it owns. `Cluster.restart` stops and starts the same cluster on
the same port (the outage tests).

Without the binaries the tests skip, except with ``CI=true``, where a missing PostgreSQL
is a failure (tests/setup.sh installs it).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pytest

BIN: Final = Path("/usr/lib/postgresql/15/bin")
START_BOUND_S: Final = 60.0
"""initdb plus start-up on a busy 2-core box (measured: about 1.5 s idle)."""
STOP_BOUND_S: Final = 20.0
PASSWORD: Final = "pg-test-Secret-9d41c"
"""The role's password: the tests check it never reaches an output or a log."""


def require_postgres() -> None:
    """Skip (fail with ``CI=true``) when Debian's PostgreSQL 15 is not installed."""
    if (BIN / "postgres").exists() and (BIN / "initdb").exists():
        return
    message = f"PostgreSQL 15 is not installed ({BIN}); run tests/setup.sh"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _as_owner(argv: list[str]) -> list[str]:
    """``argv`` run as the ``postgres`` user when we are root (PostgreSQL refuses root)."""
    return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv


@dataclass
class Cluster:
    directory: Path
    port: int
    running: bool = False

    @property
    def data(self) -> Path:
        return self.directory / "data"

    @property
    def url(self) -> str:
        return f"postgresql://mcpvisor:{PASSWORD}@127.0.0.1:{self.port}/mcpvisor"

    def _ctl(self, *args: str) -> None:
        # Without the session's process tag: the server outlives each test on purpose (one
        # cluster per session); `cluster` stops it at the end, and the leak check would not.
        env = {k: v for k, v in os.environ.items() if k != "MCPVISOR_TEST_TAG"}
        subprocess.run(_as_owner([str(BIN / "pg_ctl"), "-D", str(self.data), *args]), check=True,
                       capture_output=True, timeout=START_BOUND_S + STOP_BOUND_S, env=env)

    def start(self) -> None:
        """Start it and wait until it accepts connections (``pg_ctl -w``)."""
        options = (f"-k {self.directory} -p {self.port} -h 127.0.0.1 -c fsync=off "
                   "-c synchronous_commit=off -c full_page_writes=off")
        self._ctl("-l", str(self.directory / "postgres.log"), "-o", options, "-w",
                  "-t", str(int(START_BOUND_S)), "start")
        self.running = True

    def stop(self) -> None:
        """Fast shutdown (sessions ended, port freed), immediate if that takes too long."""
        if not self.running:
            return
        try:
            self._ctl("-m", "fast", "-w", "-t", str(int(STOP_BOUND_S)), "stop")
        except subprocess.CalledProcessError:
            self._ctl("-m", "immediate", "-w", "stop")
        self.running = False

    def restart(self) -> None:
        self.stop()
        self.start()

    def psql(self, sql: str, database: str = "mcpvisor") -> str:
        """Run ``sql`` as the superuser over the socket in ``database``; the output, unaligned."""
        done = subprocess.run(
            _as_owner([str(BIN / "psql"), "-h", str(self.directory), "-p", str(self.port), "-U", "postgres",
                       "-d", database, "-At", "-v", "ON_ERROR_STOP=1", "-c", sql]),
            check=True, capture_output=True, text=True, timeout=START_BOUND_S)
        return done.stdout.strip()


@contextmanager
def cluster() -> Iterator[Cluster]:
    """A fresh cluster with a ``mcpvisor`` role (password `PASSWORD`) owning a ``mcpvisor`` database."""
    require_postgres()
    directory = Path(tempfile.mkdtemp(prefix="mcpvisor-pg-"))
    if os.geteuid() == 0:
        shutil.chown(directory, "postgres", "postgres")
    directory.chmod(0o700)
    pg = Cluster(directory, _free_port())
    try:
        subprocess.run(_as_owner([str(BIN / "initdb"), "-D", str(pg.data), "-U", "postgres", "-A", "trust",
                                  "--no-sync", "-E", "UTF8"]),
                       check=True, capture_output=True, timeout=START_BOUND_S)
        with (pg.data / "pg_hba.conf").open("w") as hba:
            # The socket is the superuser's (the fixture's own commands); TCP asks a password.
            hba.write("local all postgres trust\nhost all all 127.0.0.1/32 scram-sha-256\n")
        pg.start()
        subprocess.run(_as_owner([str(BIN / "psql"), "-h", str(directory), "-p", str(pg.port),
                                  "-U", "postgres", "-d", "postgres", "-v", "ON_ERROR_STOP=1", "-c",
                                  f"CREATE ROLE mcpvisor LOGIN PASSWORD '{PASSWORD}'",
                                  "-c", "CREATE DATABASE mcpvisor OWNER mcpvisor"]),
                       check=True, capture_output=True, timeout=START_BOUND_S)
        yield pg
    finally:
        pg.stop()
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres() -> Iterator[Cluster]:
    """One cluster for the whole session (each test uses its own tables' rows or resets them)."""
    with cluster() as pg:
        yield pg


def fresh_database(pg: Cluster, name: str) -> str:
    """A new empty database ``name`` owned by the ``mcpvisor`` role; its URL (dropped first if it exists)."""
    pg.psql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    pg.psql(f'CREATE DATABASE "{name}" OWNER mcpvisor')
    return pg.url.rsplit("/", 1)[0] + f"/{name}"
