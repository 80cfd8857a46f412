"""Plain functions turning entries, error records, locks and queue statistics into the JSON
objects the API answers with (their shapes are described in ``openapi.py``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django_iq.models import Entry, EntryError, GroupLock, Queue, RunOutcome
from django_iq.progress_reports import Progress
from django_iq.snapshot import QueueView
from django_iq.states import entry_state


def entry_summary(entry: Entry) -> dict[str, Any]:
    """An entry as listed; ``entry`` must carry the ``is_locked`` and ``is_locked_live``
    annotations."""
    is_locked = bool(getattr(entry, "is_locked", False))
    is_locked_live = bool(getattr(entry, "is_locked_live", False))
    return {
        "id": entry.pk,
        "queue": entry.queue_id,
        "job": entry.job_name,
        "args": entry.args,
        "kwargs": entry.kwargs,
        "priority": entry.priority,
        "state": entry.state,
        "inferred_state": entry_state(entry.state, is_locked, is_locked_live),
        "attempts": entry.attempts,
        "max_attempts": entry.max_attempts,
        "run_at": entry.run_at,
        "enqueued_at": entry.enqueued_at,
        "expires_at": entry.expires_at,
        "group_key": entry.group_key,
    }


def lock_dict(lock: GroupLock) -> dict[str, Any]:
    return {
        "id": lock.pk,
        "key": lock.key,
        "locked_at": lock.locked_at,
        "worker": lock.worker.name if lock.worker is not None else None,
        # The entry of the claim a worker is running now (a sibling, for grouped entries).
        "running_entry_id": lock.entry_id,
    }


def entry_detail(
    entry: Entry, lock: GroupLock | None, errors: Iterable[EntryError]
) -> dict[str, Any]:
    """Everything about one entry: its summary, its lock (if held) and its failed attempts."""
    return {
        **entry_summary(entry),
        "lock_key": entry.lock_key,
        "lock": lock_dict(lock) if lock is not None else None,
        "cron_job_id": entry.cron_job_id,
        "result_id": entry.result_id,
        "progress": progress_dict(Progress.of(entry)),
        "errors": [error_dict(error, with_traceback=True) for error in errors],
    }


def progress_dict(report: Progress | None) -> dict[str, Any] | None:
    """The last progress its job reported; None before the first."""
    return None if report is None else report.as_dict()


def error_dict(error: EntryError, *, with_traceback: bool = False) -> dict[str, Any]:
    """A failed attempt; the traceback only when asked, since it can be long."""
    data: dict[str, Any] = {
        "id": error.pk,
        "entry_id": error.entry_id,
        "queue": error.queue_id,
        "job": error.job_name,
        "args": error.args,
        "kwargs": error.kwargs,
        "priority": error.priority,
        "group_key": error.group_key,
        "attempt": error.attempt,
        "max_attempts": error.max_attempts,
        "exception_class": error.exception_class,
        "message": error.message,
        "worker": error.worker_name,
        "enqueued_at": error.enqueued_at,
        "failed_at": error.failed_at,
        "final": error.is_final,
        "requeued_at": error.requeued_at,
    }
    if with_traceback:
        data["traceback"] = error.traceback
    return data


def outcome_dict(outcome: RunOutcome) -> dict[str, Any]:
    """One run that ended, with its return value or its traceback."""
    return {
        "id": outcome.pk,
        "entry_id": outcome.entry_id,
        "result_id": outcome.result_id,
        "queue": outcome.queue,
        "job": outcome.job_name,
        "args": outcome.args,
        "kwargs": outcome.kwargs,
        "status": outcome.status,
        "attempt": outcome.attempt,
        "return_value": outcome.return_value,
        "exception_class": outcome.exception_class,
        "traceback": outcome.traceback,
        "worker": outcome.worker_name,
        "started_at": outcome.started_at,
        "finished_at": outcome.finished_at,
        "duration_seconds": outcome.duration_seconds,
    }


def queue_dict(queue: Queue, view: QueueView) -> dict[str, Any]:
    """A queue, its counts per state (stored and inferred), the counts of corruption, its oldest
    waiting entry, its alarm and the entries compaction merged away, from the operator
    snapshot."""
    return {
        "name": queue.name,
        "weight": queue.weight,
        "max_concurrency": queue.max_concurrency,
        "alert_waiting_seconds": view.alert_waiting_seconds,
        "is_paused": queue.is_paused,
        "counts": view.counts,
        "invariant_holds": view.stats.is_consistent,
        "locked_by_dead_workers": view.stats.locked_by_dead_workers,
        "locks_without_entries": view.stats.locks_without_entries,
        "oldest_waiting_enqueued_at": view.oldest_waiting_at,
        "oldest_waiting_seconds": view.oldest_waiting_seconds,
        "alarm": (
            {"reason": view.alarm.reason, "waiting_seconds": view.alarm.waiting_seconds}
            if view.alarm is not None
            else None
        ),
        "merged": view.merged,
    }
