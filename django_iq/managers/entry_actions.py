"""What operators and the leader do to waiting entries (``Entry.objects.promote_due``,
``run_now``, ``cancel``, ``cancel_returning``, ``disable``, ``enable``) and the waiting times
the scheduler and the dashboard read (``waiting_times``)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from django.db import router, transaction
from django.db.models import Min
from django.db.models.functions import Greatest
from django.utils import timezone

from django_iq.appmodels import iq
from django_iq.managers.common import atomic_retrying, lock_in_order
from django_iq.managers.outcome_records import keeps_outcomes
from django_iq.options import JobCatalog
from django_iq.queries import (
    CANCEL_PREFIX,
    NOTIFY_CHANNEL,
    notify,
    notify_ended,
    notify_ready,
)
from django_iq.states import WAITING, EntryState, OutcomeStatus

if TYPE_CHECKING:
    from django_iq.managers.entries import EntryManager
    from django_iq.managers.entry_states import EntryQuerySet
    from django_iq.models import Entry


def promote_due(manager: EntryManager, now: datetime | None = None, limit: int = 1000) -> int:
    """Make deferred entries whose run_at has come ``pending``; return how many."""
    now = now or timezone.now()
    db = router.db_for_write(manager.model)
    with transaction.atomic(using=db):
        due = list(
            manager.on(db)
            .due(now)
            .order_by("run_at")
            .select_for_update(skip_locked=True)
            .values_list("pk", "queue_id")[:limit]
        )
        if not due:
            return 0
        promoted = (
            manager.on(db)
            .filter(pk__in=[pk for pk, _ in due], state=EntryState.INITIAL)
            .update(state=EntryState.PENDING)
        )
        notify_ready(db, [queue for _, queue in due])
        return promoted


def run_now(manager: EntryManager, ids: Iterable[int]) -> int:
    """Make deferred entries ``pending`` at once; return how many changed."""
    db = router.db_for_write(manager.model)
    wanted = list(ids)

    def write() -> int:
        locked = lock_in_order(manager.on(db).filter(state=EntryState.INITIAL), wanted)
        rows = manager.on(db).filter(pk__in=locked)
        changed = rows.update(state=EntryState.PENDING, run_at=timezone.now())
        if changed:
            notify_ready(db, list(rows.values_list("queue_id", flat=True).distinct()))
        return changed

    return atomic_retrying(db, write, "run_now")


def cancel(
    manager: EntryManager, ids: Iterable[int], jobs: JobCatalog | None = None
) -> tuple[int, int]:
    """Delete the given entries unless a worker is running them.

    Return ``(cancelled, skipped)``: entries whose group lock is held are refused, since a
    worker is computing them. Who cancelled is the caller's to record (the admin and the API
    write Django's admin log).
    """
    cancelled, refused = cancel_returning(manager, ids, jobs)
    return len(cancelled), len(refused)


def cancel_returning(
    manager: EntryManager, ids: Iterable[int], jobs: JobCatalog | None = None
) -> tuple[list[Entry], list[int]]:
    """Cancel as ``cancel`` does; return the entries deleted and the ids refused as running.

    For callers that record what they cancelled (the API writes an admin log entry per
    entry). Ids that match no entry are in neither list. Each cancelled entry leaves a
    ``cancelled`` outcome record (unless its job keeps none, as ``jobs`` tells).
    """
    return _end_unstarted(manager, ids, jobs, OutcomeStatus.CANCELLED, "cancel")


def cancel_or_request(
    manager: EntryManager, ids: Iterable[int], jobs: JobCatalog | None = None
) -> tuple[list[Entry], list[int]]:
    """Cancel these entries: those no worker holds end at once, as ``cancel`` ends them; for
    those a worker holds (running, or waiting in its claim) a cancel is requested
    (``cancel_requested_at``), which the worker carries out (see ``django_iq.cancels``),
    announced at once on PostgreSQL. Return the entries ended and the ids requested; ids that
    match no entry are in neither."""
    db = router.db_for_write(manager.model)
    wanted = sorted(set(ids))

    def write() -> tuple[list[Entry], list[int]]:
        now = timezone.now()
        ended, held = _end_unstarted_in_transaction(
            manager, db, wanted, jobs, OutcomeStatus.CANCELLED, now
        )
        if held:
            manager.on(db).filter(pk__in=held, cancel_requested_at__isnull=True).update(
                cancel_requested_at=now
            )
            notify(db, NOTIFY_CHANNEL, [f"{CANCEL_PREFIX}{pk}" for pk in held])
        return ended, held

    return atomic_retrying(db, write, "cancel")


def _unheld(manager: EntryManager, db: str) -> EntryQuerySet:
    """The entries of ``db`` no worker holds: their group lock is not held."""
    return manager.on(db).exclude(lock_key__in=iq.GroupLock.objects.using(db).values("key"))


def waiting_matching(
    manager: EntryManager, *, job_name: str | None = None, queue: str | None = None
) -> EntryQuerySet:
    """The entries of ``job_name`` and/or ``queue`` that wait: no worker holds them (their
    group lock is not held). What ``cancel_waiting_matching`` cancels, and counts first."""
    if not job_name and not queue:
        raise ValueError("waiting_matching() needs a job name or a queue.")
    rows = _unheld(manager, router.db_for_write(manager.model))
    if job_name:
        rows = rows.filter(job_name=job_name)
    if queue:
        rows = rows.filter(queue_id=queue)
    return rows


def cancel_waiting_matching(
    manager: EntryManager,
    *,
    job_name: str | None = None,
    queue: str | None = None,
    jobs: JobCatalog | None = None,
    batch_size: int = 1000,
) -> int:
    """Cancel every waiting entry of ``job_name`` and/or ``queue`` (``waiting_matching``), in
    transactions of ``batch_size``, as ``cancel`` does; entries a worker holds are left. Return
    how many were cancelled."""
    total = 0
    after = 0
    while True:
        rows = waiting_matching(manager, job_name=job_name, queue=queue).filter(pk__gt=after)
        ids = list(rows.order_by("pk").values_list("pk", flat=True)[:batch_size])
        if not ids:
            return total
        ended, _ = _end_unstarted(manager, ids, jobs, OutcomeStatus.CANCELLED, "cancel")
        total += len(ended)
        after = ids[-1]


def end_requested_cancels(
    manager: EntryManager, jobs: JobCatalog | None = None, limit: int = 1000
) -> int:
    """End the entries whose cancel was requested while a worker held them and that no worker
    holds now (their claim ended before it came to them, or their group's lock went), as
    ``cancel`` ends a waiting entry. At most ``limit``; return how many ended."""
    db = router.db_for_write(manager.model)
    requested = _unheld(manager, db).filter(cancel_requested_at__isnull=False).order_by("pk")
    ids = list(requested.values_list("pk", flat=True)[:limit])
    if not ids:
        return 0
    ended, _ = _end_unstarted(manager, ids, jobs, OutcomeStatus.CANCELLED, "cancel")
    return len(ended)


def expire_due(
    manager: EntryManager,
    now: datetime | None = None,
    jobs: JobCatalog | None = None,
    limit: int = 1000,
) -> int:
    """End entries past their expiry (``expires``) that have not started: each leaves an
    ``expired`` outcome record, counts as failed in its batch, and ends its dependants that do
    not run on a parent's failure. Entries a worker holds are left: one still waiting in a
    claim is ended by the worker when it comes to it, one already running started in time.
    At most ``limit`` per call, the longest expired first; return how many ended."""
    now = now or timezone.now()
    db = router.db_for_write(manager.model)
    # Entries a worker holds are left out here, not only refused below: a backlog of them
    # would otherwise take every batch, and those behind it would never be looked at.
    due = _unheld(manager, db).filter(expires_at__lte=now).order_by("expires_at", "pk")
    ids = list(due.values_list("pk", flat=True)[:limit])
    if not ids:
        return 0
    ended, _ = _end_unstarted(manager, ids, jobs, OutcomeStatus.EXPIRED, "expire", now=now)
    return len(ended)


def _end_unstarted(
    manager: EntryManager,
    ids: Iterable[int],
    jobs: JobCatalog | None,
    status: OutcomeStatus,
    what: str,
    now: datetime | None = None,
) -> tuple[list[Entry], list[int]]:
    """End the given entries without running them (``status``: cancelled or expired), unless
    a worker holds them; return the entries ended and the ids refused as held.

    The rows are locked first and the group locks read after, in a statement of its own: a
    claim committed meanwhile is seen and its entries are refused, and no worker can claim a
    locked row before the delete (SQLite serializes writers instead)."""
    db = router.db_for_write(manager.model)
    wanted = sorted(set(ids))

    def write() -> tuple[list[Entry], list[int]]:
        return _end_unstarted_in_transaction(
            manager, db, wanted, jobs, status, now or timezone.now()
        )

    return atomic_retrying(db, write, what)


def _end_unstarted_in_transaction(
    manager: EntryManager,
    db: str,
    ids: list[int],
    jobs: JobCatalog | None,
    status: OutcomeStatus,
    now: datetime,
) -> tuple[list[Entry], list[int]]:
    """``_end_unstarted``'s work, in the caller's transaction."""
    rows = list(manager.on(db).filter(pk__in=ids).order_by("pk").select_for_update())
    held = set(
        iq.GroupLock.objects.using(db)
        .filter(key__in={entry.lock_key for entry in rows})
        .values_list("key", flat=True)
    )
    ended = [entry for entry in rows if entry.lock_key not in held]
    if ended:
        end_unstarted_rows(db, ended, status, jobs, now)
    return ended, [entry.pk for entry in rows if entry.lock_key in held]


def end_unstarted_rows(
    db: str,
    entries: Sequence[Entry],
    status: OutcomeStatus,
    jobs: JobCatalog | None,
    now: datetime,
    *,
    records: bool = True,
) -> None:
    """In the caller's transaction, holding the rows: delete ``entries`` that never started
    (or whose run was cancelled) and write what their end means: the outcome records
    (``status``; ``records`` False: the caller writes them), their batches' failed counts,
    their dependants' end or release, the waiters' notification."""
    ids = [entry.pk for entry in entries]
    iq.Entry.objects.using(db).filter(pk__in=ids).delete()
    iq.Batch.objects.members_failed(db, [entry.batch_id for entry in entries])
    why = "was cancelled" if status == OutcomeStatus.CANCELLED else "expired before it started"
    iq.EntryDependency.objects.parents_ended(db, ids, failure=why, now=now, jobs=jobs)
    if records:
        iq.RunOutcome.objects.db_manager(db).record_unstarted(
            [entry for entry in entries if keeps_outcomes(entry, jobs)], now, status
        )
    notify_ended(db, ids)


def mark_awaited(manager: EntryManager, ids: Iterable[int]) -> int:
    """Flag the given entries as waited on (``django_iq.wait()``), so that the success that
    deletes one announces it on ``ENDED_CHANNEL``. Ids already flagged or gone are skipped;
    return how many were flagged. Its own short transaction (autocommit): a flag held
    uncommitted would make the success wait for the waiter's transaction."""
    db = router.db_for_write(manager.model)
    wanted = sorted(set(ids))
    flagged = 0
    for start in range(0, len(wanted), 500):
        chunk = wanted[start : start + 500]
        flagged += manager.on(db).filter(pk__in=chunk, awaited=False).update(awaited=True)
    return flagged


def waiting_times(manager: EntryManager) -> dict[str, tuple[datetime, datetime]]:
    """Per queue, of its entries awaiting compute: the oldest enqueue time, and since when
    the longest-waiting one has been ready (enqueued, or due, or retried, whichever came
    last). One query."""
    rows = (
        manager.get_queryset()
        .awaiting_compute()
        .values("queue")
        .annotate(oldest=Min("enqueued_at"), ready=Min(Greatest("enqueued_at", "run_at")))
        .order_by()
        .values_list("queue", "oldest", "ready")
    )
    return {str(queue): (oldest, ready) for queue, oldest, ready in rows}


def disable(manager: EntryManager, job_name: str) -> int:
    """Stop claiming ``job_name``: its entries, and any enqueued later, become ``disabled``.

    Entries already running finish. Return how many entries were disabled.
    """
    db = router.db_for_write(manager.model)

    def write() -> int:
        iq.DisabledJob.objects.using(db).get_or_create(job_name=job_name)
        waiting = manager.on(db).filter(job_name=job_name, state__in=WAITING)
        return (
            manager.on(db).filter(pk__in=lock_in_order(waiting)).update(state=EntryState.DISABLED)
        )

    return atomic_retrying(db, write, "disable")


def enable(manager: EntryManager, job_name: str, now: datetime | None = None) -> int:
    """Claim ``job_name`` again: each disabled entry returns to ``initial`` or ``pending``
    by its own run_at, with its own priority. Return how many entries were enabled."""
    now = now or timezone.now()
    db = router.db_for_write(manager.model)

    def write() -> int:
        iq.DisabledJob.objects.using(db).filter(job_name=job_name).delete()
        ids = lock_in_order(manager.on(db).filter(job_name=job_name, state=EntryState.DISABLED))
        rows = manager.on(db).filter(pk__in=ids)
        # Entries still waiting for parents (using(after=...)) go back to waiting for them.
        rows.filter(blockers__gt=0).update(state=EntryState.BLOCKED)
        rows = rows.filter(blockers=0)
        deferred = rows.filter(run_at__gt=now).update(state=EntryState.INITIAL)
        ready = rows.filter(run_at__lte=now)
        pending = ready.update(state=EntryState.PENDING)
        if pending:
            notify_ready(db, list(ready.values_list("queue_id", flat=True).distinct()))
        return deferred + pending

    return atomic_retrying(db, write, "enable")
