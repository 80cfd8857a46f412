"""``manage.py iq_cancel``: cancel entries by id (running ones are stopped by their worker), or
every waiting entry of a job or a queue, counted first with ``--dry-run``."""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from django_iq import operations
from django_iq.management.argtypes import add_ids_option, non_empty
from django_iq.management.output import unknown_queue_message


class Command(BaseCommand):
    help = (
        "Cancel django_iq entries by id (waiting entries are deleted; a worker stops those it "
        "runs), or every waiting entry of a job and/or a queue (--job, --queue; --dry-run "
        "counts them first)."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        add_ids_option(parser, "Entry ids (repeatable: --id 1 2 --id 3).", required=False)
        parser.add_argument("--job", type=non_empty, help="Every waiting entry of this job.")
        parser.add_argument("--queue", type=non_empty, help="Every waiting entry in this queue.")
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="With --job/--queue: say how many would be cancelled; change nothing.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        ids: list[int] | None = options["ids"]
        job, queue = options["job"], options["queue"]
        if ids and (job or queue):
            raise CommandError("Give either --id or --job/--queue, not both.")
        if not ids and not (job or queue):
            raise CommandError(
                "Say which entries to cancel: --id N, or --job and/or --queue for every "
                "waiting entry of a job or a queue."
            )
        actor = operations.Actor.of_command("iq_cancel")
        if ids:
            if options["dry_run"]:
                raise CommandError("--dry-run counts the entries of --job/--queue; not --id.")
            outcome = operations.cancel(ids, actor)
        else:
            if queue:
                message = unknown_queue_message([queue])
                if message:
                    raise CommandError(message)
            outcome = operations.cancel_matching(
                actor, job=job, queue=queue, dry_run=options["dry_run"]
            )
        if options["verbosity"]:
            self.stdout.write(outcome.message)
