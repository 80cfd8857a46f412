"""Running one claim: call each entry's job, then record success or an EntryError with backoff."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Any, TypeVar

from django.utils import timezone

from django_iq import signals
from django_iq.acks import Ack, AckWriter, log_lock_lost
from django_iq.dbconn import refresh_connections, with_db_retry
from django_iq.exceptions import InvalidJobArguments, JobNotRegistered
from django_iq.limits import cut_message, format_failure
from django_iq.managers import Claim
from django_iq.models import Entry, GroupLock
from django_iq.options import JobOptions
from django_iq.registry import Job, catalog, get_job

logger = logging.getLogger(__name__)
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


@dataclass
class ClaimResult:
    """What became of a claim's entries."""

    done: int = 0
    failed: int = 0
    released: int = 0


class Processor:
    """Runs claims handed over by a scheduling thread, one entry at a time.

    With an ``AckWriter``, successes are written in batches by the writer's thread; without
    one, each is written before the next entry starts. ``on_released(claim)`` is called once
    the claim is fully written (its lock deleted or released), whichever way that happens.
    """

    def __init__(
        self,
        worker_name: str,
        on_finished: Callable[[str, float, bool], None] | None = None,
        *,
        acks: AckWriter | None = None,
        on_released: Callable[[Claim], None] | None = None,
    ) -> None:
        self.worker_name = worker_name
        self.on_finished = on_finished
        self.acks = acks
        self.on_released = on_released

    def run_claim(self, claim: Claim, should_stop: Callable[[], bool]) -> ClaimResult:
        """Run the claim's entries in order; the last outcome written also deletes the lock.

        If ``should_stop()`` turns true between entries, the rest are left pending and the lock
        is released, so another worker takes them.
        """
        result = ClaimResult()
        deferred = False
        for index, entry in enumerate(claim.entries):
            remaining = claim.entries[index + 1 :]
            if index and should_stop():
                with_db_retry(lambda: GroupLock.objects.release([claim.lock_id]), "release")
                result.released = len(claim.entries) - index
                break
            lock_id = None if remaining else claim.lock_id
            if index:
                # Recovery counts an attempt on the lock's entry: point it at the one running.
                with_db_retry(partial(GroupLock.objects.track, claim.lock_id, entry.pk), "track")
            started = time.monotonic()
            ok, deferred = self._run_entry(entry, lock_id, claim)
            if ok:
                result.done += 1
            else:
                result.failed += 1
            if self.on_finished is not None:
                self.on_finished(claim.queue, time.monotonic() - started, ok)
        if not deferred and self.on_released is not None:
            self.on_released(claim)
        return result

    def _run_entry(
        self, entry: Entry, lock_id: int | None, claim: Claim | None
    ) -> tuple[bool, bool]:
        """Run one entry; return (succeeded, lock release left to the ack writer)."""
        started = time.monotonic()
        job: Job[Any, Any] | None = None
        try:
            job = get_job(entry.job_name)
        except JobNotRegistered as exc:
            self._log_failure(entry, exc)
            self._record_failure(entry, lock_id, None, exc)
            return False, False
        malformed = stored_call_problem(entry)
        if malformed is not None:
            # A row written by hand: running it again cannot help, so the failure is final.
            refused = InvalidJobArguments(malformed)
            self._log_failure(entry, refused)
            self._record_failure(entry, lock_id, job, refused, final=True)
            return False, False
        signals.send(signals.entry_started, Entry, entry=entry, worker_name=self.worker_name)
        logger.debug("started entry=%s job=%s queue=%s", entry.pk, entry.job_name, entry.queue_id)
        # Last thing before the body: a connection the server ended while it sat idle is
        # replaced here, so the job's first query does not fail on the queue's account.
        refresh_connections()
        try:
            return_value = job.invoke(entry, self.worker_name)
        except BaseException as exc:  # the processing boundary: every failure is recorded.
            # BaseException too: in a processing thread a KeyboardInterrupt or SystemExit can
            # only come from the job itself (signals go to the main thread), so it is the job's
            # failure, and the thread must survive it.
            self._log_failure(entry, exc)
            self._record_failure(entry, lock_id, job, exc)
            return False, False
        if self.acks is not None and self._may_defer(entry, claim):
            self.acks.put(Ack(entry, lock_id, self._written_callback(entry, claim, started)))
            return True, True
        refresh_connections()
        lock_held = with_db_retry(
            lambda: Entry.objects.complete(entry, lock_id, return_value=return_value, jobs=catalog),
            "complete",
        )
        if not lock_held:
            log_lock_lost(entry)
        signals.send(
            signals.entry_finished,
            Entry,
            entry=entry,
            worker_name=self.worker_name,
            duration_seconds=time.monotonic() - started,
        )
        return True, False

    def _may_defer(self, entry: Entry, claim: Claim | None) -> bool:
        """Whether this success may be left to the ack writer: a claim of one entry (a later
        entry of a group claim must not release the lock before an earlier one's delete is
        written), with no Tasks result or cron run to record alongside."""
        return (
            self.acks is not None
            and claim is not None
            and len(claim.entries) == 1
            and entry.result_id is None
            and entry.cron_job_id is None
        )

    def _written_callback(
        self, entry: Entry, claim: Claim | None, started: float
    ) -> Callable[[bool], None]:
        duration = time.monotonic() - started

        def written(ok: bool) -> None:
            if ok:
                signals.send(
                    signals.entry_finished,
                    Entry,
                    entry=entry,
                    worker_name=self.worker_name,
                    duration_seconds=duration,
                )
            if claim is not None and self.on_released is not None:
                self.on_released(claim)

        return written

    def _log_failure(self, entry: Entry, exc: BaseException) -> None:
        """A failure that will be retried is a WARNING without traceback (the error record has
        it); the last attempt, or an unregistered job, is an ERROR with the traceback."""
        will_retry = entry.attempts + 1 < entry.max_attempts
        if isinstance(exc, JobNotRegistered):
            logger.error(
                "unregistered job entry=%s job=%s queue=%s",
                entry.pk,
                entry.job_name,
                entry.queue_id,
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
                cut_message(str(exc)),
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
            )

    def _record_failure(
        self,
        entry: Entry,
        lock_id: int | None,
        job: Job[Any, Any] | None,
        exc: BaseException,
        *,
        final: bool = False,
    ) -> None:
        refresh_connections()
        now = timezone.now()
        attempt = entry.attempts + 1
        retry_at: datetime | None = None
        if attempt < entry.max_attempts and not final:
            options = job.options if job is not None else JobOptions()
            retry_at = now + timedelta(seconds=options.retry_delay_seconds(attempt))
        kind = type(exc)
        message, traceback = format_failure(exc)
        error = with_db_retry(
            lambda: Entry.objects.fail(
                entry,
                lock_id,
                exception_class=f"{kind.__module__}.{kind.__qualname__}",
                message=message,
                traceback=traceback,
                retry_at=retry_at,
                worker_name=self.worker_name,
                now=now,
                jobs=catalog,
            ),
            "fail",
        )
        signals.send(
            signals.entry_failed, Entry, entry=entry, error=error, will_retry=not error.is_final
        )
