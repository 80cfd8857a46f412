"""The enqueue path through Django's ORM (SQLite, MariaDB, and entries written with their edges
or a batch's block): the queue's row ensured, disabled jobs' entries written ``disabled``, then
one ``bulk_create``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django_iq.appmodels import iq
from django_iq.managers.common import ENQUEUE_BATCH_SIZE
from django_iq.options import JobCatalog
from django_iq.states import EntryState

if TYPE_CHECKING:
    from django_iq.models import Entry


def insert_with_orm(
    db: str,
    job_name: str,
    queue: str,
    entries: list[Entry],
    jobs: JobCatalog | None,
) -> None:
    """Insert ``entries`` of ``job_name`` into ``queue`` (created if it is declared), in the
    caller's transaction."""
    iq.Queue.objects.db_manager(db).ensure(queue, jobs)
    if iq.DisabledJob.objects.using(db).filter(job_name=job_name).exists():
        for entry in entries:
            entry.state = EntryState.DISABLED
    iq.Entry.objects.using(db).bulk_create(entries, batch_size=ENQUEUE_BATCH_SIZE)
