"""Batches (``django_iq.batch()``): the entries enqueued in one block, and an ``on_complete``
entry enqueued with them that runs once every one of them has ended.

The callback is a child as in ``dependencies.py``: ``blocked``, each member its parent (ending
it whether it succeeds or not), plus one blocker held while the block is open. Whichever ends
last, a member or the block's close, releases it, once, in the transaction that writes that
end: no polling, and members may end before the block closes. A member that ends without
success (final failure, cancel, ``ParentFailed``) adds to ``Batch.failed`` in the transaction
that ends it, before it releases the callback; successes write nothing more.

The counts the callback is called with are read when it runs, not when it is released: on
PostgreSQL the last success releases it inside one statement whose snapshot may predate a
concurrent member's failure. By the time the callback is claimed, every member's end has
committed (each held the callback's row until its commit), so the read is exact.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from contextvars import ContextVar, Token
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db import models, router, transaction
from django.db.models import Count, Exists, F, OuterRef, Subquery
from django.db.models.functions import Coalesce
from django.utils import timezone

from django_iq.appmodels import iq
from django_iq.managers.common import ENQUEUE_BATCH_SIZE, atomic_retrying
from django_iq.options import JobCatalog, JobOptions
from django_iq.queries import join_batch

if TYPE_CHECKING:
    from django_iq.models import Batch, Entry  # noqa: F401  (Batch: the type argument)

# The keyword arguments the callback is called with, besides the ones given to ``batch()``.
COUNT_ARGUMENTS = ("batch_id", "succeeded", "failed")


@dataclass(frozen=True)
class OpenBatch:
    """A batch whose block is open in this context: entries enqueued here become members."""

    pk: int
    callback_id: int
    using: str


_open: ContextVar[OpenBatch | None] = ContextVar("django_iq_open_batch", default=None)


def open_batch() -> OpenBatch | None:
    """The batch whose block is open in this thread or task, if any."""
    return _open.get()


class BatchQuerySet(models.QuerySet["Batch"]):
    def with_progress(self) -> BatchQuerySet:
        """Annotate ``waiting`` (members not ended yet: their edges to the callback), the
        callback entry's ``callback_state`` (None once it is gone) and
        ``callback_failed`` (it failed for good). Three subqueries per listed row."""
        edges = (
            iq.EntryDependency.objects.filter(child_id=OuterRef("callback_entry_id"))
            .order_by()
            .values("child_id")
            .annotate(n=Count("pk"))
            .values("n")
        )
        state = iq.Entry.objects.filter(pk=OuterRef("callback_entry_id")).values("state")[:1]
        failed = iq.EntryError.objects.filter(entry_id=OuterRef("callback_entry_id"), is_final=True)
        return self.annotate(
            waiting=Coalesce(Subquery(edges), 0),
            callback_state=Subquery(state),
            callback_failed=Exists(failed),
        )


class BatchManager(models.Manager["Batch"]):
    def get_queryset(self) -> BatchQuerySet:
        return BatchQuerySet(self.model, using=self._db)

    def with_progress(self) -> BatchQuerySet:
        return self.get_queryset().with_progress()

    def open(
        self,
        job_name: str,
        kwargs: dict[str, Any],
        options: JobOptions,
        jobs: JobCatalog | None = None,
    ) -> OpenBatch:
        """Write a batch and its callback entry (``job_name`` with ``kwargs`` and the batch's
        id), blocked while the block is open, in one transaction. ``kwargs`` are checked."""
        db = router.db_for_write(self.model)
        with transaction.atomic(using=db):
            batch = self.using(db).create(on_complete=job_name)
            callback = iq.Entry.objects.db_manager(db).enqueue_blocked(
                db, job_name, {**kwargs, "batch_id": batch.pk}, options, jobs=jobs
            )
            self.using(db).filter(pk=batch.pk).update(callback_entry_id=callback.pk)
        return OpenBatch(batch.pk, callback.pk, db)

    def enter(self, batch: OpenBatch) -> Token[OpenBatch | None]:
        """Make ``batch`` the open one in this context; ``leave`` takes the token back."""
        return _open.set(batch)

    def leave(self, token: Token[OpenBatch | None]) -> None:
        _open.reset(token)

    def add_members(self, batch: OpenBatch, entries: Sequence[Entry]) -> None:
        """In the transaction that inserted ``entries``: count them in the batch and make the
        callback wait for each. The batch's row is written before the callback's, the order
        every writer of both follows."""
        ids = [entry.pk for entry in entries]
        if not ids:
            return
        db = batch.using
        if join_batch(db, batch.pk, batch.callback_id, ids):
            return
        self.using(db).filter(pk=batch.pk).update(total=F("total") + len(ids))
        iq.EntryDependency.objects.using(db).bulk_create(
            [
                iq.EntryDependency(parent_id=pk, child_id=batch.callback_id, run_on_failure=True)
                for pk in ids
            ],
            batch_size=ENQUEUE_BATCH_SIZE,
        )
        iq.Entry.objects.using(db).filter(pk=batch.callback_id).update(
            blockers=F("blockers") + len(ids)
        )

    def members_failed(self, using: str, batch_ids: Iterable[int | None]) -> None:
        """In the caller's transaction, members of ``batch_ids`` (one id per member; None for
        entries of no batch) ended without success: add them to their batches' failed counts.
        Called before the members' ends release the callback."""
        counts = Counter(pk for pk in batch_ids if pk is not None)
        for pk in sorted(counts):  # the batches' rows in id order, as every writer
            self.using(using).filter(pk=pk).update(failed=F("failed") + counts[pk])

    def close(self, batch: OpenBatch, *, discard_if_empty: bool = False) -> None:
        """The block was left: stop holding the callback (it is released now if every member
        has ended, or if there were none). With ``discard_if_empty`` (the block raised), a
        batch without members is deleted with its callback entry instead."""
        db = batch.using

        def write() -> None:
            rows = self.using(db).filter(pk=batch.pk)
            total = rows.select_for_update().values_list("total", flat=True).first()
            if total is None:
                return
            if discard_if_empty and total == 0:
                iq.Entry.objects.using(db).filter(pk=batch.callback_id).delete()
                rows.delete()
                return
            now = timezone.now()
            rows.update(closed_at=now)
            iq.EntryDependency.objects.release(db, Counter({batch.callback_id: 1}), now)

        atomic_retrying(db, write, "close batch")

    def prune(self, older_than: datetime, batch_size: int) -> int:
        """Delete up to ``batch_size`` batches whose callback entry is gone (it succeeded,
        failed for good or was cancelled) and that completed (or, never run, closed) before
        ``older_than``. A batch whose block never closed, or whose callback waits, stays."""
        ended = Coalesce("completed_at", "closed_at")
        callback = iq.Entry.objects.filter(pk=OuterRef("callback_entry_id"))
        ids = list(
            self.annotate(ended_at=ended)
            .filter(ended_at__lt=older_than)
            .exclude(Exists(callback))
            .values_list("pk", flat=True)[:batch_size]
        )
        return self.filter(pk__in=ids).delete()[0] if ids else 0

    def callback_kwargs(self, entry: Entry) -> dict[str, Any] | None:
        """The keyword arguments a batch's callback entry runs with: its own, with the batch's
        ``succeeded`` and ``failed`` counts; None for an entry that is no batch's callback.
        The first run records the batch's completion time."""
        db = router.db_for_write(self.model)
        rows = self.using(db).filter(callback_entry_id=entry.pk)
        rows.filter(completed_at__isnull=True).update(completed_at=timezone.now())
        found = rows.values_list("pk", "total", "failed").first()
        if found is None:
            return None
        pk, total, failed = found
        return {**entry.kwargs, "batch_id": pk, "succeeded": total - failed, "failed": failed}
