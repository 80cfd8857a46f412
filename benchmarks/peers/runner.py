"""The orchestrator's plumbing: virtualenvs, throwaway databases, per-system scripts, pgbench.

Everything started here runs in its own session (process group) and is stopped, group and all,
when it returns, times out, fails or is interrupted. Databases are only ever ``iq_peer_*``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
VENVS = ROOT / ".bench-venvs"
DB_NAME = re.compile(r"^iq_peer_[a-z0-9_]+$")


@dataclass(frozen=True)
class Peer:
    """One row of the table: which script runs it, in which virtualenv (None: this one)."""

    key: str
    script: str
    venv: str | None
    database: bool = True
    variant: str = ""


SYSTEMS = {
    "django_iq": Peer("django_iq", "iq_bench.py", None),
    "django_iq_tasks": Peer("django_iq_tasks", "iq_bench.py", None, variant="tasks"),
    "tasksdb": Peer("tasksdb", "tasksdb_bench.py", "tasksdb"),
    "procrastinate": Peer("procrastinate", "procrastinate_bench.py", "procrastinate"),
    "celery": Peer("celery", "celery_bench.py", "celery", database=False),
}


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def ensure_venv(name: str) -> Path:
    """Create ``.bench-venvs/<name>`` from ``requirements-<name>.txt`` unless it is current."""
    requirements = HERE / f"requirements-{name}.txt"
    venv = VENVS / name
    python = venv / "bin" / "python"
    stamp = venv / ".requirements.sha256"
    digest = hashlib.sha256(requirements.read_bytes()).hexdigest()
    if python.exists() and stamp.exists() and stamp.read_text().strip() == digest:
        return python
    if not python.exists():
        log(f"creating {venv}")
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    log(f"installing {requirements.name} into {venv}")
    pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, "-r", str(requirements)], check=True, stdout=sys.stderr, timeout=900)
    stamp.write_text(digest + "\n")
    return python


@contextlib.contextmanager
def shielded() -> Iterator[None]:
    """Hold off SIGINT and SIGTERM while cleaning up, so a second Ctrl-C cannot cut it short."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _admin(pg_url: str) -> Any:
    import psycopg

    return psycopg.connect(f"{pg_url.rstrip('/')}/postgres", autocommit=True, connect_timeout=10)


@contextlib.contextmanager
def scratch_database(pg_url: str, name: str) -> Iterator[str]:
    """Create database ``name`` (an ``iq_peer_*`` name), yield its URL, drop it afterwards."""
    if not DB_NAME.match(name):
        raise ValueError(f"refusing to manage database {name!r}: not an iq_peer_* name")
    with _admin(pg_url) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{pg_url.rstrip('/')}/{name}"
    finally:
        with shielded(), _admin(pg_url) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _stop_group(proc: subprocess.Popen[str], grace: float) -> None:
    """SIGTERM the process group (the script stops its workers), then SIGKILL what is left."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(wait)
        except subprocess.TimeoutExpired:
            continue
        # The script is gone; its workers share its group, make sure none outlived it.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        return


def run_script(python: Path, script: str, args: list[str], timeout: float) -> dict[str, Any]:
    """Run one system's script; its stderr passes through, its stdout is one JSON object."""
    proc = subprocess.Popen(
        [str(python), str(HERE / script), *args],
        cwd=HERE,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"{script} did not finish within {timeout:.0f} s"}
    finally:
        if proc.poll() is None:
            with shielded():
                _stop_group(proc, grace=30.0)
    lines = [line for line in out.splitlines() if line.startswith("{")]
    if not lines:
        return {"error": f"{script} exited {proc.returncode} without a result"}
    result: dict[str, Any] = json.loads(lines[-1])
    return result


PGBENCH_SCRIPT = """\
INSERT INTO iq_peer_queue (payload) VALUES ('{}');
DELETE FROM iq_peer_queue
 WHERE id = (SELECT id FROM iq_peer_queue ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED);
"""


def pgbench_limit(pg_url: str, seconds: int, clients: tuple[int, ...] = (2, 4)) -> dict[str, Any]:
    """One job's minimal SQL (enqueue, then claim and delete the oldest) with pgbench."""
    parts = urlsplit(pg_url)
    result: dict[str, Any] = {"error": None, "seconds": seconds, "clients": {}}
    with (
        scratch_database(pg_url, "iq_peer_pgbench") as url,
        tempfile.TemporaryDirectory(prefix="iq-peer-pgbench-") as tmp,
    ):
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(
                "CREATE TABLE iq_peer_queue (id bigserial PRIMARY KEY, payload jsonb NOT NULL,"
                " created_at timestamptz NOT NULL DEFAULT now())"
            )
        script = Path(tmp) / "job.sql"
        script.write_text(PGBENCH_SCRIPT)
        for count in clients:
            command = ["pgbench", "-n", "-h", parts.hostname or "127.0.0.1"]
            command += ["-p", str(parts.port or 5432), "-U", parts.username or "postgres"]
            command += [
                "-f",
                str(script),
                "-c",
                str(count),
                "-j",
                str(min(count, os.cpu_count() or 1)),
            ]
            command += ["-T", str(seconds), "iq_peer_pgbench"]
            log(f"[pgbench] {count} clients, {seconds} s")
            proc = subprocess.Popen(
                command,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,
            )
            try:
                out, _ = proc.communicate(timeout=seconds + 60)
            except subprocess.TimeoutExpired:
                out = ""
            finally:
                if proc.poll() is None:
                    with shielded():
                        _stop_group(proc, grace=5.0)
            match = re.search(r"tps = ([\d.]+) \(without initial", out)
            result["clients"][str(count)] = float(match.group(1)) if match else None
            if not match:
                result["error"] = f"pgbench with {count} clients: {out[-500:]}"
    return result
