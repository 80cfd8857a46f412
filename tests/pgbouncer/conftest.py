"""A PgBouncer of the test's own in transaction pooling mode, in front of the test database.

Each test gets a fresh ``pgbouncer`` process with its own ini file in a temporary directory,
listening on a free local port, with every database (``*``) pointing at the test's PostgreSQL
server; it is stopped when the test ends. Tests skip when the binary is absent.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.db import connection

from tests.processes import command_env, database_url

PGBOUNCER = shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin:/usr/bin")

# The ini file docs/howto/deploy.md shows, with the port, server and user filled in.
INI = """\
[databases]
* = host={host} port={port}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {listen_port}
unix_socket_dir =
pool_mode = transaction
auth_type = trust
auth_file = {auth_file}
max_client_conn = 500
default_pool_size = {pool_size}
ignore_startup_parameters = extra_float_digits
"""
POOL_SIZE = 20


@dataclass
class Pooler:
    """A running pgbouncer: its port, and the URLs and environments that go through it."""

    port: int
    process: subprocess.Popen[bytes]
    log: Path

    def url(self) -> str:
        """The test database's URL, through the pooler."""
        s = connection.settings_dict
        auth = s["USER"] + (f":{s['PASSWORD']}" if s.get("PASSWORD") else "")
        return f"postgres://{auth}@127.0.0.1:{self.port}/{s['NAME']}"

    def env(self, *, listen_directly: bool = False, **extra: str) -> dict[str, str]:
        """``command_env`` for a subprocess whose database is reached through the pooler;
        with ``listen_directly``, its workers LISTEN on a direct connection."""
        if listen_directly:
            extra["DJANGO_IQ_TEST_LISTEN_URL"] = database_url()
        return command_env(DATABASE_URL=self.url(), DJANGO_IQ_TEST_POOLED="1", **extra)

    def connect(self, **kwargs: Any) -> psycopg.Connection[Any]:
        """A plain client connection through the pooler."""
        return psycopg.connect(self.url().replace("postgres://", "postgresql://"), **kwargs)

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def pooler(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pooler]:
    """Start a pgbouncer in transaction mode in front of the test database; stop it after."""
    if PGBOUNCER is None:
        pytest.skip("needs the pgbouncer binary (apt-get install pgbouncer)")
    s = connection.settings_dict
    directory = tmp_path_factory.mktemp("pgbouncer")
    auth_file = directory / "userlist.txt"
    auth_file.write_text(f'"{s["USER"]}" "{s.get("PASSWORD") or ""}"\n')
    ini = directory / "pgbouncer.ini"
    port = _free_port()
    ini.write_text(
        INI.format(
            host=s["HOST"] or "127.0.0.1",
            port=s["PORT"] or 5432,
            listen_port=port,
            auth_file=auth_file,
            pool_size=POOL_SIZE,
        )
    )
    # pgbouncer refuses to run as root: it is then told to run as nobody, who must read both.
    command = [PGBOUNCER, *(["-u", "nobody"] if os.geteuid() == 0 else []), str(ini)]
    for path, mode in ((directory, 0o755), (ini, 0o644), (auth_file, 0o644)):
        path.chmod(mode)
    log = directory / "pgbouncer.log"
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    pooler = Pooler(port, process, log)
    try:
        deadline = time.monotonic() + 15
        while True:
            if process.poll() is not None:
                pytest.fail(f"pgbouncer exited with {process.returncode}:\n{pooler.output()}")
            try:
                with pooler.connect(connect_timeout=2) as probe:
                    probe.execute("SELECT 1")
                break
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    pytest.fail(f"pgbouncer did not answer on port {port}:\n{pooler.output()}")
                time.sleep(0.1)  # pgbouncer is starting
        yield pooler
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
