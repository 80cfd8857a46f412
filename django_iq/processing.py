"""Running one claim: call each entry's job, then record success or an EntryError with backoff."""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial
from typing import Any, TypeVar

from django.db import DatabaseError
from django.utils import timezone

from django_iq import signals, tracing
from django_iq.acks import Ack, AckWriter
from django_iq.bounds import cut_message, exception_class_name, exception_text, format_failure
from django_iq.conf import iq_settings
from django_iq.context import HeldProgress
from django_iq.dbconn import is_transient, refresh_connections, with_db_retry
from django_iq.disabled_jobs import DisabledJobs
from django_iq.exceptions import (
    InvalidJobArguments,
    JobCancelled,
    JobNotRegistered,
    JobTimeout,
    RetryAfter,
    Snooze,
)
from django_iq.logs import get_logger, run_fields
from django_iq.managers import Claim
from django_iq.managers.series import ready_at
from django_iq.models import Batch, Entry, EntryError, GroupLock
from django_iq.options import JobOptions
from django_iq.progress_reports import end_run
from django_iq.registry import Job, catalog, get_job
from django_iq.timeouts import Watch, Watchdog

logger = get_logger(__name__)
T = TypeVar("T")


def stored_call_problem(entry: Entry) -> str | None:
    """Say what is wrong with an entry's stored call, or None if it can be made: ``args`` must
    be a JSON array and ``kwargs`` an object (rows written by hand may hold anything)."""
    if not isinstance(entry.args, list):
        return (
            f"Entry {entry.pk} cannot run: its stored args must be a JSON array, "
            f"got {type(entry.args).__name__} {entry.args!r:.80}."
        )
    if not isinstance(entry.kwargs, dict) or not all(isinstance(k, str) for k in entry.kwargs):
        return (
            f"Entry {entry.pk} cannot run: its stored kwargs must be a JSON object, "
            f"got {type(entry.kwargs).__name__} {entry.kwargs!r:.80}."
        )
    return None


class _Snoozed:
    """The type of ``PUT_BACK``: an entry's run raised ``Snooze`` and was put back."""


PUT_BACK = _Snoozed()


class _Cancelled:
    """The type of ``CANCELLED_RUN``: the run's cancel reached the worker; it ended as
    cancelled."""


CANCELLED_RUN = _Cancelled()


class _Abandoned:
    """The type of ``ABANDONED``: the run went on past its timeout's grace period, and the
    worker gave its entry (and its claim) up; nothing more is written for them here."""


ABANDONED = _Abandoned()


class _Fenced:
    """The type of ``FENCED``: the run was going on (or about to start) when its worker fenced
    itself, cut off from the database; nothing is written for it here, and its claim stays
    held for recovery, which counts the attempt."""


FENCED = _Fenced()


@dataclass
class ClaimResult:
    """What became of a claim's entries."""

    done: int = 0
    failed: int = 0
    snoozed: int = 0
    # Entries found past their expiry before they started: ended without running.
    expired: int = 0
    # Entries whose cancel reached the worker, before they started or while they ran.
    cancelled: int = 0
    released: int = 0
    # Job name, seconds and success of each entry run, in order.
    runs: list[tuple[str, float, bool]] = field(default_factory=list)
    # Start time and enqueue-to-start latency (seconds since the entry became ready, as
    # ``series.ready_at`` says) of each entry started, in order.
    starts: list[tuple[datetime, float]] = field(default_factory=list)
    # The claim was given up while one of its jobs was stuck past its timeout.
    abandoned: bool = False
    # The worker fenced itself during the claim: its lock stays held, nothing more is written.
    fenced: bool = False
    # Whether the claim is settled (its lock gone or released) when ``run_claim`` returns;
    # otherwise the ack writer settles it once it writes the claim's last success.
    settled: bool = True


# How a run ended, as ``RunEnd.status`` says.
SUCCEEDED, RETRYING, FAILED, SNOOZED = "succeeded", "retrying", "failed", "snoozed"
EXPIRED, CANCELLED = "expired", "cancelled"


