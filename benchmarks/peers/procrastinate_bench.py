"""procrastinate's side of the peer benchmark, run in its own virtualenv.

    .bench-venvs/procrastinate/bin/python benchmarks/peers/procrastinate_bench.py --db-url postgres://...

Started by ``python -m benchmarks.peers``, which creates the virtualenv from
``requirements-procrastinate.txt`` and creates and drops the database; prints one JSON object
(see ``harness``). Plain procrastinate (no Django), its defaults: a PxT drain is P
``procrastinate worker --concurrency T`` processes (the sync task runs in a thread of the
worker's event loop executor), LISTEN/NOTIFY on; bulk enqueue is ``Task.batch_defer()``.
"""

from __future__ import annotations

import argparse
import os
import sys

import harness


class Procrastinate:
    label: str = "procrastinate"
    bulk_api: str | None = "Task.batch_defer()"

    def __init__(self, args: argparse.Namespace) -> None:
        os.environ["IQ_PEER_DB_URL"] = args.db_url
        import procrastinate_app
        import psycopg

        self.tasks = procrastinate_app
        self.db = psycopg.connect(args.db_url, autocommit=True)
        procrastinate_app.app.open()
        procrastinate_app.app.schema_manager.apply_schema()
        self.worker_env = harness.worker_env(IQ_PEER_DB_URL=args.db_url)

    def _count(self, statement: str) -> int:
        row = self.db.execute(statement).fetchone()
        return int(row[0]) if row else 0

    def reset(self) -> None:
        self.db.execute("TRUNCATE procrastinate_jobs CASCADE")

    def enqueue_one(self) -> None:
        self.tasks.noop.defer()

    def enqueue_bulk(self, count: int) -> None:
        self.tasks.noop.batch_defer(*({} for _ in range(count)))

    def preenqueue(self, count: int) -> None:
        self.enqueue_bulk(count)

    def pending(self) -> int:
        return self._count(
            "SELECT count(*) FROM procrastinate_jobs WHERE status IN ('todo', 'doing')"
        )

    def failed(self) -> int:
        return self._count("SELECT count(*) FROM procrastinate_jobs WHERE status = 'failed'")

    def worker_commands(self, processes: int, threads: int) -> list[list[str]]:
        command = [sys.executable, "-m", "procrastinate", "--app=procrastinate_app.app"]
        command += ["--log-level", "warning", "worker", "--concurrency", str(threads)]
        return [command] * processes

    def enqueue_probe(self, enqueued_at: float, path: str) -> None:
        self.tasks.probe.defer(enqueued_at=enqueued_at, path=path)


if __name__ == "__main__":
    raise SystemExit(harness.main(Procrastinate))
