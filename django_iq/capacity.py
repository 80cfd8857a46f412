"""How many claims a worker process may take now: one per processing thread not busy, plus a
prefetch while its jobs are short, refilled once half of it has been taken, within its
recycling budget, and none while too many successes wait to be written (``Capacity.room``).
The worker adds what only it knows: a process cut off from the database, exiting, or unable to
write an outcome takes nothing."""

from __future__ import annotations

from django_iq.conf import iq_settings
from django_iq.recycling import RecyclingBudget

# Successes waiting for the ack writer past which nothing more is claimed: each holds a lock.
MIN_ACK_BACKLOG = 64
ACK_BACKLOG_PER_THREAD = 8
# The weight of the newest run in the moving average of job durations (about the last ten).
AVERAGE_WEIGHT = 0.1


class Capacity:
    """A worker process's processing threads, the moving average of its jobs' durations (which
    decides the prefetch) and its recycling budget."""

    def __init__(self, processing_threads: int, budget: RecyclingBudget) -> None:
        self.processing_threads = processing_threads
        self.budget = budget
        self.ack_backlog_limit = max(MIN_ACK_BACKLOG, ACK_BACKLOG_PER_THREAD * processing_threads)
        # The moving average of the job durations (None until one has finished).
        self.job_seconds: float | None = None

    def record(self, seconds: float) -> None:
        """A run of ``seconds`` ended."""
        average = self.job_seconds
        self.job_seconds = (
            seconds if average is None else average + AVERAGE_WEIGHT * (seconds - average)
        )

    def prefetch(self) -> int:
        """Claims that may wait in the hand-over queue beyond one per idle thread, while the
        jobs are short (their moving average under ``PREFETCH_BELOW_SECONDS``), so that one
        claim statement serves several jobs and a thread that finishes finds its next entry
        waiting: ``PREFETCH_PER_THREAD`` per processing thread, or more, up to
        ``PREFETCH_PER_PROCESS``, as long as the threads would finish them all within
        ``PREFETCH_BELOW_SECONDS``. A claim statement costs a process of one thread what it
        costs one of eight; by the time bound, an entry waits here no longer with one thread
        than with several. None before the first job has finished, or while jobs are long:
        a long entry waits for a thread of the worker that took it, while another worker may
        have one free."""
        average = self.job_seconds
        window = iq_settings.PREFETCH_BELOW_SECONDS
        if average is None or average >= window:
            return 0
        per_thread: int = iq_settings.PREFETCH_PER_THREAD * self.processing_threads
        within_window = int(window * self.processing_threads / max(average, 1e-6))
        per_process: int = iq_settings.PREFETCH_PER_PROCESS
        return max(per_thread, min(per_process, within_window))

    def room(self, *, in_hand: int, acks_pending: int, prefetch: bool = True) -> int:
        """Claims that may be taken now, with ``in_hand`` claims running or handed over and
        ``acks_pending`` successes waiting to be written; ``prefetch`` False: only those a
        thread would start at once.

        While every thread is busy, the prefetch is refilled only once half of it has been
        taken: a claim statement for each run that ends would take one entry at a time, and
        at dozens of processes those statements are most of the database's work."""
        if acks_pending >= self.ack_backlog_limit:
            return 0
        ahead = self.prefetch() if prefetch else 0
        waiting = in_hand - self.processing_threads
        if ahead and waiting > ahead // 2:
            return 0
        room = max(0, self.processing_threads + ahead - in_hand)
        if self.budget.limited:
            room = min(room, self.budget.claims_left())
        return room