@dataclass(frozen=True)
class RunEnd:
    """How one run of an entry ended, as a processor's ``on_run_end`` observer is told it.

    ``status`` is ``SUCCEEDED`` (handed to the ack writer with ``return_value``), ``RETRYING``
    (the attempt failed and the entry waits for its retry), ``FAILED`` (final: the entry is
    gone, ``error`` is its final record), ``SNOOZED``, ``EXPIRED`` (not started: its expiry
    had passed) or ``CANCELLED`` (its cancel reached the worker). ``attempt`` is the attempt this run
    was; ``exception`` what the job raised. Runs given up past their timeout, cut off by a
    fence, or handed back unstarted end without a call.
    """

    entry: Entry
    attempt: int
    status: str
    return_value: Any = None
    exception: BaseException | None = None
    error: EntryError | None = None


class Processor:
    """Runs claims handed over by a scheduling thread, one entry at a time.

    Every success goes to the ``AckWriter``, which writes it in a batch; a failure is written
    at once through ``Entry.objects.fail``, after the claim's earlier successes when it gives
    the lock up.
    """

    def __init__(
        self,
        worker_name: str,
        acks: AckWriter,
        watchdog: Watchdog | None = None,
        disabled: DisabledJobs | None = None,
        on_run_end: Callable[[RunEnd], None] | None = None,
        cancels: set[int] | None = None,
    ) -> None:
        """``on_run_end(run_end)`` is told how each run ended, in the processing thread, once
        its outcome is written (a success: handed to ``acks``). ``cancels``: the ids of
        claimed entries whose cancel reached the worker (they end before they start)."""
        self.worker_name = worker_name
        self.cancels = cancels
        self.on_run_end = on_run_end
        self.acks = acks
        # Times runs out; without one (or with no timeout for an entry) runs are not timed.
        self.watchdog = watchdog
        # Entries of a job disabled since the claim are handed back, not started.
        self.disabled = disabled

    def run_claim(self, claim: Claim, should_stop: Callable[[], bool]) -> ClaimResult:
        """Run the claim's entries in order; the last outcome written also deletes the lock.

        If ``should_stop()`` turns true between entries, the rest are left pending and the lock
        is released, so another worker takes them. So are they, from the first, when the next
        entry's job was disabled since the claim (no attempt counted): enabled, it runs again.
        """
        result = ClaimResult()
        written: list[Ack] = []  # this claim's successes handed to the writer
        for index, entry in enumerate(claim.entries):
            if self.watchdog is not None and self.watchdog.fenced:
                result.fenced = True
                break
            disabled = self.disabled is not None and entry.job_name in self.disabled.names()
            if disabled or (index and should_stop()):
                # The lock covers the successes still being written: they go first.
                self.acks.wait_for(written)
                with_db_retry(lambda: GroupLock.objects.release([claim.lock_id]), "release")
                result.released = len(claim.entries) - index
                if disabled:
                    logger.info(
                        "claim lock=%s handed back unstarted: job %s is disabled entries=%s",
                        claim.lock_id,
                        entry.job_name,
                        result.released,
                    )
                break
            last = index == len(claim.entries) - 1
            if entry.expires_at is not None and timezone.now() >= entry.expires_at:
                self._expired(entry, claim.lock_id if last else None, written)
                result.expired += 1
                continue
            if entry.cancel_requested_at is not None or (
                self.cancels is not None and entry.pk in self.cancels
            ):
                self._cancelled(entry, claim.lock_id if last else None, written)
                result.cancelled += 1
                continue
            if index:
                # Recovery counts an attempt on the lock's entry: point it at the one running.
                with_db_retry(partial(GroupLock.objects.track, claim.lock_id, entry.pk), "track")
            started = time.monotonic()
            started_at = timezone.now()
            result.starts.append(
                (
                    started_at,
                    (started_at - ready_at(entry.enqueued_at, entry.run_at)).total_seconds(),
                )
            )
            ack = self._run_entry(entry, claim, last, written, started_at)
            if isinstance(ack, _Abandoned):
                result.abandoned = True
                break
            if isinstance(ack, _Fenced):
                result.fenced = True
                break
            if isinstance(ack, _Snoozed):
                result.snoozed += 1
                continue
            if isinstance(ack, _Cancelled):
                result.cancelled += 1
                continue
            result.runs.append((entry.job_name, time.monotonic() - started, ack is not None))
            if ack is None:
                result.failed += 1
                continue
            result.done += 1
            written.append(ack)
            if last:
                result.settled = False
        return result

    def _run_entry(
        self, entry: Entry, claim: Claim, last: bool, written: list[Ack], started_at: datetime
    ) -> Ack | _Snoozed | _Abandoned | _Fenced | _Cancelled | None:
        """Run one entry, started at ``started_at``; return its acknowledgement, handed to the
        writer, ``PUT_BACK`` if it snoozed, ``ABANDONED`` if it was given up past its timeout, or
        None if it failed (the outcome is written)."""
        started = time.monotonic()
        attempt = entry.attempts + 1
        lock_id = claim.lock_id if last else None
        try:
            job = get_job(entry.job_name)
        except JobNotRegistered as exc:
            self._failed(entry, lock_id, written, None, exc, started_at=started_at)
            return None
        malformed = stored_call_problem(entry)
        if malformed is not None:
            # A row written by hand: running it again cannot help, so the failure is final.
            refused = InvalidJobArguments(malformed)
            self._failed(entry, lock_id, written, job, refused, final=True, started_at=started_at)
            return None
        if "batch_id" in entry.kwargs:
            # Perhaps a batch's callback: it runs with the counts as they are now, final.
            counted = with_db_retry(lambda: Batch.objects.callback_kwargs(entry), "batch counts")
            if counted is not None:
                entry.kwargs = counted
        signals.send(signals.entry_started, Entry, entry=entry, worker_name=self.worker_name)
        if logger.isEnabledFor(logging.DEBUG):  # its fields are built only for a DEBUG log
            logger.debug(
                "started entry=%s job=%s queue=%s",
                entry.pk,
                entry.job_name,
                entry.queue_id,
                extra=self._fields(entry),
            )
        # Last thing before the body: a connection the server ended while it sat idle is
        # replaced here, so the job's first query does not fail on the queue's account.
        refresh_connections()
        timeout = entry.timeout_seconds
        if timeout is None:
            timeout = iq_settings.DEFAULT_TIMEOUT_SECONDS
        # Every run is watched, with a timeout or not: the watchdog also fences them.
        watchdog = self.watchdog
        watch = None
        if watchdog is not None:
            # A coroutine is cancelled at its deadline by its own event loop (Job.invoke).
            watch = Watch(
                entry, timeout, interrupt=not job.is_async, context=(claim, written, started_at)
            )
        # The run's progress reports; the one still held is written once the run can no
        # longer be timed out (each path below, after the watch is settled), before its
        # outcome: none for a success (its entry goes with the acknowledgement), nor for a
        # run given up or fenced (this thread may write nothing for it).
        # Counted from the start: a run shorter than the interval writes no report at all.
        held = HeldProgress(entry.pk, claim.lock_id, entry.job_name, written_at=started)
        try:
            try:
                if watchdog is not None and watch is not None:
                    watchdog.arm(watch)
                with tracing.running(entry, attempt, self.worker_name):
                    return_value = job.invoke(entry, self.worker_name, timeout, claim.lock_id, held)
            finally:
                # From here no JobTimeout is raised in this thread (see timeouts.py); the one
                # already raised may still surface here, once, and is handled below.
                if watchdog is not None and watch is not None:
                    watchdog.settle(watch)
        except Snooze as snooze:
            if self._abandoned(watch):
                return ABANDONED
            if watch is not None and watch.fenced:
                return FENCED
            end_run(held)
            if watch is not None and watch.cancelled:
                self._cancelled(entry, lock_id, written, started_at=started_at, exc=snooze)
                return CANCELLED_RUN
            self._snoozed(entry, lock_id, written, job, snooze, started_at)
            return PUT_BACK
        except BaseException as exc:  # the processing boundary: every failure is recorded.
            # BaseException too: in a processing thread a KeyboardInterrupt or SystemExit can
            # only come from the job itself (signals go to the main thread), so it is the job's
            # failure, and the thread must survive it.
            if self._abandoned(watch):
                return ABANDONED
            if watch is not None and watch.fenced:
                logger.warning(
                    "run stopped entry=%s job=%s: this worker is cut off from the database; "
                    "its attempt is left for recovery to count",
                    entry.pk,
                    entry.job_name,
                    extra=self._fields(entry, started_at=started_at),
                )
                return FENCED
            end_run(held)
            if watch is not None and watch.cancelled:
                self._cancelled(entry, lock_id, written, started_at=started_at, exc=exc)
                return CANCELLED_RUN
            if isinstance(exc, JobTimeout) and watch is not None and not exc.args:
                exc = JobTimeout(watch.message()).with_traceback(exc.__traceback__)
            self._failed(entry, lock_id, written, job, exc, started_at=started_at)
            return None
        if self._abandoned(watch):
            return ABANDONED
        if watch is not None and watch.fenced:
            return FENCED
        end_run(held, write=False)
        if watch is not None and watch.cancelled:
            # It returned, perhaps having seen cancel_requested(): cancelled all the same.
            self._cancelled(entry, lock_id, written, started_at=started_at)
            return CANCELLED_RUN
        ack = Ack(
            entry,
            lock_id,
            return_value=return_value,
            finished_at=timezone.now(),
            duration_seconds=time.monotonic() - started,
            claim=claim,
        )
        self.acks.put(ack)
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug(
                "succeeded entry=%s job=%s queue=%s attempt=%s duration=%.3fs",
                entry.pk,
                entry.job_name,
                entry.queue_id,
                attempt,
                ack.duration_seconds,
                extra=self._fields(entry, SUCCEEDED, duration=ack.duration_seconds),
            )
        self._ended(RunEnd(entry, attempt, SUCCEEDED, return_value=return_value))
        return ack

    def _fields(
        self,
        entry: Entry,
        outcome: str | None = None,
        *,
        started_at: datetime | None = None,
        duration: float | None = None,
    ) -> dict[str, Any]:
        """The structured fields of a record about ``entry``'s run (django_iq/logs.py): its
        duration is ``duration``, or the time since ``started_at``."""
        if duration is None and started_at is not None:
            duration = (timezone.now() - started_at).total_seconds()
        return run_fields(entry, duration=duration, outcome=outcome, worker=self.worker_name)

    def _ended(self, run_end: RunEnd) -> None:
        if self.on_run_end is not None:
            self.on_run_end(run_end)

    def _abandoned(self, watch: Watch | None) -> bool:
        """Settle the watch (again: the first time may have been cut short by the timeout);
        True if the watchdog gave the run up, so that this thread writes nothing for it."""
        return watch is not None and self.watchdog is not None and self.watchdog.settle(watch)

    def give_up(self, watch: Watch) -> None:
        """Fail a run stuck past its timeout's grace period as timed out, in place of its
        thread (its attempt counts), keeping the claim's lock: the run goes on until its process
        exits, so the claim's entries and group start again only once whoever releases the
        lock knows the run is over. Called once the watchdog has taken the run from its thread.
        """
        entry = watch.entry
        claim, _, started_at = watch.context
        if watch.cancelled:
            # Cancelled, and still going on: it ends as cancelled, its lock kept until the
            # process is gone.
            stuck = JobCancelled(
                f"The run was cancelled and had not returned {iq_settings.TIMEOUT_GRACE_SECONDS:g}"
                " s after JobCancelled was raised in it (blocked outside Python code), so it was "
                "given up and its worker process exited at once, to be replaced."
            )
            logger.error(
                "cancelled run given up entry=%s job=%s",
                entry.pk,
                entry.job_name,
                extra=self._fields(entry, CANCELLED, started_at=started_at),
            )
            self._cancelled(
                entry, claim.lock_id, [], started_at=started_at, exc=stuck, keep_lock=True
            )
            return
        exc = JobTimeout(
            f"{watch.message()} It had not returned {iq_settings.TIMEOUT_GRACE_SECONDS:g} s "
            "after JobTimeout was raised in it (blocked outside Python code), so it was given "
            "up and its worker process exited at once, to be replaced."
        )
        try:
            job: Job[Any, Any] | None = get_job(entry.job_name)
        except JobNotRegistered:
            job = None
        self._log_failure(entry, exc, job, final=False, started_at=started_at)
        self._record_failure(entry, claim.lock_id, job, exc, started_at=started_at, keep_lock=True)

    def _failed(
        self,
        entry: Entry,
        lock_id: int | None,
        written: list[Ack],
        job: Job[Any, Any] | None,
        exc: BaseException,
        *,
        final: bool = False,
        started_at: datetime | None = None,
    ) -> EntryError:
        """Log and record a failed attempt; return its error record."""
        attempt = entry.attempts + 1
        self._log_failure(entry, exc, job, final=final, started_at=started_at)
        if lock_id is not None:
            # This failure gives the lock up: the claim's successes it covers are written first.
            self.acks.wait_for(written)
        error = self._record_failure(entry, lock_id, job, exc, final=final, started_at=started_at)
        status = FAILED if error.is_final else RETRYING
        self._ended(RunEnd(entry, attempt, status, exception=exc, error=error))
        return error

    def _cancelled(
        self,
        entry: Entry,
        lock_id: int | None,
        written: list[Ack],
        *,
        started_at: datetime | None = None,
        exc: BaseException | None = None,
        keep_lock: bool = False,
    ) -> None:
        """End an entry whose cancel reached this worker: before it started (``started_at``
        None) or once its run ended, however it ended (``exc``: what it raised)."""
        if lock_id is not None and not keep_lock:
            # The lock goes: the claim's successes it covers are written first.
            self.acks.wait_for(written)
        refresh_connections()
        trace = ""
        if exc is not None:
            trace = "".join(traceback.format_exception(exc))
        with_db_retry(
            lambda: Entry.objects.cancel_run(
                entry,
                lock_id,
                started_at=started_at,
                worker_name=self.worker_name,
                traceback=trace,
                jobs=catalog,
                keep_lock=keep_lock,
            ),
            "cancel_run",
        )
        logger.info(
            "cancelled entry=%s job=%s queue=%s %s",
            entry.pk,
            entry.job_name,
            entry.queue_id,
            "before it started" if started_at is None else "while it ran",
            extra=self._fields(entry, CANCELLED, started_at=started_at),
        )
        self._ended(RunEnd(entry, entry.attempts + 1, CANCELLED, exception=exc))

    def _expired(self, entry: Entry, lock_id: int | None, written: list[Ack]) -> None:
        """End an entry whose expiry passed before it started, without running it."""
        if lock_id is not None:
            # The lock goes: the claim's successes it covers are written first.
            self.acks.wait_for(written)
        refresh_connections()
        with_db_retry(
            lambda: Entry.objects.expire(entry, lock_id, jobs=catalog),
            "expire",
        )
        logger.info(
            "expired before it started entry=%s job=%s queue=%s expires_at=%s",
            entry.pk,
            entry.job_name,
            entry.queue_id,
            entry.expires_at.isoformat() if entry.expires_at else "",
            extra=self._fields(entry, EXPIRED),
        )
        self._ended(RunEnd(entry, entry.attempts + 1, EXPIRED))

    def _snoozed(
        self,
        entry: Entry,
        lock_id: int | None,
        written: list[Ack],
        job: Job[Any, Any],
        snooze: Snooze,
        started_at: datetime,
    ) -> EntryError | None:
        """Put the entry back until the snooze ends; return the final error record if it had
        snoozed too often, else None."""
        attempt = entry.attempts + 1
        if lock_id is not None:
            # The lock goes: the claim's successes it covers are written first.
            self.acks.wait_for(written)
        refresh_connections()
        now = timezone.now()
        until = now + timedelta(seconds=snooze.seconds)
        error = with_db_retry(
            lambda: Entry.objects.snooze(
                entry,
                lock_id,
                until=until,
                max_snoozes=job.options.effective_max_snoozes,
                worker_name=self.worker_name,
                now=now,
                jobs=catalog,
                started_at=started_at,
            ),
            "snooze",
        )
        if error is None:
            logger.debug(
                "snoozed entry=%s job=%s until=%s",
                entry.pk,
                entry.job_name,
                until,
                extra=self._fields(entry, SNOOZED, started_at=started_at),
            )
            self._ended(RunEnd(entry, attempt, SNOOZED, exception=snooze))
            return None
        logger.error(
            "job failed for good entry=%s job=%s queue=%s: %s",
            entry.pk,
            entry.job_name,
            entry.queue_id,
            error.message,
            extra=self._fields(entry, FAILED, started_at=started_at),
        )
        signals.send(
            signals.entry_failed,
            Entry,
            entry=entry,
            error=error,
            will_retry=False,
            exception=snooze,
        )
        self._ended(RunEnd(entry, attempt, FAILED, exception=snooze, error=error))
        return error

    def _log_failure(
        self,
        entry: Entry,
        exc: BaseException,
        job: Job[Any, Any] | None,
        *,
        final: bool,
        started_at: datetime | None = None,
    ) -> None:
        """A failure that will be retried is a WARNING without traceback (the error record has
        it); the last attempt, or an unregistered job, is an ERROR with the traceback. Whatever
        the exception's own code does while it is logged, the failure is still recorded."""
        try:
            self._log_failure_as_is(entry, exc, job, final=final, started_at=started_at)
        except BaseException:  # the exception's code ran in the logging: a line of our own
            logger.error(
                "job raised entry=%s job=%s queue=%s: its exception could not be logged",
                entry.pk,
                entry.job_name,
                entry.queue_id,
                extra=self._fields(entry, started_at=started_at),
            )

    def _log_failure_as_is(
        self,
        entry: Entry,
        exc: BaseException,
        job: Job[Any, Any] | None,
        *,
        final: bool,
        started_at: datetime | None,
    ) -> None:
        options = job.options if job is not None else JobOptions()
        will_retry = entry.attempts + 1 < entry.max_attempts and not final and options.retries(exc)
        fields = self._fields(entry, RETRYING if will_retry else FAILED, started_at=started_at)
        if isinstance(exc, JobNotRegistered):
            logger.error(
                "unregistered job entry=%s job=%s queue=%s",
                entry.pk,
                entry.job_name,
                entry.queue_id,
                extra=fields,
            )
        elif will_retry:
            logger.warning(
                "job raised entry=%s job=%s queue=%s attempt=%s/%s error=%s: %s",
                entry.pk,
                entry.job_name,
                entry.queue_id,
                entry.attempts + 1,
                entry.max_attempts,
                type(exc).__name__,
                cut_message(exception_text(exc)),
                extra=fields,
            )
        else:
            # The traceback as stored, cut like it: a megabyte message is not logged whole.
            logger.error(
                "job failed for good entry=%s job=%s queue=%s attempt=%s/%s\n%s",
                entry.pk,
                entry.job_name,
                entry.queue_id,
                entry.attempts + 1,
                entry.max_attempts,
                format_failure(exc)[1].rstrip(),
                extra=fields,
            )

    def _record_failure(
        self,
        entry: Entry,
        lock_id: int | None,
        job: Job[Any, Any] | None,
        exc: BaseException,
        *,
        final: bool = False,
        started_at: datetime | None = None,
        keep_lock: bool = False,
    ) -> EntryError:
        refresh_connections()
        now = timezone.now()
        attempt = entry.attempts + 1
        retry_at: datetime | None = None
        options = job.options if job is not None else JobOptions()
        if attempt < entry.max_attempts and not final and options.retries(exc):
            delay = (
                exc.seconds if isinstance(exc, RetryAfter) else options.retry_delay_seconds(attempt)
            )
            retry_at = now + timedelta(seconds=delay)
        message, traceback = format_failure(exc)

        def fail(message: str, traceback: str) -> EntryError:
            return with_db_retry(
                lambda: Entry.objects.fail(
                    entry,
                    lock_id,
                    exception_class=exception_class_name(exc),
                    message=message,
                    traceback=traceback,
                    retry_at=retry_at,
                    worker_name=self.worker_name,
                    now=now,
                    jobs=catalog,
                    started_at=started_at,
                    keep_lock=keep_lock,
                ),
                "fail",
                retry_if=is_transient,
            )

        try:
            error = fail(message, traceback)
        except Exception as write_error:
            if isinstance(write_error, DatabaseError) and is_transient(write_error):
                raise
            # The record itself was refused (its text, say): the attempt still counts, with
            # a record that says so in place of the text, never a run lost uncounted.
            logger.exception(
                "could not record the failure of entry=%s as it is",
                entry.pk,
                extra=self._fields(entry, started_at=started_at),
            )
            refresh_connections()
            error = fail(
                f"<the failure could not be recorded as it is: {type(write_error).__name__}>",
                "",
            )
        signals.send(
            signals.entry_failed,
            Entry,
            entry=entry,
            error=error,
            will_retry=not error.is_final,
            exception=exc,
        )
        return error
