"""The django_iq exception hierarchy: ``IQError`` at the base, builtin bases where callers expect them."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError, OperationalError


class IQError(Exception):
    """Base class of every django_iq error."""


class ImproperlyConfiguredIQ(IQError, ImproperlyConfigured):
    """The ``DJANGO_IQ`` settings or a job declaration are wrong."""


class JobNotRegistered(IQError, LookupError):
    """A job name does not name a job registered with ``@job``."""


class InvalidJobArguments(IQError, TypeError):
    """Job arguments cannot be stored as JSON."""


class InvalidJobOptions(IQError, ValueError):
    """An option given to ``@job`` or ``using()`` is unknown or out of range."""


class QueueNotFound(IQError, LookupError):
    """A queue name is neither in the database nor declared in settings or by a job."""


class InvalidProcessName(IQError, ValueError):
    """A worker's or leader's ``name`` (``--name``), or the node name standing for it, is too
    long to make the process's name from."""


class ProcessNameTaken(IQError):
    """A running process is already registered under the name a starting one would take. Names
    carry a random part, so this is refused rather than ever resolved by replacing the running
    process's row."""


class LeadershipLost(IQError):
    """The leader's lease expired or was taken over; it must stop acting."""


class WorkerLost(IQError):
    """Recorded (never raised) when recovery finds an entry's worker dead or no longer holding it."""


class OutcomeNotStored(IQError):
    """Recorded (never raised) when the database refused a job's success even with its return
    value left out: the attempt counts as failed and is retried per the job's policy."""


class EntryCancelled(IQError):
    """Recorded (never raised) on the result of a task whose entry was cancelled before it ran."""


class DatabaseUnavailable(IQError, OperationalError):
    """The database could not be reached (down, restarting, or the connection was cut).

    Raised by ``enqueue()`` and ``enqueue_many()`` at once, without waiting or retrying, so a
    request can answer quickly; nothing was enqueued. A subclass of Django's
    ``OperationalError``, so existing handlers of that still catch it.
    """


class MigrationsNotApplied(IQError, DatabaseError):
    """django_iq's tables are missing from its database: ``manage.py migrate`` was not run
    there (or not since an upgrade).

    Raised by ``enqueue()`` and ``enqueue_many()`` in place of the driver's "table does not
    exist" error; nothing was enqueued. A subclass of Django's ``DatabaseError``, so existing
    handlers of that still catch it.
    """


class JobControl(Exception):
    """Raised by a job's body to say what becomes of its entry: ``Fail``, ``RetryAfter`` or
    ``Snooze``. Not a bug of the job: each is handled as documented in docs/howto/retries.md."""


def _seconds(seconds: object, what: str) -> float:
    # The same bound as backoff options: a year.
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, (int, float))
        or not 0 <= seconds <= 365 * 86_400
    ):
        raise InvalidJobOptions(
            f"{what} takes a number of seconds from 0 to 31,536,000 (a year), got {seconds!r:.80}."
        )
    return float(seconds)


class Fail(JobControl):
    """End the entry now as a final failure, whatever attempts it has left: ``raise
    Fail("the account was deleted")``. Its error record says so; it is not retried."""


class RetryAfter(JobControl):
    """Fail this attempt and retry in ``seconds`` (not after the job's backoff): ``raise
    RetryAfter(30)``, say for a rate-limited API that said when to come back. The attempt
    counts; with none left, the failure is final."""

    def __init__(self, seconds: float, message: str = "") -> None:
        self.seconds = _seconds(seconds, "RetryAfter")
        super().__init__(message or f"retry in {self.seconds:g} s")


class Snooze(JobControl):
    """Put the entry back to run again in ``seconds`` without counting an attempt and without
    an error record: ``raise Snooze(60)``, say for a job polling an external system until it
    is done. At most ``max_snoozes`` times (``@job(max_snoozes=...)``, else the ``MAX_SNOOZES``
    setting); the next one ends the entry as a final failure (``SnoozeLimitReached``)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = _seconds(seconds, "Snooze")
        super().__init__(f"snooze {self.seconds:g} s")


class SnoozeLimitReached(IQError):
    """Recorded (never raised) when a job snoozed more often than its ``max_snoozes``."""


class JobTimeout(BaseException):
    """Raised in a job's thread when it runs past its timeout (``@job(timeout=...)``,
    ``using(timeout=...)``, ``DEFAULT_TIMEOUT_SECONDS``); the attempt fails with it and is
    retried per the job's policy. A ``BaseException``, like ``asyncio.CancelledError``, so that
    a job's ``except Exception:`` does not swallow it. See docs/howto/timeouts.md."""


class WorkerFenced(BaseException):
    """Raised in a job's thread when its worker has not completed a heartbeat for
    ``fencing.fence_after_seconds()`` (a network partition, a hung database connection): the
    worker stops its runs before the leader may declare it dead and give their entries to
    another worker, so that an entry or a group never runs in two places. Nothing is written
    for the attempt by the cut-off worker; recovery counts it (``WorkerLost``). A
    ``BaseException``, like ``JobTimeout``, so that a job's ``except Exception:`` does not
    swallow it. See docs/howto/network-partitions.md."""


