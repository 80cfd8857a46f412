"""A PostgreSQL cluster of the suite's own, on a free port, that a scenario may stop and start:
the machine's shared server is never touched."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from django.db import connection

from tests.processes import ROOT, command_env


def _binary(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if found:
        return found[-1]
    on_path = shutil.which(name)
    if on_path is None:
        raise FileNotFoundError(f"{name} not found (install PostgreSQL's server binaries)")
    return on_path


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class OwnCluster:
    """``initdb`` in a temporary directory and ``pg_ctl`` on a free port, run as the
    ``postgres`` user when the suite runs as root (the server refuses to run as root).

    ``server_settings`` are given to the server at every start (``max_connections=300``), so a
    restart keeps them."""

    def __init__(self, **server_settings: object) -> None:
        self.server_settings = server_settings
        self.directory = Path(tempfile.mkdtemp(prefix="iq-faults-pg-"))
        self.data = self.directory / "data"
        self.port = _free_port()
        self.as_postgres = os.geteuid() == 0
        if self.as_postgres:
            shutil.chown(self.directory, "postgres", "postgres")

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        command = list(args)
        if self.as_postgres:
            command = ["runuser", "-u", "postgres", "--", *command]
        return subprocess.run(command, capture_output=True, text=True, check=check, timeout=120)

    def create(self, database: str) -> str:
        """Initialise, start, create ``database``; return its DATABASE_URL."""
        self._run(_binary("initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust")
        self.start()
        self._run(
            _binary("createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", database
        )
        return f"postgres://postgres@127.0.0.1:{self.port}/{database}"

    def start(self) -> None:
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.directory}"
        for name, value in self.server_settings.items():
            options += f" -c {name}={value}"
        self._run(
            _binary("pg_ctl"),
            "-D",
            str(self.data),
            "-o",
            options,
            "-l",
            str(self.directory / "server.log"),
            "-w",
            "start",
        )

    def stop(self, mode: str = "fast") -> None:
        self._run(_binary("pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop", check=False)

    def remove(self) -> None:
        self.stop("immediate")
        shutil.rmtree(self.directory, ignore_errors=True)


def run_python(url: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``python <args>`` with the test settings against ``url``, to completion."""
    return subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env=command_env(DATABASE_URL=url),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@contextmanager
def own_database(database: str, **server_settings: object) -> Iterator[tuple[OwnCluster, str]]:
    """A cluster of the suite's own with ``database`` migrated; the test's own connection reads
    it while the block runs, then goes back to the test database. Yield the cluster and the
    database's URL; the cluster is removed afterwards."""
    own = OwnCluster(**server_settings)
    try:
        url = own.create(database)
        migrate = run_python(url, "-m", "django", "migrate", "--verbosity", "0")
        assert migrate.returncode == 0, migrate.stderr[-3000:]
        saved = dict(connection.settings_dict)
        connection.close()
        connection.settings_dict.update(HOST="127.0.0.1", PORT=str(own.port), NAME=database)
        try:
            yield own, url
        finally:
            connection.close()
            connection.settings_dict.update(saved)
    finally:
        own.remove()
