"""Batched acknowledgements: the successes of many jobs written in one transaction.

A processing thread that finished a job hands its acknowledgement (the entry, and the group
lock if it was the claim's last entry) to the ``AckWriter`` and takes its next claim at once.
The writer's thread deletes every entry and lock handed over meanwhile in one transaction: one
commit for many jobs instead of one each.

Nothing is weakened by the wait. Until the acknowledgement is written the entry keeps its
group lock, so no worker can claim it, and the claim stays in the worker's held set, so the
heartbeat keeps reporting it and recovery leaves it alone. If the process dies first, the entry
is recovered and runs again, exactly as if it had died while the job ran.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from django.db import InterfaceError, OperationalError, connections

from django_iq.dbconn import refresh_connections, with_db_retry
from django_iq.models import Entry
from django_iq.registry import catalog

logger = logging.getLogger(__name__)

# At most this many acknowledgements per transaction.
ACK_BATCH_SIZE = 500


def log_lock_lost(entry: Entry) -> None:
    """A success written after recovery had released the entry's lock (see ``complete``)."""
    logger.warning(
        "lock lost entry=%s job=%s: recovery released it while it ran", entry.pk, entry.job_name
    )


@dataclass
class Ack:
    """A finished job whose success is still to be written."""

    entry: Entry
    lock_id: int | None
    # Called once with True when the success is written, or False when it was given up on.
    on_written: Callable[[bool], None] | None = None


class AckWriter:
    """Collects acknowledgements and writes them in batches from a thread of its own."""

    def __init__(self, batch_size: int = ACK_BATCH_SIZE) -> None:
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
                    self._write(batch)
                except Exception:  # the thread must outlive any bug: its claims would hang
                    logger.exception("ack writer failed on %s finished jobs", len(batch))
                    self._release(batch, written=False)
                finally:
                    with self._condition:
                        self._writing = 0
        finally:
            connections.close_all()

    def _write(self, batch: list[Ack]) -> None:
        """Write ``batch``, retrying while the database is unreachable. Only once the writer is
        closing does it give up (after three tries): the entries then run again after recovery."""

        def write() -> set[int]:
            refresh_connections()
            return Entry.objects.complete_many([(ack.entry, ack.lock_id) for ack in batch])

        try:
            # Short waits: while successes wait, their entries stay locked and claiming stops,
            # so the batch is written as soon as the database answers again.
            lost = with_db_retry(
                write,
                f"writing {len(batch)} finished jobs",
                attempts=None,
                delay=lambda attempt: min(1.0, 0.1 * attempt),
                before_retry=connections.close_all,
                give_up=lambda attempt: self._closing and attempt >= 3,
            )
        except (OperationalError, InterfaceError) as exc:
            connections.close_all()
            logger.error(
                "could not write %s finished jobs at shutdown: they will run again "
                "after recovery; error=%s",
                len(batch),
                exc,
            )
            self._release(batch, written=False)
            return
        except Exception:  # one bad row must not cost the batch: write them one by one
            logger.exception("could not write %s finished jobs together", len(batch))
            connections.close_all()
            self._write_one_by_one(batch)
            return
        self.written += len(batch)
        for ack in batch:
            if ack.lock_id is not None and ack.lock_id in lost:
                log_lock_lost(ack.entry)
        self._release(batch, written=True)

    def _write_one_by_one(self, batch: list[Ack]) -> None:
        for ack in batch:
            try:
                refresh_connections()
                if not Entry.objects.complete(ack.entry, ack.lock_id, jobs=catalog):
                    log_lock_lost(ack.entry)
            except Exception:  # safe: the claim is released below, and recovery reruns the entry
                logger.exception(
                    "could not write the success of entry=%s; it runs again after recovery",
                    ack.entry.pk,
                )
                connections.close_all()
                self._release([ack], written=False)
            else:
                self.written += 1
                self._release([ack], written=True)

    @staticmethod
    def _release(batch: list[Ack], *, written: bool) -> None:
        for ack in batch:
            if ack.on_written is not None:
                try:
                    ack.on_written(written)
                except BaseException:  # a callback (a signal receiver) must not stop the writer
                    logger.exception("acknowledgement callback failed entry=%s", ack.entry.pk)