class NestedBatch(IQError, RuntimeError):
    """``django_iq.batch()`` was entered inside another batch's block: batches do not nest.
    See docs/howto/workflows.md."""


class ParentFailed(IQError):
    """Recorded (never raised) when an entry enqueued with ``using(after=[...])`` ends because a
    parent failed for good or was cancelled; its message names the parent. See
    docs/howto/workflows.md."""


class InvalidApiToken(IQError, ValueError):
    """An API token could not be made as asked: no name, a user who is not active staff, an
    expiry in the past. See docs/security.md."""


class InvalidSchedule(IQError, ValueError):
    """A cron job's schedule cannot be used: not five cron fields, no fire time to come (30
    February), an unknown time zone, an interval out of range, or a one-off time that is not
    an aware datetime a run may be set for. See docs/howto/cron.md."""


class InvalidArgument(IQError, ValueError):
    """A call of the caller's-side API (``wait()``, ``as_completed()`` and their async twins,
    ``progress()``) or ``set_progress()`` got an argument it cannot use: not an entry or an
    entry id, an entry never saved, a timeout that is negative, infinite or not a number, a
    progress that is not a finite number of 0 or more, more done than the total, a note too
    long. Nothing was written."""


class NotInJob(IQError, RuntimeError):
    """``set_progress()`` was called outside a job: only a run (a worker's, or
    ``django_iq.testing.run_jobs``) has progress to report. Nothing was written."""


class EntryNotFound(IQError, LookupError):
    """``wait()``, ``as_completed()`` or ``progress()`` was given an entry id that names no entry and no ended
    entry's records: never enqueued, or ended so long ago that its records were pruned
    (``OUTCOME_RETENTION_SECONDS``, ``ERROR_RETENTION_SECONDS``), or merged away by
    compaction. ``entry_ids`` lists them."""

    def __init__(self, entry_ids: list[int]) -> None:
        self.entry_ids = entry_ids
        shown = ", ".join(str(i) for i in entry_ids[:10]) + (" ..." if len(entry_ids) > 10 else "")
        super().__init__(
            f"no entry and no record of an ended entry with id {shown}: never enqueued, or "
            "its records were pruned"
        )


class WaitTimeout(IQError, TimeoutError):
    """``wait()`` or ``as_completed()`` reached its ``timeout`` before the entries ended; they
    may still run. ``entry_ids`` lists those that had not ended."""

    def __init__(self, entry_ids: list[int], timeout: float) -> None:
        self.entry_ids = entry_ids
        shown = ", ".join(str(i) for i in entry_ids[:10]) + (" ..." if len(entry_ids) > 10 else "")
        super().__init__(f"entry {shown} had not ended after {timeout:g} s")


class WaitRefused(IQError, RuntimeError):
    """A job called ``wait()`` or ``as_completed()`` on an entry of its own queue. Refused: the
    waiting job holds a processing thread of that queue's workers, and with every thread
    waiting so, the entries waited on would never start."""


class JobFailed(IQError):
    """``wait()``: the entry failed for good (its last attempt raised, or timed out).
    ``exception_class`` and ``message`` are those of the job's exception; ``outcome`` is the
    ``EntryOutcome``."""

    def __init__(self, outcome: Any) -> None:
        self.outcome = outcome
        self.entry_id: int = outcome.entry_id
        self.exception_class: str = outcome.exception_class
        self.message: str = outcome.message
        super().__init__(
            f"{outcome.job_name or 'the job'} (entry {outcome.entry_id}) failed: "
            f"{outcome.exception_class}: {outcome.message}"
        )


class JobCancelled(BaseException):
    """Raised in a job's thread when its run is cancelled (``django_iq.cancel()``; a coroutine
    job's task is cancelled and this is raised from it), and by ``wait()`` for a cancelled
    entry (``outcome``, ``entry_id``: which, and when). A ``BaseException``, like
    ``asyncio.CancelledError`` and ``JobTimeout``, so that a job's or a caller's
    ``except Exception:`` does not take a cancel for an ordinary error."""

    def __init__(self, outcome: Any = None) -> None:
        if outcome is None or isinstance(outcome, str):
            self.outcome = None
            self.entry_id: int | None = None
            super().__init__(outcome or "The run was cancelled.")
            return
        self.outcome = outcome
        self.entry_id = outcome.entry_id
        super().__init__(
            f"{outcome.job_name or 'the job'} (entry {outcome.entry_id}) was cancelled"
        )


class JobExpired(IQError):
    """``wait()``: the entry expired (``@job(expires=...)``, ``using(expires=...)``): it was not
    started before its expiry, or, after failed attempts, not started again (its retry was due
    after the expiry). ``outcome`` says when it ended and which attempt did not start."""

    def __init__(self, outcome: Any) -> None:
        self.outcome = outcome
        self.entry_id: int = outcome.entry_id
        before = "it started"
        if outcome.attempt and outcome.attempt > 1:
            before = f"its retry started ({outcome.attempt - 1} attempt(s) had failed)"
        super().__init__(
            f"{outcome.job_name or 'the job'} (entry {outcome.entry_id}) expired before {before}"
        )


class EntryExpired(IQError):
    """Recorded (never raised) as the exception class of an entry that expired before it
    started."""
