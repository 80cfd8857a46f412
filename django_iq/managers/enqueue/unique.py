"""The enqueue path of entries with a unique key (``@job(unique=...)``, ``unique_for``): the
database's unique constraint decides between concurrent callers; a duplicate returns the entry
that holds the key."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from functools import partial
from typing import TYPE_CHECKING

from django.db import IntegrityError, connections, transaction

from django_iq.appmodels import iq
from django_iq.exceptions import QueueNotFound
from django_iq.managers.common import atomic_retrying
from django_iq.managers.enqueue.rows import unsave
from django_iq.options import JobCatalog
from django_iq.queries import enqueue_in_one_statement, supports_single_statement_enqueue
from django_iq.states import EntryState

if TYPE_CHECKING:
    from django_iq.models import Entry

# A unique entry whose key is freed and taken again between our tries is tried this often.
UNIQUE_ENQUEUE_TRIES = 5


def insert_unique(
    db: str,
    job_name: str,
    queue: str,
    entry: Entry,
    jobs: JobCatalog | None,
    window: timedelta | None = None,
) -> Entry:
    """Insert ``entry`` unless an entry holding its unique key exists; return the one
    written, or the one that was there (``is_duplicate``). The database's unique constraint
    decides between concurrent callers; a key freed meanwhile (its entry finished) is
    tried again.

    With a ``window`` (``unique_for``), the key also stays taken for that long after its
    entry finished: ``entry`` then comes back unsaved (pk None) as the duplicate.
    """
    write = partial(_write_unless_taken, db, job_name, queue, entry, jobs)
    for _ in range(UNIQUE_ENQUEUE_TRIES):
        written = write() if window is None else _write_taking_key(db, entry, window, write)
        if written is None:
            entry.is_duplicate = True
            return entry
        if written:
            return entry
        existing = _holding(db, str(entry.unique_key))
        if existing is not None:
            existing.is_duplicate = True
            return existing
        # Neither written nor taken: the queue has no row yet (create it if it is
        # declared, or refuse), or the entry holding the key finished meanwhile.
        iq.Queue.objects.db_manager(db).ensure(queue, jobs)
    raise QueueNotFound(f"Queue {queue!r} was deleted while an entry was enqueued.")


def _write_unless_taken(
    db: str, job_name: str, queue: str, entry: Entry, jobs: JobCatalog | None
) -> bool:
    """Write ``entry`` unless its unique key is taken (or, on PostgreSQL, its queue has no
    row); return whether it was written."""
    if not supports_single_statement_enqueue(db):
        return _save_unless_taken(db, job_name, queue, entry, jobs)
    rows = enqueue_in_one_statement(db, queue, job_name, [entry], unique=True)
    if not rows:
        return False
    ((entry.pk, entry.state),) = rows
    entry._state.adding, entry._state.db = False, db
    return True


def _write_taking_key(
    db: str, entry: Entry, window: timedelta, write: Callable[[], bool]
) -> bool | None:
    """``write()`` ``entry`` and take its key's row for ``window``, in one transaction;
    return None, with nothing written, while the key's window runs, else what ``write``
    returned.

    The entry comes first, then the key's row, the order in which a finish removes an entry
    and starts its window: an enqueue waiting on a finishing entry's key (the unique
    constraint) goes on once the window is committed, and then finds it.
    """
    keys = iq.UniqueKey.objects.db_manager(db)
    key = str(entry.unique_key)

    def write_and_take() -> bool | None:
        unsave(entry)
        # A plain read first: inside a running window nothing is written at all.
        if keys.window_running(key):
            return None
        if not write():
            return False
        if keys.take(key, window):
            return True
        transaction.set_rollback(True, using=db)
        return None

    # Run again if it loses a deadlock: on MariaDB, inserts of one key waiting for the
    # delete of the entry that held it (or for an insert rolled back here) take shared
    # locks on it and then wait on each other; the losers, run again, find the window.
    written = atomic_retrying(db, write_and_take, "enqueue")
    if written is None:
        unsave(entry)
    return written


def _save_unless_taken(
    db: str, job_name: str, queue: str, entry: Entry, jobs: JobCatalog | None
) -> bool:
    iq.Queue.objects.db_manager(db).ensure(queue, jobs)
    if iq.DisabledJob.objects.using(db).filter(job_name=job_name).exists():
        entry.state = EntryState.DISABLED
    try:
        with transaction.atomic(using=db):
            entry.save(force_insert=True, using=db)
    except IntegrityError:
        unsave(entry)
        return False
    return True


def _holding(db: str, unique_key: str) -> Entry | None:
    """The entry holding ``unique_key``, as committed now. Inside a transaction on MariaDB
    set to repeatable read (Django's default there is read committed) a plain read sees the
    transaction's snapshot, which may predate the entry that refused ours: a locking read
    sees past it (its row lock ends with the caller's transaction)."""
    rows = iq.Entry.objects.using(db).filter(unique_key=unique_key)
    if connections[db].vendor != "mysql" or not connections[db].in_atomic_block:
        return rows.first()
    return rows.select_for_update().first()
