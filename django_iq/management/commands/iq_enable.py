"""``manage.py iq_enable JOB...``: claim a disabled job's entries again."""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from django_iq import operations


class Command(BaseCommand):
    help = (
        "Enable disabled django_iq jobs: each disabled entry becomes pending again, or stays "
        "deferred until its run_at."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "jobs", nargs="+", metavar="JOB", help="Job names, e.g. shop.jobs.send_receipt."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        names = list(dict.fromkeys(options["jobs"]))
        for name in names:
            # A job removed from the code may still be disabled: enabling it stays possible.
            problem = operations.unknown_job(name, enabling=True)
            if problem is not None:
                raise CommandError(problem)
        outcome = operations.enable(names, operations.Actor.of_command("iq_enable"))
        if options["verbosity"]:
            self.stdout.write(outcome.message)
