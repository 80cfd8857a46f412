"""``manage.py iq_compact [--queue Q] [--job NAME]``: merge the waiting entries of groups now."""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from django_iq import operations
from django_iq.exceptions import InvalidJobOptions, JobNotRegistered
from django_iq.management.argtypes import non_empty
from django_iq.management.output import refuse_unknown_queues


class Command(BaseCommand):
    help = (
        "Compact django_iq queues: fold the waiting entries of each group of a job declared "
        "with @job(group_by=..., merge=...) into one entry, as the leader does every "
        "COMPACT_INTERVAL_SECONDS. Prints what it merged."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--queue",
            dest="queues",
            type=non_empty,
            action="append",
            metavar="QUEUE",
            help="Only this queue (repeatable); all queues when left out.",
        )
        parser.add_argument("--job", type=non_empty, help="Only this job's entries (its name).")

    def handle(self, *args: Any, **options: Any) -> None:
        queues: list[str] | None = options["queues"]
        refuse_unknown_queues(queues)
        try:
            outcome = operations.compact(
                operations.Actor.of_command("iq_compact"), queues=queues, job=options["job"]
            )
        except (JobNotRegistered, InvalidJobOptions) as exc:
            raise CommandError(f"{exc} Nothing was compacted.") from None
        if options["verbosity"]:
            self.stdout.write(outcome.message)
