"""The running entry as its job sees it: ``django_iq.current()``.

A worker sets the context around each run (``Job.invoke``), in the processing thread; a
coroutine job sees it too (the event loop runs in a copy of the thread's context). Outside a
run, ``current()`` is None.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from django_iq.appmodels import iq
from django_iq.states import OutcomeStatus

if TYPE_CHECKING:
    from django_iq.models import Entry


@dataclass(frozen=True)
class JobContext:
    """What a running job may know of its own entry.

    ``entry_id``, ``attempt`` (1 for the first run, counting failed attempts before it),
    ``queue``, ``job_name``, ``worker`` (the worker's name), ``batch_id`` (the batch it was
    enqueued in, or None), ``parent_ids`` (the entries named in ``using(after=...)``, in
    order) and ``parents``: each parent's return value, read from its outcome records on first
    use (None for a parent that did not succeed, or whose records are gone)."""

    entry_id: int
    attempt: int
    queue: str
    job_name: str
    worker: str
    batch_id: int | None = None
    parent_ids: tuple[int, ...] = field(default=())

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


def parent_ids_of(entry: Entry) -> tuple[int, ...]:
    """The parents an entry row names: whole numbers only (a row written by hand may hold
    anything there)."""
    stored = entry.parent_ids
    if not isinstance(stored, list):
        return ()
    return tuple(p for p in stored if isinstance(p, int) and not isinstance(p, bool))


@contextmanager
def running(entry: Entry, worker_name: str) -> Iterator[None]:
    """``current()`` is ``entry``'s context while the block runs."""
    context = JobContext(
        entry_id=entry.pk,
        attempt=entry.attempts + 1,
        queue=entry.queue_id,
        job_name=entry.job_name,
        worker=worker_name,
        batch_id=entry.batch_id,
        parent_ids=parent_ids_of(entry),
    )
    token = _running.set(context)
    try:
        yield
    finally:
        _running.reset(token)
