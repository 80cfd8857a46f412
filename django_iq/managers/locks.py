"""Group locks: release of unstarted claims and recovery of stuck ones."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING

from django.db import models, router, transaction
from django.db.models import Q

from django_iq.appmodels import iq
from django_iq.managers.attempts import Failure
from django_iq.options import JobCatalog
from django_iq.queries import notifications_on, notify_ready

if TYPE_CHECKING:
    from django_iq.models import (
        GroupLock,
        Worker,
    )


class GroupLockManager(models.Manager["GroupLock"]):
    def release(self, lock_ids: Iterable[int]) -> int:
        """Delete locks of claims that never started, so their entries are claimable again."""
        ids = sorted(lock_ids)
        if not ids:
            return 0
        db = router.db_for_write(self.model)
        locks = self.using(db).filter(pk__in=ids)
        if not notifications_on(db):
            return locks.delete()[0]
        with transaction.atomic(using=db):
            queues = list(locks.values_list("queue", flat=True))
            released = locks.delete()[0]
            notify_ready(db, queues)  # the entries are claimable again: wake the workers
        return released

    def adopt(self, lock_ids: Iterable[int], worker: Worker) -> int:
        """Give ``worker`` the given locks whose worker row is gone or stopped (declared dead,
        or replaced) and that recovery has not released yet; return how many it took.

        Recovery locks a lock's row and diagnoses it again before releasing it, so a lock
        adopted first is left alone, and one released first is not adopted."""
        return (
            self.filter(pk__in=sorted(lock_ids))
            .filter(Q(worker__isnull=True) | Q(worker__stopped_at__isnull=False))
            .update(worker=worker)
        )

    def track(self, lock_id: int, entry_id: int) -> None:
        """Record that the claim under ``lock_id`` has moved on to entry ``entry_id``."""
        self.filter(pk=lock_id).update(entry_id=entry_id)

    def recover(
        self,
        lock: GroupLock,
        reason: str,
        *,
        decay_step: int,
        now: datetime,
        jobs: JobCatalog | None = None,
    ) -> str:
        """Release a stuck lock and count the attempt of the entry its dead worker had started.

        That entry loses ``decay_step`` priority (so an entry that keeps killing its worker
        cannot starve new work), gets an ``EntryError`` saying why, and is pending again, or,
        with its attempts used up, leaves the queue as failed. Return what became of it:
        "retry", "failed" or "released". Run inside the leader's fenced transaction.
        """
        outcome = "released"
        entry = (
            iq.Entry.objects.select_for_update().filter(pk=lock.entry_id, lock_key=lock.key).first()
            if lock.entry_id is not None
            else None
        )
        if entry is not None:
            failure = Failure(
                exception_class="django_iq.exceptions.WorkerLost",
                message=reason,
                worker_name=lock.worker.name if lock.worker is not None else "",
                priority_decay=decay_step,
                # The run started at the latest when its claim took the lock.
                started_at=lock.locked_at,
            )
            db = router.db_for_write(self.model)
            error = iq.Entry.objects.end_attempt(entry, failure, now=now, using=db, jobs=jobs)
            outcome = "failed" if error.is_final else "retry"
        self.filter(pk=lock.pk).delete()
        return outcome
