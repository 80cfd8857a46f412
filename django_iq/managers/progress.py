"""``Entry.objects.report_progress``: the one write of a running job's progress.

The run that reported it writes it (``django_iq.progress_reports`` decides when); the write is fenced
by the run's group lock, so a run whose lock was released (recovered after its worker was
declared dead, or its entry ended and the lock deleted) updates nothing.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from django.db import router, transaction
from django.db.models import QuerySet

from django_iq.appmodels import iq

if TYPE_CHECKING:
    from django_iq.managers.entries import EntryManager
    from django_iq.models import Entry


def report_progress(
    manager: EntryManager,
    entry_id: int,
    lock_id: int | None,
    *,
    done: float,
    total: float | None,
    note: str,
    reported_at: datetime,
    skip_locked: bool = False,
) -> bool | None:
    """Store ``entry_id``'s progress, as reported at ``reported_at``, if the run holding the
    group lock ``lock_id`` still holds it (None: no lock to check, for callers holding none).
    Return whether a row was written: False for an entry that ended, was deleted, or is no
    longer under that lock. One ``UPDATE``, in the caller's transaction if it has one.

    ``skip_locked`` (a worker's heartbeat, which must not wait): the row is locked first,
    skipping it if another transaction holds it, and None says so (nothing written)."""
    db = router.db_for_write(manager.model)
    rows = manager.on(db).filter(pk=entry_id)
    if lock_id is not None:
        # The lock's key is the entry's lock key while this run holds it; a lock taken again
        # by another worker has another id.
        rows = rows.filter(
            lock_key__in=iq.GroupLock.objects.using(db).filter(pk=lock_id).values("key")
        )
    if skip_locked:
        with transaction.atomic(using=db):
            if rows.select_for_update(skip_locked=True).values_list("pk", flat=True).first():
                return _update(rows, done, total, note, reported_at)
        return None if manager.on(db).filter(pk=entry_id).exists() else False
    return _update(rows, done, total, note, reported_at)


def _update(
    rows: QuerySet[Entry],
    done: float,
    total: float | None,
    note: str,
    reported_at: datetime,
) -> bool:
    written = rows.update(
        progress_done=done,
        progress_total=total,
        progress_note=note,
        progress_at=reported_at,
    )
    return written > 0
