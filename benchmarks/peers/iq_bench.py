"""django_iq's side of the peer benchmark, run in django_iq's own environment.

    python benchmarks/peers/iq_bench.py --db-url postgres://postgres@127.0.0.1:5432/iq_peer_django_iq
    python benchmarks/peers/iq_bench.py --variant tasks --db-url ...   # through IQBackend

Started by ``python -m benchmarks.peers``, which creates and drops the database; prints one
JSON object (see ``harness``). Workers are ``manage.py runworker --processes P --threads T``
(P forked worker processes of T processing threads each), with django_iq's default settings.
"""

from __future__ import annotations

import argparse
import os
import sys

import harness


class IQ:
    """django_iq through ``@job`` (``variant=""``) or Django's Tasks framework (``"tasks"``)."""

    def __init__(self, args: argparse.Namespace) -> None:
        os.environ["IQ_PEER_DB_URL"] = args.db_url
        os.environ["DJANGO_SETTINGS_MODULE"] = "iq_settings"
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        import iq_jobs

        from django_iq import enqueue_many
        from django_iq.models import Entry, EntryError, RunOutcome

        self.jobs = iq_jobs
        self.enqueue_many = enqueue_many
        self.tables = [Entry._meta.db_table, RunOutcome._meta.db_table, EntryError._meta.db_table]
        self.tasks = args.variant == "tasks"
        self.label: str = "django_iq, Tasks backend" if self.tasks else "django_iq"
        self.bulk_api: str | None = None if self.tasks else "enqueue_many()"
        self.worker_env = harness.worker_env(
            DJANGO_SETTINGS_MODULE="iq_settings", IQ_PEER_DB_URL=args.db_url
        )

    def _sql(self, statement: str) -> int:
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute(statement)
            return int(cursor.fetchone()[0]) if cursor.description else 0

    def reset(self) -> None:
        self._sql(f"TRUNCATE {', '.join(self.tables)} CASCADE")

    def enqueue_one(self) -> None:
        if self.tasks:
            self.jobs.noop_task.enqueue()
        else:
            self.jobs.noop.enqueue()

    def enqueue_bulk(self, count: int) -> None:
        self.enqueue_many(self.jobs.noop, [((), {}) for _ in range(count)])

    def preenqueue(self, count: int) -> None:
        if not self.tasks:
            self.enqueue_bulk(count)
            return
        from django.db import transaction

        with transaction.atomic():
            for _ in range(count):
                self.jobs.noop_task.enqueue()

    def pending(self) -> int:
        return self._sql(f"SELECT count(*) FROM {self.tables[0]}")  # noqa: S608 (model table)

    def failed(self) -> int:
        return self._sql(f"SELECT count(*) FROM {self.tables[2]}")  # noqa: S608 (model table)

    def worker_commands(self, processes: int, threads: int) -> list[list[str]]:
        command = [sys.executable, "-m", "django", "runworker", "-v", "0"]
        return [[*command, "--processes", str(processes), "--threads", str(threads)]]

    def enqueue_probe(self, enqueued_at: float, path: str) -> None:
        if self.tasks:
            self.jobs.probe_task.enqueue(enqueued_at, path)
        else:
            self.jobs.probe.enqueue(enqueued_at, path)


if __name__ == "__main__":
    raise SystemExit(harness.main(IQ))
