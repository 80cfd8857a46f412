"""PostgreSQL's enqueue paths: a batch of up to ``ENQUEUE_BATCH_SIZE`` entries in one statement
(queue check, disabled-job check, insert and ``NOTIFY``: ``queries.enqueue_in_one_statement``),
and ``COPY`` for ``COPY_ENQUEUE_MIN_ROWS`` entries or more (``queries.enqueue_by_copy``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.db import transaction

from django_iq.appmodels import iq
from django_iq.exceptions import QueueNotFound
from django_iq.managers.common import ENQUEUE_BATCH_SIZE
from django_iq.options import JobCatalog
from django_iq.queries import COPY_ENQUEUE_MIN_ROWS, enqueue_by_copy, enqueue_in_one_statement

if TYPE_CHECKING:
    from django_iq.models import Entry


def insert_in_statements(
    db: str,
    job_name: str,
    queue: str,
    entries: list[Entry],
    jobs: JobCatalog | None,
) -> None:
    """Insert ``entries`` of ``job_name`` into ``queue``: one statement for a batch, several in
    one transaction, or ``COPY``; a queue with no row yet is created if it is declared."""
    size = ENQUEUE_BATCH_SIZE

    def insert(start: int) -> bool:
        batch = entries[start : start + size]
        rows = enqueue_in_one_statement(db, queue, job_name, batch)
        return took(batch, rows)

    def took(batch: list[Entry], rows: list[tuple[int, str]] | None) -> bool:
        if rows is None:
            return False
        for entry, (pk, state) in zip(batch, rows, strict=True):
            entry.pk, entry.state = pk, state
            entry._state.adding, entry._state.db = False, db
        return True

    def insert_all() -> bool:
        if len(entries) <= size:
            return insert(0)
        if len(entries) >= COPY_ENQUEUE_MIN_ROWS:
            with transaction.atomic(using=db):
                return took(entries, enqueue_by_copy(db, queue, job_name, entries))
        with transaction.atomic(using=db):
            for start in range(0, len(entries), size):
                if not insert(start):
                    return False
        return True

    if not insert_all():
        # The queue has no row yet: create it if it is declared (or refuse), then insert.
        iq.Queue.objects.db_manager(db).ensure(queue, jobs)
        if not insert_all():
            raise QueueNotFound(f"Queue {queue!r} was deleted while entries were enqueued.")
