"""What operators and the leader do to waiting entries (``Entry.objects.promote_due``,
``run_now``, ``cancel``, ``cancel_returning``, ``disable``, ``enable``) and the waiting times
the scheduler and the dashboard read (``waiting_times``)."""

from __future__ import annotations

from collections.abc import Iterable
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
from django_iq.queries import notify_ready
from django_iq.states import WAITING, EntryState

if TYPE_CHECKING:
    from django_iq.managers.entries import EntryManager
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
    entry). The rows are locked first and the group locks read after, in a statement of its
    own: a claim committed meanwhile is seen and its entries are refused, and no worker can
    claim a locked row before the delete (SQLite serializes writers instead). Ids that match
    no entry are in neither list. Each cancelled entry leaves a ``cancelled`` outcome record
    (unless its job keeps none, as ``jobs`` tells).
    """
    db = router.db_for_write(manager.model)
    wanted = sorted(set(ids))

    def write() -> tuple[list[Entry], list[int]]:
        rows = list(manager.on(db).filter(pk__in=wanted).order_by("pk").select_for_update())
        held = set(
            iq.GroupLock.objects.using(db)
            .filter(key__in={entry.lock_key for entry in rows})
            .values_list("key", flat=True)
        )
        cancelled = [entry for entry in rows if entry.lock_key not in held]
        if cancelled:
            manager.on(db).filter(pk__in=[entry.pk for entry in cancelled]).delete()
            iq.Batch.objects.members_failed(db, [entry.batch_id for entry in cancelled])
            iq.EntryDependency.objects.parents_ended(
                db, [entry.pk for entry in cancelled], failure="was cancelled"
            )
            now = timezone.now()
            iq.RunOutcome.objects.db_manager(db).record_cancelled(
                [e for e in cancelled if keeps_outcomes(e, jobs)], now
            )
        return cancelled, [entry.pk for entry in rows if entry.lock_key in held]

    return atomic_retrying(db, write, "cancel")


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
