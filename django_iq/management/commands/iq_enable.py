"""``manage.py iq_enable JOB...``: claim a disabled job's entries again."""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from django_iq import operations
from django_iq.exceptions import JobNotRegistered
from django_iq.models import DisabledJob
from django_iq.registry import get_job


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
        disabled = set(
            DisabledJob.objects.filter(job_name__in=names).values_list("job_name", flat=True)
        )
        for name in names:
            # A job removed from the code may still be disabled: enabling it must stay possible.
            if name in disabled:
                continue
            try:
                get_job(name)
            except JobNotRegistered as exc:
                raise CommandError(str(exc)) from None
        outcome = operations.enable(names, operations.Actor.of_command("iq_enable"))
        if options["verbosity"]:
            self.stdout.write(outcome.message)
