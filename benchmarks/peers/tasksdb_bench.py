"""django-tasks-db's side of the peer benchmark, run in its own virtualenv.

    .bench-venvs/tasksdb/bin/python benchmarks/peers/tasksdb_bench.py --db-url postgres://...

Started by ``python -m benchmarks.peers``, which creates the virtualenv from
``requirements-tasksdb.txt`` and creates and drops the database; prints one JSON object (see
``harness``). The Django Tasks framework has no bulk enqueue, and ``db_worker`` runs one task
at a time in one thread, so only the Px1 shapes run: P ``db_worker`` processes.
"""

from __future__ import annotations

import argparse
import os
import sys

import harness


class TasksDB:
    """django-tasks-db's ``DatabaseBackend`` and ``manage.py db_worker``, defaults."""

    label: str = "django-tasks-db"
    bulk_api: str | None = None

    def __init__(self, args: argparse.Namespace) -> None:
        os.environ["IQ_PEER_DB_URL"] = args.db_url
        os.environ["DJANGO_SETTINGS_MODULE"] = "tasksdb_settings"
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        import tasksdb_tasks
        from django_tasks_db.models import DBTaskResult

        self.tasks = tasksdb_tasks
        self.table = DBTaskResult._meta.db_table
        self.worker_env = harness.worker_env(
            DJANGO_SETTINGS_MODULE="tasksdb_settings", IQ_PEER_DB_URL=args.db_url
        )

    def _count(self, statement: str) -> int:
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute(statement)
            return int(cursor.fetchone()[0])

    def reset(self) -> None:
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute(f"TRUNCATE {self.table}")

    def enqueue_one(self) -> None:
        self.tasks.noop.enqueue()

    def enqueue_bulk(self, count: int) -> None:
        raise NotImplementedError("the Tasks framework has no bulk enqueue")

    def preenqueue(self, count: int) -> None:
        from django.db import transaction

        with transaction.atomic():
            for _ in range(count):
                self.tasks.noop.enqueue()

    def pending(self) -> int:
        where = "status IN ('READY', 'RUNNING')"
        return self._count(f"SELECT count(*) FROM {self.table} WHERE {where}")  # noqa: S608

    def failed(self) -> int:
        where = "status = 'FAILED'"
        return self._count(f"SELECT count(*) FROM {self.table} WHERE {where}")  # noqa: S608

    def worker_commands(self, processes: int, threads: int) -> list[list[str]] | None:
        if threads != 1:
            return None  # one task at a time per process; no threads to give it
        command = [sys.executable, "-m", "django", "db_worker", "-v", "0"]
        return [command] * processes

    def enqueue_probe(self, enqueued_at: float, path: str) -> None:
        self.tasks.probe.enqueue(enqueued_at, path)


if __name__ == "__main__":
    raise SystemExit(harness.main(TasksDB))
