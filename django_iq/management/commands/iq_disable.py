"""``manage.py iq_disable JOB...``: stop claiming a job's entries until it is enabled again."""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from django_iq import operations


class Command(BaseCommand):
    help = (
        "Disable django_iq jobs: their waiting entries, and any enqueued later, are not claimed "
        "until the job is enabled. Entries already running finish."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "jobs",
            nargs="+",
            metavar="JOB",
            help="Registered job names, e.g. shop.jobs.send_receipt.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        names = list(dict.fromkeys(options["jobs"]))
        for name in names:
            problem = operations.unknown_job(name)
            if problem is not None:
                raise CommandError(problem)
        outcome = operations.disable(names, operations.Actor.of_command("iq_disable"))
        if options["verbosity"]:
            self.stdout.write(outcome.message)
