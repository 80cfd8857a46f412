"""``manage.py runworker``: parse and validate options, configure logging, run the worker."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from django.core import checks
from django.core.management.base import BaseCommand, CommandError
from django.db import router

from django_iq.exceptions import InvalidProcessName, QueueNotFound
from django_iq.management.argtypes import seconds, whole
from django_iq.management.logconfig import configure_logging
from django_iq.models import Entry, Queue
from django_iq.preflight import startup_problem
from django_iq.process import MAX_NAME_LENGTH, check_name
from django_iq.registry import catalog
from django_iq.reloading import run_with_reload
from django_iq.supervisor import run_supervisor
from django_iq.worker import WorkerProcess


class Command(BaseCommand):
    help = "Run a django_iq worker: claim entries from the database and run their jobs."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--queues", help="Comma-separated queues to serve (default: all).")
        parser.add_argument("--threads", type=whole(1, 512), help="Processing threads per process.")
        parser.add_argument(
            "--scheduling-threads", type=whole(1, 16), help="Scheduling threads per process."
        )
        parser.add_argument(
            "--processes", type=whole(1, 256), default=1, help="Worker processes (default 1)."
        )
        parser.add_argument(
            "--burst", action="store_true", help="Exit 0 once nothing is claimable."
        )
        parser.add_argument(
            "--reload",
            action="store_true",
            help="Development: start the worker again when a Python file it loaded changes "
            "(Django's autoreloader), after a graceful stop. One process; not with --burst, "
            "--processes or recycling.",
        )
        parser.add_argument(
            "--name",
            help=f"Prefix of the process's name (default: the node name), at most "
            f"{MAX_NAME_LENGTH} characters; the pid and a random part are appended.",
        )
        parser.add_argument(
            "--max-jobs-per-child",
            type=whole(1, 1_000_000_000),
            help="Replace a worker process after it has run this many entries (1: one process "
            "per entry). Runs under the --processes supervisor.",
        )
        parser.add_argument(
            "--max-memory-per-child",
            type=whole(1, 10_000_000),
            help="Replace a worker process once its resident memory passes this many MiB, after "
            "its current jobs. Runs under the --processes supervisor.",
        )
        parser.add_argument(
            "--shutdown-grace-seconds",
            type=seconds(0, 86_400),
            help="Wait this long for running jobs on stop (0 to 86400).",
        )

    def execute(self, *args: Any, **options: Any) -> str | None:
        if options.get("reload"):
            # The system checks import the URLconf, and any jobs module it imports: with
            # --reload they run in the reloading child before each start, where a module that
            # fails to import is watched until it is fixed, as runserver does.
            options["skip_checks"] = True
        return super().execute(*args, **options)

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            check_name(options["name"])
        except InvalidProcessName as exc:
            raise CommandError(f"--name: {exc}") from None
        queues = [q.strip() for q in (options["queues"] or "").split(",") if q.strip()] or None
        if options["queues"] is not None and not queues:
            raise CommandError("--queues needs at least one queue name.")
        grace = options["shutdown_grace_seconds"]
        recycled = options["max_jobs_per_child"] or options["max_memory_per_child"]
        if options["reload"]:
            clashing = [
                flag
                for flag, given in (
                    ("--burst", options["burst"]),
                    ("--processes", options["processes"] > 1),
                    ("--max-jobs-per-child", options["max_jobs_per_child"]),
                    ("--max-memory-per-child", options["max_memory_per_child"]),
                )
                if given
            ]
            if clashing:
                raise CommandError(
                    f"--reload runs one worker process; it cannot be combined with "
                    f"{', '.join(clashing)}."
                )
        if options["verbosity"] >= 1:
            configure_logging(logging.DEBUG if options["verbosity"] >= 3 else logging.INFO)
        problem = startup_problem()
        if problem:
            raise CommandError(problem)
        for name in queues or []:
            try:
                Queue.objects.ensure(name, catalog)
            except QueueNotFound as exc:
                raise CommandError(str(exc)) from None
        # Database checks (SQLite's transaction mode) are not part of the default command checks.
        for message in checks.run_checks(
            tags=[checks.Tags.database], databases=[router.db_for_write(Entry)]
        ):
            if message.is_serious(checks.ERROR):
                raise CommandError(str(message))
            self.stderr.write(self.style.WARNING(str(message)))
        worker_options: dict[str, Any] = {
            "queues": queues,
            "processing_threads": options["threads"],
            "scheduling_threads": options["scheduling_threads"],
            "name": options["name"],
            "shutdown_grace_seconds": grace,
            "max_jobs": options["max_jobs_per_child"],
            "max_memory_mb": options["max_memory_per_child"],
        }
        if options["reload"]:
            code = run_with_reload(
                lambda: WorkerProcess(**worker_options),
                before_start=lambda: self.check(display_num_errors=False),
            )
        elif options["processes"] > 1 or recycled:
            code = run_supervisor(
                processes=options["processes"], burst=options["burst"], **worker_options
            )
        else:
            code = WorkerProcess(burst=options["burst"], **worker_options).run()
        if code:
            raise SystemExit(code)
