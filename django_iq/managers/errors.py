"""Error records: the failed set, requeue, deletion and pruning."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING

from django.db import models, router, transaction
from django.utils import timezone

from django_iq import signals
from django_iq.appmodels import iq
from django_iq.bounds import cut_message
from django_iq.exceptions import InvalidJobArguments
from django_iq.managers.common import atomic_retrying, delete_first, stored_json
from django_iq.options import JobCatalog
from django_iq.queries import notify_ready
from django_iq.states import EntryState, lock_key_for

if TYPE_CHECKING:
    from django_iq.models import (
        Entry,
        EntryError,
    )


class EntryErrorQuerySet(models.QuerySet["EntryError"]):
    def failed(self) -> EntryErrorQuerySet:
        """Final error records not yet requeued: the entries shown as ``failed``."""
        return self.filter(is_final=True, requeued_at__isnull=True)


class EntryErrorManager(models.Manager["EntryError"]):
    """Failed attempts and the requeue of failed entries."""

    def get_queryset(self) -> EntryErrorQuerySet:
        return EntryErrorQuerySet(self.model, using=self._db)

    def record(
        self,
        entry: Entry,
        *,
        attempt: int,
        exception_class: str,
        message: str,
        traceback: str = "",
        worker_name: str,
        now: datetime,
        final: bool,
    ) -> EntryError:
        """Write the error record of ``entry``'s failed attempt: a copy of everything needed to
        requeue it, plus what went wrong. Call it inside the outcome's transaction."""
        return self.create(
            entry_id=entry.pk,
            queue_id=entry.queue_id,
            job_name=entry.job_name,
            args=stored_json(entry.args),
            kwargs=stored_json(entry.kwargs),
            priority=entry.priority,
            group_key=entry.group_key,
            max_attempts=entry.max_attempts,
            attempt=attempt,
            exception_class=exception_class[:255],
            message=cut_message(message),
            traceback=traceback,
            worker_name=worker_name[:200],
            enqueued_at=entry.enqueued_at,
            failed_at=now,
            is_final=final,
        )

    def failed(self) -> EntryErrorQuerySet:
        return self.get_queryset().failed()

    def delete_records(self, ids: Iterable[int]) -> list[int]:
        """Delete these error records (the entries that failed are not touched); return the
        ids deleted, in order."""
        wanted = list(ids)
        with transaction.atomic(using=router.db_for_write(self.model)):
            found = sorted(self.filter(pk__in=wanted).values_list("pk", flat=True))
            self.filter(pk__in=found).delete()
        return found

    def prune(self, older_than: datetime, batch_size: int) -> int:
        """Delete up to ``batch_size`` error records that failed before ``older_than``."""
        return delete_first(self.filter(failed_at__lt=older_than), "failed_at", batch_size)

    def requeue_matching(
        self,
        *,
        job_name: str | None = None,
        exception_class: str | None = None,
        queue: str | None = None,
        batch_size: int = 1000,
        jobs: JobCatalog | None = None,
    ) -> int:
        """Requeue every failed entry of a job, exception class and/or queue, in batches.

        Return how many entries were requeued.
        """
        rows = self.failed()
        if job_name:
            rows = rows.filter(job_name=job_name)
        if exception_class:
            rows = rows.filter(exception_class=exception_class)
        if queue:
            rows = rows.filter(queue_id=queue)
        total = 0
        while True:
            batch = list(rows.order_by("pk")[:batch_size])
            if not batch:
                return total
            total += len(self.requeue(batch, jobs))

    def requeue(
        self,
        errors: Iterable[EntryError] | models.QuerySet[EntryError],
        jobs: JobCatalog | None = None,
    ) -> list[Entry]:
        """Enqueue a fresh pending entry for each failed entry in ``errors``; return them.

        Errors that are not final, or already requeued, are skipped. Entries of a disabled job
        are created ``disabled``. With ``jobs`` (the registry), each entry gets the keys its
        job's limits count per value of, taken from its arguments again; a key that cannot be
        taken any more is left empty.
        """
        db = router.db_for_write(self.model)
        now = timezone.now()
        ids = sorted({e.pk for e in errors})

        def write() -> list[Entry]:
            rows = list(
                self.get_queryset()
                .using(db)
                .failed()
                .filter(pk__in=ids)
                .order_by("pk")
                .select_for_update()
            )
            # As with enqueue, an entry of a disabled job starts disabled, not pending.
            disabled = set(
                iq.DisabledJob.objects.using(db)
                .filter(job_name__in={e.job_name for e in rows})
                .values_list("job_name", flat=True)
            )
            entries = [
                iq.Entry(
                    queue_id=e.queue_id,
                    job_name=e.job_name,
                    args=e.args,
                    kwargs=e.kwargs,
                    priority=e.priority,
                    state=EntryState.DISABLED if e.job_name in disabled else EntryState.PENDING,
                    group_key=e.group_key,
                    lock_key=lock_key_for(e.group_key),
                    run_at=now,
                    max_attempts=e.max_attempts,
                    enqueued_at=now,
                )
                for e in rows
            ]
            if jobs is not None:
                for entry in entries:
                    entry.concurrency_key, entry.rate_limit_key = _limit_keys(entry, jobs)
            created = iq.Entry.objects.using(db).bulk_create(entries)
            self.using(db).filter(pk__in=[e.pk for e in rows]).update(requeued_at=now)
            notify_ready(db, [e.queue_id for e in created if e.state == EntryState.PENDING])
            return created

        created = atomic_retrying(db, write, "requeue")
        for entry in created:
            signals.send(signals.entry_enqueued, iq.Entry, entry=entry)
        return created


def _limit_keys(entry: Entry, jobs: JobCatalog) -> tuple[str, str]:
    try:
        return jobs.limit_keys_of(entry.job_name, entry.args, entry.kwargs)
    except InvalidJobArguments:
        return "", ""
