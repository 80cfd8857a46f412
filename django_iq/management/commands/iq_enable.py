"""``manage.py iq_enable JOB...``: claim a disabled job's entries again."""

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
        for name in names:
            count = Entry.objects.enable(name)
            logger.info("job enabled job=%s entries=%s source=iq_enable", name, count)
            if options["verbosity"]:
                state = "enabled" if name in disabled else "was not disabled"
                self.stdout.write(
                    f"Job {name} {state}: {plural(count, 'entry', 'entries')} enabled."
                )
