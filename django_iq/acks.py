"""Acknowledgements: the one way a success is written, many jobs to a transaction.

A processing thread that finished a job hands its acknowledgement (the entry, its return value,
and the group lock if it was the claim's last entry) to the ``AckWriter`` and takes its next
entry or claim at once. The writer's thread writes every acknowledgement handed over meanwhile
with ``Entry.objects.complete_many`` in one transaction (entries, outcome records, cron runs,
locks), one commit for many jobs, then sends ``entry_finished`` for each and settles each claim
whose last entry it wrote through the writer's one callback.

Nothing is weakened by the wait. Until the acknowledgement is written the entry keeps its
group lock, so no worker can claim it, and the claim stays in the worker's held set, so the
heartbeat keeps reporting it and recovery leaves it alone. If the process dies first, the entry
is recovered and runs again, exactly as if it had died while the job ran. A processing thread
that is about to give a claim's lock up some other way (a failure of its last entry, a release
at shutdown) first waits for that claim's acknowledgements (``wait_for``): the lock must not go
before the successes it covers are written.

A batch the database refuses for a reason other than being unreachable is written again one
success at a time. A success it still refuses (its return value, a constraint or trigger of the
project's) is written with the "not kept" marker in place of its return value, and if even that
is refused, its attempt ends as failed (``OutcomeNotStored``), counted: no refusal turns into a
run released and repeated without ever being counted.

A success that cannot be written at all (the database away past the retries, the failure record
refused too, a bug) is lost, never settled: the writer's ``on_lost`` callback tells the worker,
which keeps the claim's lock reported and stops to be replaced. Its stop marks it stopped, and
recovery then releases the lock counting the attempt.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from django.db import InterfaceError, OperationalError, connections
from django.utils import timezone

from django_iq import signals
from django_iq.bounds import exception_class_name
from django_iq.dbconn import SharedConnection, is_transient, refresh_connections, with_db_retry
from django_iq.exceptions import JobNotRegistered, OutcomeNotStored
from django_iq.logs import get_logger, run_fields
from django_iq.managers import Claim, Success
from django_iq.managers.outcome_records import not_kept, started_at
from django_iq.models import Entry
from django_iq.options import JobOptions
from django_iq.registry import catalog, get_job

logger = get_logger(__name__)

# At most this many acknowledgements per transaction.
ACK_BATCH_SIZE = 500
# Tries of a batch the database refuses with an operational error that is neither an outage nor
# a lost lock conflict, before it is written one by one.
REFUSALS_RETRIED = 3


def log_lock_lost(entry: Entry) -> None:
    """A success written after recovery had released the entry's lock (see ``complete``)."""
    logger.warning(
        "lock lost entry=%s job=%s: recovery released it while it ran",
        entry.pk,
        entry.job_name,
        extra=run_fields(entry, outcome="succeeded"),
    )


def _fields(ack: Ack) -> dict[str, Any]:
    """The structured fields of a record about a success being written (django_iq/logs.py)."""
    return run_fields(ack.entry, outcome="succeeded", duration=ack.duration_seconds)


@dataclass
class Ack:
    """A finished job whose success is still to be written."""

    entry: Entry
    # Given for the claim's last entry: the group lock goes with it and the claim is settled.
    lock_id: int | None
    return_value: Any = None
    finished_at: datetime | None = None
    duration_seconds: float = 0.0
    claim: Claim | None = None
    # Set once the success is written or given up on.
    done: threading.Event = field(default_factory=threading.Event)

    def success(self, worker_name: str = "") -> Success:
        return Success(
            self.entry,
            self.lock_id,
            self.return_value,
            self.finished_at,
            worker_name=worker_name,
            duration_seconds=self.duration_seconds,
        )


