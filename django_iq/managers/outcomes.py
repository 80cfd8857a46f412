"""Entries: the outcomes of runs. A success deletes the entry (one or many per transaction),
a failure writes an ``EntryError`` and retries or removes the entry; the group lock goes with
the claim's last entry."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db import models, router, transaction
from django.utils import timezone

from django_iq.conf import iq_settings
from django_iq.managers.common import TRUNCATED_MARK, storable_text

if TYPE_CHECKING:
    from django_iq.models import Entry, EntryError


class EntryOutcomeManager(models.Manager["Entry"]):
    """Writes what became of a run; ``EntryManager`` builds on it."""

    def _on(self, db: str) -> models.QuerySet[Entry]:
        return self.get_queryset().using(db)

    def complete(
        self,
        entry: Entry,
        lock_id: int | None,
        now: datetime | None = None,
        return_value: Any = None,
    ) -> bool:
        """Delete a finished entry and, if ``lock_id`` is given, its lock, in one transaction.

        The entry row goes first: a claimer holding that row waits for us, then finds our lock
        and skips it (the reverse order could deadlock). Return False if the lock was gone
        (recovery released it), True otherwise.
        """
        from django_iq import models as iq

        db = router.db_for_write(self.model)
        with transaction.atomic(using=db):
            self._on(db).filter(pk=entry.pk).delete()
            if entry.result_id is not None:
                iq.Result.objects.db_manager(db).record_success(
                    entry.result_id, return_value, now or timezone.now()
                )
            if entry.cron_job_id is not None:
                self._after_cron_run(entry, now or timezone.now())
            if lock_id is None:
                return True
            return iq.GroupLock.objects.using(db).filter(pk=lock_id).delete()[0] > 0

    def complete_many(self, done: Sequence[tuple[Entry, int | None]]) -> set[int]:
        """Delete many finished entries and the given locks in one transaction; return the lock
        ids that were already gone (recovery released them while their jobs ran).

        Entry rows go first, as in ``complete``. For entries without a Tasks result or a cron
        job (those have bookkeeping of their own: use ``complete``).
        """
        from django_iq import models as iq

        db = router.db_for_write(self.model)
        if any(e.result_id is not None or e.cron_job_id is not None for e, _ in done):
            raise ValueError("complete_many() takes entries without a Tasks result or cron job")
        entry_ids = [entry.pk for entry, _ in done]
        lock_ids = [lock_id for _, lock_id in done if lock_id is not None]
        with transaction.atomic(using=db):
            if entry_ids:
                self._on(db).filter(pk__in=entry_ids).delete()
            if not lock_ids:
                return set()
            locks = iq.GroupLock.objects.using(db).filter(pk__in=lock_ids)
            found = set(locks.values_list("pk", flat=True))
            if found:
                iq.GroupLock.objects.using(db).filter(pk__in=found).delete()
        return set(lock_ids) - found

    def _after_cron_run(self, entry: Entry, now: datetime) -> None:
        """Record a cron entry's run and create the next one, in the caller's transaction."""
        from django_iq import models as iq

        if entry.cron_job_id is None:
            return
        iq.CronJob.objects.filter(pk=entry.cron_job_id).update(last_run_at=now)
        iq.CronJob.objects.schedule_next(entry.cron_job_id, now)

    def fail(
        self,
        entry: Entry,
        lock_id: int | None,
        *,
        exception_class: str,
        message: str,
        traceback: str,
        retry_at: datetime | None,
        worker_name: str = "",
        now: datetime | None = None,
    ) -> EntryError:
        """Record a failed attempt; retry at ``retry_at`` (``initial``) or, if None or attempts
        are used up, remove the entry and leave a final error record. One transaction."""
        from django_iq import models as iq

        now = now or timezone.now()
        db = router.db_for_write(self.model)
        attempt = entry.attempts + 1
        final = retry_at is None or attempt >= entry.max_attempts
        message, traceback = storable_text(message), storable_text(traceback)
        limit = iq_settings.TRACEBACK_MAX_CHARS
        if len(traceback) > limit:
            # Keep the end, where the exception is, and stay within the limit with the marker.
            traceback = TRUNCATED_MARK + traceback[len(traceback) - limit + len(TRUNCATED_MARK) :]
        with transaction.atomic(using=db):
            error = iq.EntryError.objects.db_manager(db).record(
                entry,
                attempt=attempt,
                exception_class=exception_class,
                message=message,
                traceback=traceback,
                worker_name=worker_name,
                now=now,
                final=final,
            )
            if entry.result_id is not None:
                iq.Result.objects.db_manager(db).record_failure(
                    entry.result_id,
                    exception_class=exception_class[:255],
                    traceback=traceback,
                    final=final,
                    now=now,
                )
            rows = self._on(db).filter(pk=entry.pk)
            if final:
                rows.delete()
                if entry.cron_job_id is not None:
                    self._after_cron_run(entry, now)
            else:
                # An entry disabled while it ran stays disabled; otherwise it waits for retry_at.
                rows.exclude(state="disabled").update(
                    state="initial", run_at=retry_at, attempts=attempt
                )
                rows.filter(state="disabled").update(run_at=retry_at, attempts=attempt)
            if lock_id is not None:
                iq.GroupLock.objects.using(db).filter(pk=lock_id).delete()
        return error
