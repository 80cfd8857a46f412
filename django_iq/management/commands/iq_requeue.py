"""``manage.py iq_requeue``: requeue failed entries by error record id or by filters."""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from django_iq import operations
from django_iq.management.argtypes import add_ids_option, non_empty
from django_iq.management.output import unknown_queue_message
from django_iq.models import EntryError
from django_iq.wording import plural

FILTERS = {"job": "--job", "exception": "--exception", "queue": "--queue"}
# The EntryError field each filter matches, as EntryError.objects.requeue_matching does.
FIELDS = {"job": "job_name", "exception": "exception_class", "queue": "queue_id"}


# How many stored exception classes a hint proposes at most.
MAX_SUGGESTIONS = 5


def failed_entries(count: int) -> str:
    """``"1 failed entry"``, ``"12 failed entries"``."""
    return plural(count, "failed entry", "failed entries")


def exception_hint(exception: str, filters: dict[str, str]) -> str:
    """When ``--exception`` matched nothing: the stored exception classes of the failures the
    other filters select whose path ends with ``.exception`` (``DoesNotExist`` ->
    ``shop.models.Order.DoesNotExist``); else, for a name without a module, that classes are
    stored with theirs."""
    others = {FIELDS[key]: value for key, value in filters.items() if key != "exception"}
    found = list(
        EntryError.objects.failed()
        .filter(exception_class__iendswith=f".{exception}", **others)
        .order_by("exception_class")
        .values_list("exception_class", flat=True)
        .distinct()[: MAX_SUGGESTIONS + 1]
    )
    if not found and "." in exception:
        return ""
    if not found:
        return (
            " Exception classes are stored with their module, as in builtins.ValueError; no "
            f"failed entry{' matching the other filters' if others else ''} has one ending in "
            f".{exception}."
        )
    shown = " or ".join(f"--exception {name}" for name in found[:MAX_SUGGESTIONS])
    more = " (more classes end with it)" if len(found) > MAX_SUGGESTIONS else ""
    return f" Exception classes are stored with their module: try {shown}{more}."


class Command(BaseCommand):
    help = (
        "Requeue failed django_iq entries: a fresh pending entry for each final failure not yet "
        "requeued, chosen by error record id, by job / exception / queue, or all of them."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        add_ids_option(
            parser,
            "Error record ids, as the admin and the API show them (repeatable).",
            required=False,
        )
        parser.add_argument("--job", type=non_empty, help="Only failures of this job name.")
        parser.add_argument(
            "--exception",
            type=non_empty,
            help="Only failures with this exception class path, e.g. builtins.ValueError.",
        )
        parser.add_argument("--queue", type=non_empty, help="Only failures in this queue.")
        parser.add_argument(
            "--all-failed",
            action="store_true",
            help="Requeue every failed entry (needed when no --id or filter is given).",
        )
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="Show how many would be requeued; change nothing.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        ids: list[int] | None = options["ids"]
        filters = {key: options[key] for key in FILTERS if options[key] is not None}
        given = ", ".join(FILTERS[key] for key in filters)
        if ids and (filters or options["all_failed"]):
            other = given or "--all-failed"
            raise CommandError(f"Give either --id or {other}, not both.")
        if options["all_failed"] and filters:
            raise CommandError(
                f"--all-failed requeues every failed entry and cannot be combined with {given}; "
                "leave it out to requeue only the matching ones."
            )
        if not ids and not filters and not options["all_failed"]:
            raise CommandError(
                "Say which failed entries to requeue: --id N, one or more of --job, --exception "
                "and --queue, or --all-failed to requeue every failed entry."
            )
        if "queue" in filters:
            message = unknown_queue_message([filters["queue"]])
            if message:
                raise CommandError(message)
        if ids:
            self._requeue_ids(list(dict.fromkeys(ids)), options)
        else:
            self._requeue_matching(filters, options)

    def _requeue_ids(self, ids: list[int], options: dict[str, Any]) -> None:
        found = set(EntryError.objects.filter(pk__in=ids).values_list("pk", flat=True))
        missing = [pk for pk in ids if pk not in found]
        if missing:
            raise CommandError(
                f"No error record with id {', '.join(map(str, missing))}; nothing was requeued. "
                "Ids are error record ids: the id column of the admin's failed entries or of "
                "the API's /errors/ (pruned after ERROR_RETENTION_SECONDS)."
            )
        if options["dry_run"]:
            count = EntryError.objects.failed().filter(pk__in=ids).count()
            report = f"Would requeue {failed_entries(count)}."
        else:
            report = operations.requeue(ids, operations.Actor.of_command("iq_requeue")).message
        if options["verbosity"]:
            self.stdout.write(report)

    def _requeue_matching(self, filters: dict[str, str], options: dict[str, Any]) -> None:
        if options["dry_run"]:
            lookups = {FIELDS[key]: value for key, value in filters.items()}
            count = EntryError.objects.failed().filter(**lookups).count()
            detail = operations.matching_detail(
                job=filters.get("job"),
                exception_class=filters.get("exception"),
                queue=filters.get("queue"),
            )
            report = f"Would requeue {failed_entries(count)}{detail}."
        else:
            actor = operations.Actor.of_command("iq_requeue")
            if filters:
                outcome = operations.requeue_matching(
                    actor,
                    job=filters.get("job"),
                    exception_class=filters.get("exception"),
                    queue=filters.get("queue"),
                )
            else:
                outcome = operations.requeue_all(actor)
            count = outcome.done_count
            report = outcome.message
        exception = filters.get("exception", "")
        if not count and exception:
            report += exception_hint(exception, filters)
        if options["verbosity"]:
            self.stdout.write(report)
