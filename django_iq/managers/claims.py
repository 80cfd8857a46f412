"""The claim (``Entry.objects.claim``): ready entries taken for a worker under group locks, by
priority then FIFO, in one statement on PostgreSQL or one transaction elsewhere."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from django.db import router, transaction
from django.db.models import Exists, OuterRef

from django_iq.appmodels import iq
from django_iq.conf import iq_settings
from django_iq.options import JobLimits
from django_iq.queries import (
    claim_in_one_statement,
    insert_group_locks,
    lock_live_worker,
    supports_single_statement_claim,
)
from django_iq.states import EntryState

if TYPE_CHECKING:
    from django_iq.managers.entries import EntryManager
    from django_iq.models import Entry, Worker


@dataclass
class Claim:
    """Entries claimed under one group lock: they run in order, in one processing thread."""

    lock_id: int
    lock_key: str
    queue: str
    entries: list[Entry] = field(default_factory=list)


def claim(
    manager: EntryManager,
    worker: Worker | None,
    limit: int,
    queue: str,
    *,
    is_capped: bool | None = None,
    job_names: Sequence[str] | None = None,
    limited: tuple[str, JobLimits] | None = None,
) -> list[Claim]:
    """Claim up to ``limit`` ready entries of ``queue`` for ``worker`` by creating group locks.

    Entries come by priority (highest first), then FIFO. Each claim holds one lock; entries
    sharing a lock key selected together run in the same claim. One transaction: the entries
    are read ``FOR UPDATE SKIP LOCKED`` (SQLite serializes writers instead), then the locks
    are inserted; a key another worker locked meanwhile is skipped, so no entry is claimed
    twice. Paused queues and disabled jobs yield nothing.

    ``is_capped=False`` (the scheduler knows the queue has no ``max_concurrency``) lets
    PostgreSQL claim in a single statement, one round trip; the statement re-checks that
    the queue is neither paused nor capped.

    A claim for ``worker`` holds its row with a shared lock and claims nothing if the
    worker is stopped (declared dead) or silent past ``WORKER_SILENT_AFTER_SECONDS``: no
    lock is ever taken under a dead worker's row. Each lock's ``locked_at`` is the
    database's clock once the claim holds every row lock it waited for.

    ``job_names`` (a worker's registered jobs) limits the claim to entries of those jobs:
    an entry no worker knows is never attempted, it waits.

    ``limited=(job name, its limits as registered here)`` claims entries of that one job
    under its caps and rate limit (``JobLimit``): the job's row is locked, so claims of the
    job count its running claims and recent starts one at a time, on every database; each
    lock records the job (and, for a job capped per key, its first entry's concurrency key).
    A job limited per key is claimed key by key (``JobLimitManager.pick_by_key``). Limited
    jobs must be left out of ``job_names`` of other claims.
    """
    db = router.db_for_write(manager.model)
    worker_id = worker.pk if worker is not None else None
    silent_after = iq_settings.WORKER_SILENT_AFTER_SECONDS
    if is_capped is False and limited is None and supports_single_statement_claim(db):
        claims: dict[str, Claim] = {}
        for entry, lock_id in claim_in_one_statement(
            db, queue, worker_id, limit, silent_after, job_names
        ):
            claim = claims.setdefault(entry.lock_key, Claim(lock_id, entry.lock_key, queue))
            claim.entries.append(entry)
        return list(claims.values())
    with transaction.atomic(using=db):
        queue_row = (
            iq.Queue.objects.using(db)
            .filter(name=queue)
            .values("is_paused", "max_concurrency")
            .first()
        )
        if queue_row is None or queue_row["is_paused"]:
            return []
        if queue_row["max_concurrency"]:
            # Serialize claimers of a capped queue so the cap holds cluster-wide. A row lock
            # does not block readers: queues stay readable at all times.
            iq.Queue.objects.using(db).select_for_update().filter(name=queue).values_list(
                "pk"
            ).first()
            running = iq.GroupLock.objects.using(db).filter(queue_id=queue).count()
            limit = min(limit, queue_row["max_concurrency"] - running)
            if limit <= 0:
                return []
        room = None
        if limited is not None:
            # After the queue row, like every claim of a capped queue: one lock order.
            node = worker.host if worker is not None else None
            room = iq.JobLimit.objects.room(db, limited[0], node, limited[1])
            limit = min(limit, room.total)
            if limit <= 0:
                return []
        # After the queue row: a claim waiting for a capped queue does not hold its
        # worker's row meanwhile (which would hold up the worker's heartbeat).
        if worker_id is not None and not lock_live_worker(db, worker_id, silent_after):
            return []
        ready = manager.on(db).filter(state=EntryState.PENDING, queue_id=queue)
        if limited is not None:
            ready = ready.filter(job_name=limited[0])
        elif job_names is not None:
            ready = ready.filter(job_name__in=list(job_names))
        ready = (
            ready.exclude(Exists(iq.GroupLock.objects.filter(key=OuterRef("lock_key"))))
            .exclude(Exists(iq.DisabledJob.objects.filter(job_name=OuterRef("job_name"))))
            .order_by("-priority", "pk")
            .select_for_update(skip_locked=True)
        )
        if limited is not None and room is not None and room.limits and room.limits.is_keyed:
            candidates = iq.JobLimit.objects.pick_by_key(db, limited[0], room.limits, ready, limit)
        else:
            candidates = list(ready[:limit])
        if not candidates:
            return []
        first_entry: dict[str, Entry] = {}
        for entry in candidates:
            first_entry.setdefault(entry.lock_key, entry)
        job_name = limited[0] if limited is not None else None
        taken = insert_group_locks(
            db,
            {key: entry.pk for key, entry in first_entry.items()},
            queue,
            worker_id,
            job_name,
            {key: entry.concurrency_key for key, entry in first_entry.items()},
        )
        if job_name is not None and room is not None and room.rated:
            started = [entry for entry in candidates if entry.lock_key in taken]
            iq.JobLimit.objects.record_starts(db, job_name, started)
    claims = {}
    for entry in candidates:
        if entry.lock_key in taken:
            claim = claims.setdefault(
                entry.lock_key, Claim(taken[entry.lock_key], entry.lock_key, queue)
            )
            claim.entries.append(entry)
    return list(claims.values())
