"""The running entry as its job sees it: ``django_iq.current()``.

A worker sets the context around each run (``Job.invoke``), in the processing thread; a
coroutine job sees it too (the event loop runs in a copy of the thread's context). Outside a
run, ``current()`` is None.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from django_iq import logs
from django_iq.appmodels import iq
from django_iq.states import OutcomeStatus

if TYPE_CHECKING:
    from django_iq.models import Entry
    from django_iq.progress_reports import Progress


@dataclass
class HeldProgress:
    """A run's progress reports as ``django_iq.progress_reports`` writes them: the run's entry,
    group lock and job; the last report not written yet (``held``), and when the run last
    wrote one (``written_at``, monotonic seconds). ``lock`` guards ``held`` and
    ``written_at`` and is never held across a query; ``write_lock`` is held across each write,
    so that the run's writes happen one at a time, each of the newest report."""

    entry_id: int = 0
    lock_id: int | None = None
    job_name: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock)
    write_lock: threading.Lock = field(default_factory=threading.Lock)
    held: Progress | None = None
    written_at: float | None = None


@dataclass(frozen=True)
class JobContext:
    """What a running job may know of its own entry.

    ``entry_id``, ``attempt`` (1 for the first run, counting failed attempts before it),
    ``queue``, ``job_name``, ``worker`` (the worker's name), ``batch_id`` (the batch it was
    enqueued in, or None), ``parent_ids`` (the entries named in ``using(after=...)``, in
    order) and ``parents``: each parent's return value, read from its outcome records on first
    use (None for a parent that did not succeed, or whose records are gone). ``lock_id`` and
    ``progress`` are the worker's: the run's group lock and its progress reports."""

    entry_id: int
    attempt: int
    queue: str
    job_name: str
    worker: str
    batch_id: int | None = None
    parent_ids: tuple[int, ...] = field(default=())
    # The group lock the run holds (None outside a claim): its progress is written only while
    # the run holds it.
    lock_id: int | None = None
    progress: HeldProgress = field(default_factory=HeldProgress, compare=False, repr=False)
    # Set once a cancel of the run reached its worker (``cancel_requested()``); the callbacks
    # run then (a coroutine job's cancels its task).
    cancelled: threading.Event = field(default_factory=threading.Event, compare=False)
    _on_cancel: list[Callable[[], None]] = field(default_factory=list, compare=False, repr=False)

    def on_cancel(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (in the canceller's thread) once the run is cancelled, at once if
        it already is."""
        self._on_cancel.append(callback)
        if self.cancelled.is_set():
            callback()

    def cancel(self) -> None:
        """The run's cancel reached its worker: ``cancel_requested()`` turns true, and the
        callbacks run."""
        if self.cancelled.is_set():
            return
        self.cancelled.set()
        for callback in list(self._on_cancel):
            callback()

    @cached_property
    def parents(self) -> Mapping[int, Any]:
        if not self.parent_ids:
            return {}
        values: dict[int, Any] = dict.fromkeys(self.parent_ids)
        succeeded = (
            iq.RunOutcome.objects.filter(
                entry_id__in=self.parent_ids, status=OutcomeStatus.SUCCEEDED
            )
            .order_by("entry_id", "-finished_at", "-pk")
            .values_list("entry_id", "return_value")
        )
        seen: set[int] = set()
        for entry_id, value in succeeded:
            if entry_id not in seen:  # the latest success of each
                seen.add(entry_id)
                values[entry_id] = value
        return values


_running: ContextVar[JobContext | None] = ContextVar("django_iq_running", default=None)


def current() -> JobContext | None:
    """The entry this code runs for, inside a job (a worker's run, or ``run_jobs`` in tests);
    None anywhere else."""
    return _running.get()


# Log records carry the fields of the run their thread is in (django_iq/logs.py).
logs.read_runs_with(current)


def cancel_requested() -> bool:
    """Inside a job: whether a cancel of its run (``django_iq.cancel()``) has reached its worker,
    so that the job can stop cleanly; False outside a job. The worker also raises
    ``JobCancelled`` in the job's thread; a job that polls can end first, at a point of its
    choosing."""
    context = _running.get()
    return context is not None and context.cancelled.is_set()


# The contexts of the runs going on in this process, by entry id: how a worker's cancel reaches
# a run.
_runs: dict[int, JobContext] = {}


def context_of(entry_id: int) -> JobContext | None:
    """The context of this process's run of ``entry_id``, while it runs."""
    return _runs.get(entry_id)


def running_contexts() -> list[JobContext]:
    """The contexts of the runs going on in this process (a copy: runs end meanwhile)."""
    return list(_runs.values())


def parent_ids_of(entry: Entry) -> tuple[int, ...]:
    """The parents an entry row names: whole numbers only (a row written by hand may hold
    anything there)."""
    stored = entry.parent_ids
    if not isinstance(stored, list):
        return ()
    return tuple(p for p in stored if isinstance(p, int) and not isinstance(p, bool))


@contextmanager
def running(
    entry: Entry,
    worker_name: str,
    lock_id: int | None = None,
    progress: HeldProgress | None = None,
) -> Iterator[JobContext]:
    """``current()`` is ``entry``'s context while the block runs (``lock_id``: the group lock
    its run holds; ``progress``: where its reports are held, which the worker writes once
    the run ended); the block gets the context."""
    context = JobContext(
        entry_id=entry.pk,
        attempt=entry.attempts + 1,
        queue=entry.queue_id,
        job_name=entry.job_name,
        worker=worker_name,
        batch_id=entry.batch_id,
        parent_ids=parent_ids_of(entry),
        lock_id=lock_id,
        progress=progress or HeldProgress(entry.pk, lock_id, entry.job_name),
    )
    token = _running.set(context)
    _runs[context.entry_id] = context
    try:
        yield context
    finally:
        _runs.pop(context.entry_id, None)
        _running.reset(token)
