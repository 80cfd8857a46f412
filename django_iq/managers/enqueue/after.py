"""The enqueue path of entries that wait for their parents (``using(after=...)``): written with
their edges in one transaction, or ended at once when a parent had already failed for good."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from django.db import transaction
from django.utils import timezone

from django_iq.appmodels import iq
from django_iq.managers.attempts import Failure
from django_iq.managers.dependencies import PARENT_FAILED
from django_iq.managers.enqueue.orm import insert_with_orm
from django_iq.options import JobCatalog, JobOptions

if TYPE_CHECKING:
    from django_iq.managers.entries import EntryManager
    from django_iq.models import Entry


def insert_after(
    manager: EntryManager,
    db: str,
    job_name: str,
    options: JobOptions,
    entries: list[Entry],
    jobs: JobCatalog | None,
    join: Callable[[list[Entry]], None] | None = None,
) -> None:
    """Insert ``entries`` waiting for their parents (``options.after``), with the edges, in
    one transaction. A parent that had already failed for good ends them at once as final
    ``ParentFailed`` failures, unless ``on_parent_failure="run"``. ``join`` (a batch's)
    takes the entries as soon as they are written, before any of them can end."""
    run_anyway = options.on_parent_failure == "run"

    def insert() -> None:
        insert_with_orm(db, job_name, options.queue_name, entries, jobs)
        if join is not None:
            join(entries)

    def write() -> None:
        failed = iq.EntryDependency.objects.attach(
            db, entries, options.after or (), run_anyway, insert
        )
        if failed and not run_anyway:
            now = timezone.now()
            failure = Failure(
                exception_class=PARENT_FAILED,
                message=f"Parent entry {failed[0]} had failed for good before this entry "
                "was enqueued with using(after=...).",
                final=True,
                ran=False,
            )
            for entry in entries:
                manager.end_attempt(entry, failure, now=now, using=db, jobs=jobs)

    with transaction.atomic(using=db):
        write()
