"""Entries: the outcomes of runs. A success deletes the entry (one or many per transaction),
a failure writes an ``EntryError`` and retries or removes the entry; the group lock goes with
the claim's last entry."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db import models, router
from django.utils import timezone

from django_iq.appmodels import iq
from django_iq.limits import cut_message, cut_traceback
from django_iq.managers.common import atomic_retrying, lock_in_order, storable_text
from django_iq.options import JobCatalog
from django_iq.states import MIN_PRIORITY, EntryState

if TYPE_CHECKING:
    from django_iq.models import Entry, EntryError


@dataclass(frozen=True)
class Failure:
    """How an attempt ended without success: what to record, and what comes next.

    ``final`` ends the entry whatever attempts it has left. Otherwise the entry waits for
    ``retry_at`` (``initial``), or, with ``retry_at`` None, is ready again at once; it loses
    ``priority_decay`` priority (an entry that keeps killing its worker cannot starve others).
    """

    exception_class: str
    message: str
    traceback: str = ""
    worker_name: str = ""
    final: bool = False
    retry_at: datetime | None = None
    priority_decay: int = 0


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
        jobs: JobCatalog | None = None,
    ) -> bool:
        """Delete a finished entry and, if ``lock_id`` is given, its lock, in one transaction.

        The entry row goes first: a claimer holding that row waits for us, then finds our lock
        and skips it (the reverse order could deadlock). Return False if the lock was gone
        (recovery released it), True otherwise.
        """
        db = router.db_for_write(self.model)

        def write() -> bool:
            self._on(db).filter(pk=entry.pk).delete()
            if entry.result_id is not None:
                iq.Result.objects.db_manager(db).record_success(
                    entry.result_id, return_value, now or timezone.now()
                )
            if entry.cron_job_id is not None:
                self._after_cron_run(entry, now or timezone.now(), jobs)
            if lock_id is None:
                self._moved_on(db, entry)
                return True
            return iq.GroupLock.objects.using(db).filter(pk=lock_id).delete()[0] > 0

        return atomic_retrying(db, write, "complete")

    def complete_many(self, done: Sequence[tuple[Entry, int | None]]) -> set[int]:
        """Delete many finished entries and the given locks in one transaction; return the lock
        ids that were already gone (recovery released them while their jobs ran).

        Entry rows go first, as in ``complete``. For entries without a Tasks result or a cron
        job (those have bookkeeping of their own: use ``complete``).
        """
        db = router.db_for_write(self.model)
        if any(e.result_id is not None or e.cron_job_id is not None for e, _ in done):
            raise ValueError("complete_many() takes entries without a Tasks result or cron job")
        entry_ids = [entry.pk for entry, _ in done]
        lock_ids = [lock_id for _, lock_id in done if lock_id is not None]

        def write() -> set[int]:
            # Entries, then group locks, each locked in id order (see ``lock_in_order``).
            found_entries = lock_in_order(self._on(db), entry_ids)
            if found_entries:
                self._on(db).filter(pk__in=found_entries).delete()
            if not lock_ids:
                return set()
            found = lock_in_order(iq.GroupLock.objects.using(db), lock_ids)
            if found:
                iq.GroupLock.objects.using(db).filter(pk__in=found).delete()
            return set(lock_ids) - set(found)

        return atomic_retrying(db, write, "complete_many")

    def _moved_on(self, db: str, entry: Entry) -> None:
        """The outcome of an entry that is not its claim's last is written: its lock no longer
        points at an entry in flight, so a death before the next entry starts (``track``)
        charges no attempt to either (recovery releases the lock)."""
        if entry.group_key:
            iq.GroupLock.objects.using(db).filter(key=entry.lock_key, entry_id=entry.pk).update(
                entry_id=None
            )

    def _after_cron_run(self, entry: Entry, now: datetime, jobs: JobCatalog | None) -> None:
        """Record a cron entry's run and create the next one, in the caller's transaction."""
        if entry.cron_job_id is None:
            return
        iq.CronJob.objects.filter(pk=entry.cron_job_id).update(last_run_at=now)
        # The next entry gets its job's attempts; without the registry at hand, this one's.
        max_attempts = (
            jobs.max_attempts_of(entry.job_name) if jobs is not None else entry.max_attempts
        )
        iq.CronJob.objects.schedule_next(entry.cron_job_id, now, max_attempts)

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
        jobs: JobCatalog | None = None,
    ) -> EntryError:
        """Record a failed attempt; retry at ``retry_at`` (``initial``) or, if None or attempts
        are used up, remove the entry and leave a final error record. One transaction."""
        now = now or timezone.now()
        db = router.db_for_write(self.model)
        failure = Failure(
            exception_class=exception_class,
            message=message,
            traceback=traceback,
            worker_name=worker_name,
            final=retry_at is None,
            retry_at=retry_at,
        )

        def write() -> EntryError:
            # The entry's row first, as every writer of several rows does (``lock_in_order``).
            lock_in_order(self._on(db), [entry.pk])
            error = self.end_attempt(entry, failure, now=now, using=db, jobs=jobs)
            if lock_id is not None:
                iq.GroupLock.objects.using(db).filter(pk=lock_id).delete()
            else:
                self._moved_on(db, entry)
            return error

        return atomic_retrying(db, write, "fail")

    def end_attempt(
        self,
        entry: Entry,
        failure: Failure,
        *,
        now: datetime,
        using: str,
        jobs: JobCatalog | None = None,
    ) -> EntryError:
        """The one way an attempt ends without success, whatever ended it (the job raised, its
        worker died, ...): count the attempt, write its ``EntryError`` (and the Tasks result's
        failure), then either remove the entry for good, when ``failure.final`` or its attempts
        are used up (a cron entry then gets its successor), or keep it for another attempt.

        The caller holds the entry's row and handles its group lock, in its own transaction.
        """
        attempt = entry.attempts + 1
        final = failure.final or attempt >= entry.max_attempts
        traceback = storable_text(cut_traceback(failure.traceback))
        error = iq.EntryError.objects.db_manager(using).record(
            entry,
            attempt=attempt,
            exception_class=failure.exception_class,
            message=storable_text(cut_message(failure.message)),
            traceback=traceback,
            worker_name=failure.worker_name,
            now=now,
            final=final,
        )
        if entry.result_id is not None:
            iq.Result.objects.db_manager(using).record_failure(
                entry.result_id,
                exception_class=failure.exception_class[:255],
                traceback=traceback or failure.message,
                final=final,
                now=now,
            )
        rows = self._on(using).filter(pk=entry.pk)
        if final:
            rows.delete()
            if entry.cron_job_id is not None:
                self._after_cron_run(entry, now, jobs)
            return error
        changes: dict[str, Any] = {"attempts": attempt}
        if failure.priority_decay:
            changes["priority"] = max(MIN_PRIORITY, entry.priority - failure.priority_decay)
        if failure.retry_at is None:
            rows.update(**changes)  # ready again at once, in whatever state it is
            return error
        # An entry disabled while it ran stays disabled; otherwise it waits for retry_at.
        rows.exclude(state=EntryState.DISABLED).update(
            state=EntryState.INITIAL, run_at=failure.retry_at, **changes
        )
        rows.filter(state=EntryState.DISABLED).update(run_at=failure.retry_at, **changes)
        return error
