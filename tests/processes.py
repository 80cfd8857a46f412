"""Start runworker as real OS processes against the test database, and wait on them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from django.db import connections

ROOT = Path(__file__).resolve().parent.parent
_started: list[Command] = []


def database_url(name: str | None = None, alias: str = "default") -> str:
    """Return a DATABASE_URL naming the database the running test uses (the test database) as
    ``alias``, or the database ``name`` of the same server."""
    connection = connections[alias]
    s = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{name or s['NAME']}"
    scheme = {"postgresql": "postgres", "mysql": "mysql"}[connection.vendor]
    auth = s["USER"] + (f":{s['PASSWORD']}" if s.get("PASSWORD") else "")
    return f"{scheme}://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or ''}/{name or s['NAME']}"


def command_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "DATABASE_URL": database_url(),
            "DJANGO_SETTINGS_MODULE": "tests.settings",
            "PYTHONPATH": str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""),
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.update(extra)
    return env


def manage(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run ``python -m django <args>`` to completion against the test database."""
    return subprocess.run(
        [sys.executable, "-m", "django", *args],
        cwd=ROOT,
        env=command_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


class Command:
    """A ``python -m django <args>`` subprocess whose output goes to a file that can be read live."""

    def __init__(
        self, *args: str, env: dict[str, str] | None = None, prefix: Sequence[str] = ()
    ) -> None:
        """``prefix``: a command that runs the process, as ``unshare ...`` does."""
        self.log = tempfile.NamedTemporaryFile("w+", prefix="iq-command-", suffix=".log")
        self.process = subprocess.Popen(
            [*prefix, sys.executable, "-m", "django", *args],
            cwd=ROOT,
            env=env or command_env(),
            stdout=self.log,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.final_output: str | None = None
        _started.append(self)

    @property
    def pid(self) -> int:
        return self.process.pid

    def output(self) -> str:
        if self.final_output is not None:
            return self.final_output
        return Path(self.log.name).read_text()

    def poll(self) -> int | None:
        return self.process.poll()

    def send_signal(self, signum: int) -> None:
        self.process.send_signal(signum)

    def kill_hard(self) -> None:
        """SIGKILL the whole process group, as a crash or an OOM kill would."""
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()

    def finish(self, timeout: float = 120.0) -> tuple[int, str]:
        """Wait for the process; kill its group if it overruns. Return (exit code, output)."""
        try:
            code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill_hard()
            raise AssertionError(
                f"process overran {timeout}s; output:\n{self.output()[-4000:]}"
            ) from None
        self.final_output = self.output()
        self.log.close()
        return code, self.final_output


def start_command(*args: str, env: dict[str, str] | None = None) -> Command:
    """Start ``python -m django <args>`` with the test settings."""
    return Command(*args, env=env)


def finish(command: Command, timeout: float = 120.0) -> tuple[int, str]:
    return command.finish(timeout)


def kill_leftovers() -> None:
    """SIGKILL every command a test started and left running (a failed test must not leak)."""
    while _started:
        command = _started.pop()
        if command.poll() is None:
            command.kill_hard()
        command.log.close()


def lease_holder() -> str:
    """The name of the process holding the leader lease ('' when nobody does)."""
    from django_iq.models import LeaderLease

    lease = LeaderLease.objects.current()
    return lease.holder if lease else ""


def pid_of(name: str) -> int:
    """The process id in a worker's or leader's name (``<name>:<pid>:<random part>``, a
    leader's with ``:leader`` after it)."""
    return int(name.removesuffix(":leader").rsplit(":", 2)[1])


def elect_one_of_two_leaders(env: dict[str, str] | None = None) -> tuple[Command, Command, str]:
    """Start two ``runleader`` candidates, one after the other; once both run, return the
    elected one, the standby and the elected one's name."""
    from django_iq.models import Worker
    from tests.conftest import wait_until

    first = start_command("runleader", env=env)
    wait_until(lease_holder, message="a leader to be elected")
    second = start_command("runleader", env=env)
    wait_until(
        lambda: Worker.objects.filter(role="leader", stopped_at__isnull=True).count() == 2,
        message="both candidates",
    )
    active_name = lease_holder()
    active, standby = (first, second) if pid_of(active_name) == first.pid else (second, first)
    return active, standby, active_name


def stop_cleanly(*commands: Command, timeout: float = 30.0) -> None:
    """SIGTERM each command, then assert each exits 0 within ``timeout`` seconds."""
    for command in commands:
        command.send_signal(signal.SIGTERM)
    for command in commands:
        code, output = command.finish(timeout)
        assert code == 0, output[-3000:]
