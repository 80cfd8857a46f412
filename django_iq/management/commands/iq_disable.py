"""``manage.py iq_disable JOB...``: stop claiming a job's entries until it is enabled again."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from django_iq.exceptions import JobNotRegistered
from django_iq.models import DisabledJob, Entry
from django_iq.registry import get_job
from django_iq.wording import plural

logger = logging.getLogger(__name__)


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
            try:
                get_job(name)
            except JobNotRegistered as exc:
                raise CommandError(str(exc)) from None
        already = set(
            DisabledJob.objects.filter(job_name__in=names).values_list("job_name", flat=True)
        )
        for name in names:
            count = Entry.objects.disable(name)
            logger.info("job disabled job=%s entries=%s source=iq_disable", name, count)
            if options["verbosity"]:
                state = "was already disabled" if name in already else "disabled"
                self.stdout.write(
                    f"Job {name} {state}: {plural(count, 'waiting entry', 'waiting entries')} "
                    "disabled."
                )
