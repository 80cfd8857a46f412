"""Alarms for stuck work and the health verdict: decided from numbers the operator snapshot has
already read, so raising or clearing an alarm costs no query of its own.

A queue raises an alarm when an entry has awaited compute longer than the queue's threshold
(``Queue.alert_waiting_seconds``, else ``ALERT_WAITING_SECONDS``) and either no live worker
serves the queue, or nothing started in it for as long: no group lock held by a live worker and
no job finished in it (per ``QueueMinute``, to the minute) within the threshold. A paused queue
raises none: its entries wait because an operator said so. The leader missing (no lease, or an
expired one) is an alarm of the whole cluster. A queue whose counts contradict each other (the
invariant) makes the cluster unhealthy too, though it is not an alarm about waiting.

A job raises an alarm (``unserved_job``) when a pending entry of it has waited past its queue's
threshold and no live worker has registered the job (deployed where no worker runs, or
renamed), unless its queue is paused or no live worker serves the queue at all (the queue's
``no_live_worker`` alarm says so).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

# Reason codes: stable, shown to anonymous callers of the health endpoint, used as labels.
NO_LIVE_WORKER = "no_live_worker"
NOTHING_STARTED = "nothing_started"
NO_LEADER = "no_leader"
INVARIANT_BROKEN = "invariant_broken"
UNSERVED_JOB = "unserved_job"
QUEUE_REASONS = (NO_LIVE_WORKER, NOTHING_STARTED)
REASON_LABELS = {
    NO_LIVE_WORKER: "no live worker serves the queue",
    NOTHING_STARTED: "nothing started in the queue",
    NO_LEADER: "no leader holds the lease: start manage.py runleader",
    INVARIANT_BROKEN: "counts contradict each other",
    UNSERVED_JOB: "no live worker has registered the job",
}
# QueueMinute rows are per minute: a row of minute m holds jobs finished up to m + 60 s.
MINUTE = timedelta(minutes=1)


@dataclass(frozen=True)
class Alarm:
    """One reason for concern: about a queue (``queue``), a job waiting in a queue (``job``
    and ``queue``), or the cluster (``queue`` None)."""

    reason: str
    queue: str | None = None
    job: str | None = None
    # Queue alarms: how long the oldest entry has awaited compute, and the threshold passed.
    waiting_seconds: float | None = None
    threshold_seconds: int | None = None
    # invariant_broken: the corruption counts that are not zero.
    counts: dict[str, int] = field(default_factory=dict)

    def describe(self) -> str:
        """One line for people."""
        where = f"queue {self.queue}: " if self.queue is not None else ""
        if self.job is not None:
            where = f"job {self.job} in {where}"
        text = REASON_LABELS.get(self.reason, self.reason)
        if self.waiting_seconds is not None:
            text += (
                f" while an entry has waited {self.waiting_seconds:.0f} s "
                f"(alarm after {self.threshold_seconds} s)"
            )
        if self.counts:
            text += " (" + ", ".join(f"{name}={n}" for name, n in self.counts.items()) + ")"
        return where + text

    def as_dict(self) -> dict[str, Any]:
        return {
            "reason": self.reason,
            "queue": self.queue,
            "job": self.job,
            "waiting_seconds": self.waiting_seconds,
            "threshold_seconds": self.threshold_seconds,
            "counts": self.counts,
        }

    def public_dict(self) -> dict[str, Any]:
        """What an anonymous caller of the health endpoint sees: the reason code and the queue
        name, nothing about jobs, entries, their arguments or their errors."""
        return {"reason": self.reason, "queue": self.queue}


@dataclass(frozen=True)
class QueueActivity:
    """What a queue's alarm is decided from."""

    queue: str
    is_paused: bool
    threshold_seconds: int
    # Since when the oldest entry awaiting compute has been ready; None: none waits.
    waiting_since: datetime | None
    is_served: bool
    live_locks: int
    last_finished_minute: datetime | None


def queue_alarm(activity: QueueActivity, now: datetime) -> Alarm | None:
    """The alarm ``activity`` raises at ``now``, or None. No live worker is reported before
    nothing started, which it explains."""
    if activity.is_paused or activity.waiting_since is None:
        return None
    waited = max(0.0, (now - activity.waiting_since).total_seconds())
    threshold = activity.threshold_seconds
    if waited <= threshold:
        return None
    reason: str | None = None
    if not activity.is_served:
        reason = NO_LIVE_WORKER
    elif not activity.live_locks and not _finished_since(
        activity.last_finished_minute, now - timedelta(seconds=threshold)
    ):
        reason = NOTHING_STARTED
    if reason is None:
        return None
    return Alarm(reason, activity.queue, waiting_seconds=waited, threshold_seconds=threshold)


@dataclass(frozen=True)
class UnservedWait:
    """Pending entries of one job in one queue that no live worker has registered."""

    job: str
    queue: str
    is_paused: bool
    threshold_seconds: int
    # Since when the longest-waiting of them has been ready.
    waiting_since: datetime
    # Whether a live worker serves the queue (with other jobs).
    is_queue_served: bool


def unserved_job_alarm(wait: UnservedWait, now: datetime) -> Alarm | None:
    """The ``unserved_job`` alarm ``wait`` raises at ``now``, or None."""
    if wait.is_paused or not wait.is_queue_served:
        return None
    waited = max(0.0, (now - wait.waiting_since).total_seconds())
    if waited <= wait.threshold_seconds:
        return None
    return Alarm(
        UNSERVED_JOB,
        wait.queue,
        job=wait.job,
        waiting_seconds=waited,
        threshold_seconds=wait.threshold_seconds,
    )


def _finished_since(last_minute: datetime | None, since: datetime) -> bool:
    # A job counted in minute m finished before m + 60 s: give it the benefit of the doubt.
    return last_minute is not None and last_minute + MINUTE > since


def served(queue: str, live_queue_lists: list[list[str]]) -> bool:
    """Whether a live worker with one of ``live_queue_lists`` serves ``queue``: an empty list
    serves every queue."""
    return any(not names or queue in names for names in live_queue_lists)
