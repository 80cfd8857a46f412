"""How an attempt ends (``Entry.objects.complete_many``, ``fail``, ``snooze``, ``end_attempt``):
a success deletes the entry (one or many per transaction), a failure writes an ``EntryError``
and retries or removes the entry; the group lock goes with the claim's last entry."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db import models, router
from django.utils import timezone

from django_iq.appmodels import iq
from django_iq.bounds import cut_message, cut_traceback
from django_iq.exceptions import JobCancelled, SnoozeLimitReached
from django_iq.managers.common import (
    atomic_retrying,
    lock_awaited_in_order,
    lock_in_order,
    storable_text,
)
from django_iq.managers.entry_actions import end_unstarted_rows
from django_iq.managers.outcome_records import (
    failure_status,
    keeps_outcomes,
    return_json,
    started_at,
)
from django_iq.options import JobCatalog
from django_iq.queries import (
    OutcomeDone,
    complete_in_one_statement,
    notify_ended,
    supports_single_statement_complete,
)
from django_iq.states import MIN_PRIORITY, EntryState, OutcomeStatus

if TYPE_CHECKING:
    from django_iq.managers.entries import EntryManager
    from django_iq.models import Entry, EntryError


@dataclass(frozen=True)
class Failure:
    """How an attempt ended without success: what to record, and what comes next.

    ``final`` ends the entry whatever attempts it has left. Otherwise the entry waits for
    ``retry_at`` (``initial``), or, with ``retry_at`` None, is ready again at once; it loses
    ``priority_decay`` priority (an entry that keeps killing its worker cannot starve others).
    ``started_at`` is when the attempt's run started (None if unknown); ``ran`` False: the
    entry ended without running (its parent failed), which leaves no outcome record.
    """

    exception_class: str
    message: str
    traceback: str = ""
    worker_name: str = ""
    final: bool = False
    retry_at: datetime | None = None
    priority_decay: int = 0
    started_at: datetime | None = None
    ran: bool = True


@dataclass(frozen=True)
class Success:
    """A finished run whose success is to be written.

    ``lock_id`` is given for the claim's last entry: its group lock goes with it. ``at`` is when
    the run finished (the database's time of the write if None).
    """

    entry: Entry
    lock_id: int | None
    return_value: Any = None
    at: datetime | None = None
    # For the outcome record: the worker that ran it and how long the run took.
    worker_name: str = ""
    duration_seconds: float | None = None


def complete_many(
    manager: EntryManager,
    done: Sequence[Success],
    jobs: JobCatalog | None = None,
) -> set[int]:
    """The one way successes are written: delete the finished entries, start the windows
    of their unique keys (``unique_for``), record their outcomes and their cron runs
    (each cron job gets its next entry), point the locks of group claims that go on away
    from the finished entries, and delete the locks of the claims that ended, in one
    transaction. Return the lock ids that were already gone (recovery released them while
    their jobs ran).

    Rows are locked in one order, entries, unique keys, then group locks, each by id: a
    claimer holding an entry row waits for us, then finds our lock and skips it.
    """
    db = router.db_for_write(manager.model)
    entry_ids = [success.entry.pk for success in done]
    lock_ids = [success.lock_id for success in done if success.lock_id is not None]
    plain = all(s.lock_id is not None or not s.entry.group_key for s in done) and not any(
        s.entry.cron_job_id for s in done
    )
    if plain and supports_single_statement_complete(db):
        # Deletes and outcome records: one statement, one round trip.
        now = timezone.now()
        keyed = any(s.entry.unique_key for s in done)
        outcomes = [
            OutcomeDone(
                s.entry.pk,
                return_json(s.return_value),
                s.at or now,
                started_at(s.at or now, s.duration_seconds),
                s.duration_seconds,
                s.worker_name,
            )
            for s in done
            if keeps_outcomes(s.entry, jobs)
        ]
        found_locks = atomic_retrying(
            db,
            lambda: complete_in_one_statement(
                db, entry_ids, lock_ids, unique_keys=keyed, outcomes=outcomes
            ),
            "complete_many",
            atomic=False,
        )
        return set(lock_ids) - found_locks

    def write() -> set[int]:
        now = timezone.now()
        locked = lock_awaited_in_order(manager.on(db), entry_ids)
        found_entries = list(locked)
        notify_ended(db, [pk for pk, awaited in locked.items() if awaited])
        if found_entries:
            manager.on(db).filter(pk__in=found_entries).delete()
            deleted = set(found_entries)
            iq.UniqueKey.objects.db_manager(db).start_windows(
                s.entry.unique_key for s in done if s.entry.pk in deleted
            )
            iq.EntryDependency.objects.parents_ended(db, sorted(deleted), now=now)
            _record_successes(db, [s for s in done if s.entry.pk in deleted], now, jobs)
        crons = [success for success in done if success.entry.cron_job_id is not None]
        for success in sorted(crons, key=lambda s: int(s.entry.cron_job_id or 0)):
            _after_cron_run(success.entry, success.at or now, jobs, OutcomeStatus.SUCCEEDED)
        _moved_on(db, [s.entry for s in done if s.lock_id is None])
        if not lock_ids:
            return set()
        found = lock_in_order(iq.GroupLock.objects.using(db), lock_ids)
        if found:
            iq.GroupLock.objects.using(db).filter(pk__in=found).delete()
        return set(lock_ids) - set(found)

    return atomic_retrying(db, write, "complete_many")


def _record_successes(
    db: str, done: Sequence[Success], now: datetime, jobs: JobCatalog | None
) -> None:
    """The outcome records of successes written (entries deleted), in one INSERT."""
    iq.RunOutcome.objects.db_manager(db).record_successes(
        [
            (s.entry, s.return_value, s.at or now, s.duration_seconds, s.worker_name)
            for s in done
            if keeps_outcomes(s.entry, jobs)
        ]
    )


def _moved_on(db: str, moved: Sequence[Entry]) -> None:
    """The outcomes of entries that are not their claim's last are written: their locks no
    longer point at an entry in flight, so a death before the next entry starts (``track``)
    charges no attempt to either (recovery releases the lock). A lock already pointing at
    the claim's next entry is left alone."""
    grouped = [entry for entry in moved if entry.group_key]
    if grouped:
        iq.GroupLock.objects.using(db).filter(
            key__in={entry.lock_key for entry in grouped},
            entry_id__in=[entry.pk for entry in grouped],
        ).update(entry_id=None)


def _after_cron_run(entry: Entry, now: datetime, jobs: JobCatalog | None, status: str) -> None:
    """Record a cron entry's run (when, how it ended, which entry) and create the next
    one, in the caller's transaction."""
    if entry.cron_job_id is None:
        return
    iq.CronJob.objects.filter(pk=entry.cron_job_id).update(
        last_run_at=now, last_outcome=status, last_entry_id=entry.pk
    )
    # The next entry gets its job's attempts; without the registry at hand, this one's.
    max_attempts = jobs.max_attempts_of(entry.job_name) if jobs is not None else entry.max_attempts
    # After the fire time this entry ran for, even if this host's clock is a little behind.
    after = max(now, entry.run_at)
    # A cron job's arguments never change: neither do the keys its limits count per value of.
    keys = (entry.concurrency_key, entry.rate_limit_key)
    iq.CronJob.objects.schedule_next(entry.cron_job_id, after, max_attempts, limit_keys=keys)


def fail(
    manager: EntryManager,
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
    started_at: datetime | None = None,
    keep_lock: bool = False,
) -> EntryError:
    """Record a failed attempt (its run started at ``started_at``); retry at ``retry_at``
    (``initial``) or, if None or attempts are used up, remove the entry and leave a final
    error record. One transaction.

    ``keep_lock``: the claim's lock ``lock_id`` stays, pointing at no entry in flight (its
    release counts no further attempt): the run was given up but may not be over yet, so its
    group must not start elsewhere until whoever releases the lock knows it is."""
    now = now or timezone.now()
    db = router.db_for_write(manager.model)
    failure = Failure(
        exception_class=exception_class,
        message=message,
        traceback=traceback,
        worker_name=worker_name,
        final=retry_at is None,
        retry_at=retry_at,
        started_at=started_at,
    )

    def write() -> EntryError:
        # The entry's row first, as every writer of several rows does (``lock_in_order``).
        lock_in_order(manager.on(db), [entry.pk])
        error = end_attempt(manager, entry, failure, now=now, using=db, jobs=jobs)
        if keep_lock and lock_id is not None:
            iq.GroupLock.objects.using(db).filter(pk=lock_id).update(entry_id=None)
        else:
            _let_go(db, entry, lock_id)
        return error

    return atomic_retrying(db, write, "fail")


def expire(
    manager: EntryManager,
    entry: Entry,
    lock_id: int | None,
    *,
    now: datetime | None = None,
    jobs: JobCatalog | None = None,
) -> bool:
    """End a claimed ``entry`` that a worker found past its expiry before starting it,
    without running it (see ``entry_actions.end_unstarted_rows``), and give its group lock up
    (or, mid-claim, move the lock on). One transaction. Return False if the entry was gone
    already."""
    now = now or timezone.now()
    db = router.db_for_write(manager.model)

    def write() -> bool:
        found = lock_in_order(manager.on(db), [entry.pk])
        if found:
            end_unstarted_rows(db, [entry], OutcomeStatus.EXPIRED, jobs, now)
            _after_cron_run(entry, now, jobs, OutcomeStatus.EXPIRED)
        _let_go(db, entry, lock_id)
        return bool(found)

    return atomic_retrying(db, write, "expire")


def cancel_run(
    manager: EntryManager,
    entry: Entry,
    lock_id: int | None,
    *,
    started_at: datetime | None = None,
    worker_name: str = "",
    traceback: str = "",
    now: datetime | None = None,
    jobs: JobCatalog | None = None,
    keep_lock: bool = False,
) -> bool:
    """End a claimed ``entry`` whose cancel reached its worker: before it started
    (``started_at`` None), or once its run ended or was given up. It is deleted, never
    retried, and leaves a ``cancelled`` outcome record (with the run's worker and times, for a
    run), as a cancel of a waiting entry does (``entry_actions.end_unstarted_rows``). Its
    group lock is given up (or, mid-claim, moved on); ``keep_lock``: kept, pointing at no
    entry, for a run given up while it may still go on. One transaction. Return False if the
    entry was gone already."""
    now = now or timezone.now()
    db = router.db_for_write(manager.model)

    def write() -> bool:
        found = lock_in_order(manager.on(db), [entry.pk])
        if found:
            ran = started_at is not None
            end_unstarted_rows(db, [entry], OutcomeStatus.CANCELLED, jobs, now, records=not ran)
            if ran and keeps_outcomes(entry, jobs):
                iq.RunOutcome.objects.db_manager(db).record_failure(
                    entry,
                    attempt=entry.attempts + 1,
                    exception_class=f"{JobCancelled.__module__}.JobCancelled",
                    traceback=storable_text(cut_traceback(traceback)) or "The run was cancelled.",
                    worker_name=worker_name,
                    started=started_at,
                    now=now,
                    status=OutcomeStatus.CANCELLED,
                )
            _after_cron_run(entry, now, jobs, OutcomeStatus.CANCELLED)
        if keep_lock and lock_id is not None:
            iq.GroupLock.objects.using(db).filter(pk=lock_id).update(entry_id=None)
        else:
            _let_go(db, entry, lock_id)
        return bool(found)

    return atomic_retrying(db, write, "cancel_run")


def _let_go(db: str, entry: Entry, lock_id: int | None) -> None:
    """An attempt of ``entry`` ended without success: delete the claim's lock if it was
    the claim's last entry (``lock_id``), else move the lock on from it."""
    if lock_id is not None:
        iq.GroupLock.objects.using(db).filter(pk=lock_id).delete()
    else:
        _moved_on(db, [entry])


def snooze(
    manager: EntryManager,
    entry: Entry,
    lock_id: int | None,
    *,
    until: datetime,
    max_snoozes: int,
    worker_name: str = "",
    now: datetime | None = None,
    jobs: JobCatalog | None = None,
    started_at: datetime | None = None,
) -> EntryError | None:
    """Put ``entry`` back to run at ``until`` without counting an attempt or writing an
    error (the job raised ``Snooze``), leaving a ``snoozed`` outcome record, and give its
    group lock up (or, mid-claim, move the lock on). An entry that already snoozed ``max_snoozes`` times ends instead, as a final
    ``SnoozeLimitReached`` failure: return its error record (None for a snooze). One
    transaction."""
    now = now or timezone.now()
    db = router.db_for_write(manager.model)

    def write() -> EntryError | None:
        lock_in_order(manager.on(db), [entry.pk])
        error = None
        if entry.snoozes >= max_snoozes:
            failure = Failure(
                exception_class=f"{SnoozeLimitReached.__module__}.SnoozeLimitReached",
                message=f"The job snoozed {entry.snoozes} times, the most its "
                f"max_snoozes allows ({max_snoozes}); it fails for good.",
                worker_name=worker_name,
                final=True,
                started_at=started_at,
            )
            error = end_attempt(manager, entry, failure, now=now, using=db, jobs=jobs)
        else:
            rows = manager.on(db).filter(pk=entry.pk)
            snoozed = {"run_at": until, "snoozes": models.F("snoozes") + 1}
            # An entry disabled while it ran stays disabled; otherwise it waits for until.
            rows.exclude(state=EntryState.DISABLED).update(state=EntryState.INITIAL, **snoozed)
            rows.filter(state=EntryState.DISABLED).update(**snoozed)
            if keeps_outcomes(entry, jobs):
                iq.RunOutcome.objects.db_manager(db).record_failure(
                    entry,
                    attempt=entry.attempts + 1,
                    exception_class="",
                    traceback="",
                    worker_name=worker_name,
                    started=started_at,
                    now=now,
                    status=OutcomeStatus.SNOOZED,
                )
        _let_go(db, entry, lock_id)
        return error

    return atomic_retrying(db, write, "snooze")


def end_attempt(
    manager: EntryManager,
    entry: Entry,
    failure: Failure,
    *,
    now: datetime,
    using: str,
    jobs: JobCatalog | None = None,
) -> EntryError:
    """The one way an attempt ends without success, whatever ended it (the job raised, its
    worker died, ...): count the attempt, write its ``EntryError`` and its outcome record
    (unless the job keeps none, or the entry never ran), then either remove the entry for good, when ``failure.final`` or its attempts
    are used up (a cron entry then gets its successor, a unique key's window starts), or
    keep it for another attempt, its unique key still taken.

    The caller holds the entry's row and handles its group lock, in its own transaction.
    """
    attempt = entry.attempts + 1
    final = failure.final or attempt >= entry.max_attempts
    traceback = storable_text(cut_traceback(failure.traceback))
    message = storable_text(cut_message(failure.message))
    exception_class = storable_text(failure.exception_class)[:255]
    error = iq.EntryError.objects.db_manager(using).record(
        entry,
        attempt=attempt,
        exception_class=exception_class,
        message=message,
        traceback=traceback,
        worker_name=failure.worker_name,
        now=now,
        final=final,
    )
    if failure.ran and keeps_outcomes(entry, jobs):
        iq.RunOutcome.objects.db_manager(using).record_failure(
            entry,
            attempt=attempt,
            exception_class=exception_class,
            traceback=traceback or message,
            worker_name=failure.worker_name,
            started=failure.started_at,
            now=now,
        )
    rows = manager.on(using).filter(pk=entry.pk)
    if final:
        notify_ended(using, [entry.pk])
        if rows.delete()[0]:
            if entry.unique_key:
                iq.UniqueKey.objects.db_manager(using).start_windows([entry.unique_key])
            # Counted before the end releases the batch's callback (see batches.py).
            iq.Batch.objects.members_failed(using, [entry.batch_id])
        iq.EntryDependency.objects.parents_ended(
            using,
            [entry.pk],
            failure=f"failed for good ({exception_class.rsplit('.', 1)[-1]})",
            now=now,
            jobs=jobs,
        )
        if entry.cron_job_id is not None:
            _after_cron_run(entry, now, jobs, failure_status(exception_class))
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