class AckWriter:
    """Collects acknowledgements and writes them in batches from a thread of its own."""

    def __init__(
        self,
        worker_name: str = "",
        on_settled: Callable[[Claim], None] | None = None,
        batch_size: int = ACK_BATCH_SIZE,
        on_lost: Callable[[Claim, Entry], None] | None = None,
        shared: SharedConnection | None = None,
    ) -> None:
        """``on_settled(claim)`` is called once the claim's last outcome is written (its lock
        is then gone). ``on_lost(claim, entry)`` is called instead when the outcome of
        ``entry`` could not be written at all: the claim's lock is still held, and only
        recovery, once the worker has stopped, may release it (counting the attempt).
        ``shared``: a connection the writer takes turns on with other threads (the worker's
        duty connection), instead of one of its own."""
        self.worker_name = worker_name
        self.on_settled = on_settled
        self.on_lost = on_lost
        self.shared = shared
        self.batch_size = batch_size
        self._pending: list[Ack] = []
        self._condition = threading.Condition()
        self._closing = False
        self._writing = 0  # acknowledgements taken from _pending, not yet written
        self._thread: threading.Thread | None = None
        self.written = 0

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="iq-acks", daemon=True)
        self._thread.start()

    def put(self, ack: Ack) -> None:
        with self._condition:
            self._pending.append(ack)
            self._condition.notify()

    def wait_for(self, acks: Iterable[Ack]) -> None:
        """Return once each of ``acks`` is written or given up on, or the writer has stopped."""
        for ack in acks:
            while not ack.done.wait(0.5):
                if self._thread is not None and not self._thread.is_alive():
                    return

    def pending(self) -> int:
        """Acknowledgements not yet written, the batch being written included."""
        with self._condition:
            return len(self._pending) + self._writing

    def close(self, timeout: float = 30.0) -> None:
        """Write what is pending, then stop the thread (waits at most ``timeout`` seconds)."""
        with self._condition:
            self._closing = True
            self._condition.notify()
        if self._thread is not None:
            self._thread.join(timeout)

    def _loop(self) -> None:
        try:
            while True:
                with self._condition:
                    while not self._pending and not self._closing:
                        self._condition.wait()
                    if not self._pending:
                        return
                    batch = self._pending[: self.batch_size]
                    del self._pending[: len(batch)]
                    self._writing = len(batch)
                try:
                    with self._connection():
                        self._write(batch)
                except Exception:  # the thread must outlive any bug: its claims would hang
                    logger.exception("ack writer failed on %s finished jobs", len(batch))
                    self._lose([ack for ack in batch if not ack.done.is_set()])
                finally:
                    with self._condition:
                        self._writing = 0
        finally:
            connections.close_all()

    def _connection(self) -> AbstractContextManager[None]:
        return self.shared.use() if self.shared is not None else nullcontext()

    def _write(self, batch: list[Ack]) -> None:
        """Write ``batch``, retrying while the database is unreachable. Only once the writer
        is closing does it give up (after three tries): the successes are lost, and the entries
        run again after recovery, counted. A batch the database refuses is written one by one
        (``_write_one``)."""
        successes = [ack.success(self.worker_name) for ack in batch]
        refusals = 0

        def write() -> set[int]:
            refresh_connections()
            return Entry.objects.complete_many(successes, jobs=catalog)

        def retry_if(exc: BaseException) -> bool:
            nonlocal refusals
            if not isinstance(exc, (OperationalError, InterfaceError)):
                return False
            if is_transient(exc):
                return True
            # An operational error of the statement's own (MariaDB reports a trigger's
            # SIGNAL so): tried a few times, then it is a refusal like any other.
            refusals += 1
            return refusals < REFUSALS_RETRIED

        try:
            # Short waits: while successes wait, their entries stay locked and claiming stops,
            # so the batch is written as soon as the database answers again.
            lost = with_db_retry(
                write,
                f"writing {len(batch)} finished jobs",
                retry_if=retry_if,
                attempts=None,
                delay=lambda attempt: min(1.0, 0.1 * attempt),
                before_retry=connections.close_all,
                give_up=lambda attempt: self._closing and attempt >= 3,
            )
        except Exception as exc:
            connections.close_all()
            if isinstance(exc, (OperationalError, InterfaceError)) and is_transient(exc):
                logger.error(
                    "could not write %s finished jobs at shutdown: they will run again "
                    "after recovery; error=%s",
                    len(batch),
                    exc,
                )
                self._lose(batch)
                return
            # One bad row must not cost the batch: write them one by one.
            logger.exception("could not write %s finished jobs together", len(batch))
            self._write_one_by_one(batch)
            return
        self.written += len(batch)
        for ack in batch:
            if ack.lock_id is not None and ack.lock_id in lost:
                log_lock_lost(ack.entry)
        self.settle(batch, written=True)

    def _write_one_by_one(self, batch: list[Ack]) -> None:
        for ack in batch:
            self._write_one(ack, ack.success(self.worker_name), refused=None)

    def _write_one(self, ack: Ack, success: Success, refused: Exception | None) -> None:
        """Write one success. If the database refuses it for a reason of its own (not being
        unreachable), write it again with the "not kept" marker for its return value; if that
        is refused too (``refused`` is the first refusal), end the attempt as failed
        (``OutcomeNotStored``), counted like any other: the entry never runs again uncounted.
        The database being away is waited out (a few tries); past them the success is lost."""

        def write() -> set[int]:
            refresh_connections()
            return Entry.objects.complete_many([success], jobs=catalog)

        try:
            lost = with_db_retry(
                write,
                f"writing the success of entry={ack.entry.pk}",
                retry_if=is_transient,
                before_retry=connections.close_all,
                give_up=lambda attempt: self._closing and attempt >= 3,
            )
            if ack.lock_id in lost:
                log_lock_lost(ack.entry)
        except Exception as exc:
            connections.close_all()
            if is_transient(exc):
                logger.exception(
                    "could not write the success of entry=%s",
                    ack.entry.pk,
                    extra=_fields(ack),
                )
                self._lose([ack])
            elif refused is None:
                logger.exception(
                    "could not write the success of entry=%s; writing it without its return value",
                    ack.entry.pk,
                    extra=_fields(ack),
                )
                why = f"the database refused it: {type(exc).__name__}: {exc}"
                self._write_one(ack, replace(success, return_value=not_kept(why)), refused=exc)
            else:
                logger.exception(
                    "could not write the success of entry=%s at all",
                    ack.entry.pk,
                    extra=_fields(ack),
                )
                self._fail_attempt(ack, refused)
            return
        self.written += 1
        self.settle([ack], written=True)

    def _fail_attempt(self, ack: Ack, refused: Exception) -> None:
        """Count the attempt of ``ack`` as failed, its success unwritable, and retry it per
        its job's policy; the outcome is lost (``on_lost``) if even that cannot be written."""
        entry = ack.entry
        now = timezone.now()
        attempt = entry.attempts + 1
        retry_at = None
        try:
            options = get_job(entry.job_name).options
        except JobNotRegistered:
            options = JobOptions()
        if attempt < entry.max_attempts:
            retry_at = now + timedelta(seconds=options.retry_delay_seconds(attempt))
        try:
            refresh_connections()
            error = with_db_retry(
                lambda: Entry.objects.fail(
                    entry,
                    ack.lock_id,
                    exception_class=exception_class_name(OutcomeNotStored()),
                    message=(
                        "The job returned, but the database refused its success even without "
                        f"its return value: {type(refused).__name__}: {refused}"
                    ),
                    traceback="",
                    retry_at=retry_at,
                    worker_name=self.worker_name,
                    now=now,
                    jobs=catalog,
                    started_at=started_at(ack.finished_at or now, ack.duration_seconds),
                ),
                "fail",
                retry_if=is_transient,
            )
        except Exception:  # the last resort: the claim stays held until its worker stops
            logger.exception("could not record the failure of entry=%s", entry.pk)
            connections.close_all()
            self._lose([ack])
            return
        signals.send(
            signals.entry_failed,
            Entry,
            entry=entry,
            error=error,
            will_retry=not error.is_final,
            exception=refused,
        )
        self.settle([ack], written=False)

    def _lose(self, batch: list[Ack]) -> None:
        """The outcomes of ``batch`` could not be written: tell the worker (``on_lost``), which
        keeps their claims held, and let the threads waiting for them go on."""
        for ack in batch:
            try:
                if ack.claim is not None and self.on_lost:
                    self.on_lost(ack.claim, ack.entry)
            except Exception:  # the writer must go on: its other claims would hang
                logger.exception(
                    "reporting a lost outcome failed entry=%s", ack.entry.pk, extra=_fields(ack)
                )
            finally:
                ack.done.set()

    def settle(self, batch: list[Ack], *, written: bool) -> None:
        """Announce ``batch`` (``entries_finished``, ``entry_finished``) if it was ``written``,
        settle each claim whose last success it holds (``on_settled``), and mark each
        acknowledgement done. Every writer ends a batch through here."""
        if written and signals.entries_finished.receivers:
            signals.send(
                signals.entries_finished,
                Entry,
                entries=[ack.entry for ack in batch],
                worker_name=self.worker_name,
            )
        for ack in batch:
            try:
                if written:
                    signals.send(
                        signals.entry_finished,
                        Entry,
                        entry=ack.entry,
                        worker_name=self.worker_name,
                        duration_seconds=ack.duration_seconds,
                    )
                if ack.lock_id is not None and ack.claim is not None and self.on_settled:
                    self.on_settled(ack.claim)
            except Exception:  # the writer must go on: its other claims would hang
                logger.exception(
                    "settling a claim failed entry=%s", ack.entry.pk, extra=_fields(ack)
                )
            finally:
                ack.done.set()


class ImmediateAckWriter(AckWriter):
    """The writer's contract without its thread: each success is written when it is handed
    over, in the caller's thread and transaction, then announced and settled as the writer's
    thread does (``run_jobs``: tests and ``RUN_ON_COMMIT``)."""

    def put(self, ack: Ack) -> None:
        Entry.objects.complete_many([ack.success(self.worker_name)], jobs=catalog)
        self.written += 1
        self.settle([ack], written=True)

    def wait_for(self, acks: Iterable[Ack]) -> None:
        return None  # every success handed over is already written
