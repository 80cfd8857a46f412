"""``manage.py iq_cancel --id N...``: delete waiting entries; entries being run are refused."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from django.core.management.base import BaseCommand

from django_iq.management.argtypes import positive_int
from django_iq.models import Entry
from django_iq.wording import plural

logger = logging.getLogger(__name__)


class Command(BaseCommand):
    help = (
        "Cancel django_iq entries by id: waiting or deferred entries are deleted; entries a "
        "worker is running are skipped."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--id",
            dest="ids",
            type=positive_int,
            action="extend",
            nargs="+",
            required=True,
            metavar="N",
            help="Entry ids (repeatable: --id 1 2 --id 3).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        ids: list[int] = list(dict.fromkeys(options["ids"]))
        cancelled, running = Entry.objects.cancel_returning(ids)
        done = {entry.pk for entry in cancelled}
        missing = [pk for pk in ids if pk not in done and pk not in running]
        for entry in cancelled:
            logger.info(
                "entry cancelled entry=%s job=%s queue=%s source=iq_cancel",
                entry.pk,
                entry.job_name,
                entry.queue_id,
            )
        if not options["verbosity"]:
            return
        report = f"Cancelled {plural(len(cancelled), 'entry', 'entries')}"
        report += f": {_ids(sorted(done))}." if cancelled else "."
        if running:
            report += f" Skipped {len(running)} being run by a worker: {_ids(running)}."
        if missing:
            report += (
                f" Not found: {_ids(missing)} (finished, failed for good or already cancelled)."
            )
        self.stdout.write(report)


def _ids(ids: list[int]) -> str:
    return ", ".join(str(pk) for pk in ids)
