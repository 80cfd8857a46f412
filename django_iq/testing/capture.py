"""What a test enqueued, read from the database: the entries written since the capture began,
with those that have run and are gone, and assertions over them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import router
from django.db.models import Max

from django_iq import signals
from django_iq.inline_runs import Outcome, run_jobs
from django_iq.models import Entry, RunOutcome
from django_iq.registry import BoundJob, Job


@dataclass(frozen=True)
class EnqueuedJob:
    """One entry enqueued during the capture, as it was written.

    ``state`` is the entry's state now, or None once it is gone (it ran to its end or was
    cancelled). ``priority`` and ``run_at`` are None for an entry that is gone when only its
    outcome record tells of it (it ran in another process).
    """

    entry_id: int
    job_name: str
    args: list[Any]
    kwargs: dict[str, Any]
    queue: str
    priority: int | None
    run_at: datetime | None
    group_key: str | None
    state: str | None

    def __str__(self) -> str:
        return (
            f"{self.job_name} args={self.args!r} kwargs={self.kwargs!r} queue={self.queue!r} "
            f"(entry {self.entry_id}, {self.state or 'gone'})"
        )


def job_name_of(target: Job[Any, Any] | BoundJob | str | Any) -> str:
    """The job name of a ``@job`` function, ``job.using(...)``, a Django ``@task`` or a name."""
    if isinstance(target, BoundJob):
        return target.job.name
    if isinstance(target, Job):
        return target.name
    name = getattr(target, "module_path", target)  # a Django Tasks task is named by its path
    if not isinstance(name, str):
        raise TypeError(
            f"Expected a @job function, a Django task or a job's dotted name, got {target!r:.80}."
        )
    return name


class EnqueuedJobs:
    """The entries enqueued since ``start()``: its ``enqueued()`` list and assertions.

    The database is the record. An entry counts if it was written after the capture began
    (its id is above the highest one then) and its transaction was not rolled back: its row,
    or, once it has run, what the run left, is read at each call. Entries run in this process
    (``run_jobs``, a worker thread) are remembered as they start; entries a worker process ran
    and removed are known by their outcome records (jobs with ``keep_outcomes=False`` leave
    none).
    """

    def __init__(self) -> None:
        self.baseline: int | None = None
        self._ran: dict[int, Entry] = {}

    def start(self) -> EnqueuedJobs:
        """Begin capturing: only entries written from now on count."""
        db = router.db_for_write(Entry)
        highest = Entry.objects.using(db).aggregate(top=Max("pk"))["top"] or 0
        highest_run = RunOutcome.objects.using(db).aggregate(top=Max("entry_id"))["top"] or 0
        self.baseline = max(highest, highest_run)
        self._ran = {}
        signals.entry_started.connect(self._started, dispatch_uid=id(self))
        return self

    def stop(self) -> None:
        """Stop remembering entries as they start."""
        signals.entry_started.disconnect(dispatch_uid=id(self))

    def _started(self, sender: Any, entry: Entry, **kwargs: Any) -> None:
        if self.baseline is not None and entry.pk > self.baseline:
            self._ran.setdefault(entry.pk, entry)

    def enqueued(
        self,
        job: Job[Any, Any] | BoundJob | str | Any = None,
        *,
        args: Sequence[Any] | None = None,
        kwargs: dict[str, Any] | None = None,
        queue: str | None = None,
    ) -> list[EnqueuedJob]:
        """The entries enqueued since the capture began, oldest first; those of ``job`` only,
        with exactly these ``args`` / ``kwargs``, in ``queue``, when given."""
        found = self._all()
        name = job_name_of(job) if job is not None else None
        wanted_args = list(args) if args is not None else None
        return [
            item
            for item in found
            if (name is None or item.job_name == name)
            and (wanted_args is None or item.args == wanted_args)
            and (kwargs is None or item.kwargs == kwargs)
            and (queue is None or item.queue == queue)
        ]

    def _all(self) -> list[EnqueuedJob]:
        if self.baseline is None:
            raise RuntimeError("Call start() before reading what was enqueued.")
        found: dict[int, EnqueuedJob] = {}
        rows = Entry.objects.filter(pk__gt=self.baseline).order_by("pk")
        for entry in rows:
            found[entry.pk] = _from_entry(entry, entry.state)
        for pk, entry in self._ran.items():
            found.setdefault(pk, _from_entry(entry, None))
        outcomes = RunOutcome.objects.filter(entry_id__gt=self.baseline).order_by("pk")
        for outcome in outcomes.exclude(entry_id__in=list(found)):
            found.setdefault(
                outcome.entry_id,
                EnqueuedJob(
                    entry_id=outcome.entry_id,
                    job_name=outcome.job_name,
                    args=outcome.args,
                    kwargs=outcome.kwargs,
                    queue=outcome.queue,
                    priority=None,
                    run_at=None,
                    group_key=None,
                    state=None,
                ),
            )
        return [found[pk] for pk in sorted(found)]

    def run(self, queue: str | Sequence[str] | None = None, **options: Any) -> list[Outcome]:
        """``django_iq.testing.run_jobs`` with the same arguments."""
        return run_jobs(queue, **options)

    # -- assertions --------------------------------------------------------------------------

    def assert_enqueued(
        self,
        job: Job[Any, Any] | BoundJob | str | Any,
        *,
        args: Sequence[Any] | None = None,
        kwargs: dict[str, Any] | None = None,
        queue: str | None = None,
        count: int | None = None,
    ) -> list[EnqueuedJob]:
        """Fail unless ``job`` was enqueued (with these ``args``, ``kwargs``, in ``queue``,
        when given), exactly ``count`` times when given; return the matching entries."""
        __tracebackhide__ = True  # pytest shows the failure at the test's line
        matching = self.enqueued(job, args=args, kwargs=kwargs, queue=queue)
        if (count is None and matching) or (count is not None and len(matching) == count):
            return matching
        wanted = "at least 1" if count is None else str(count)
        raise AssertionError(
            f"Expected {wanted} {_describe(job, args, kwargs, queue)} enqueued, found "
            f"{len(matching)}.{self._listing()}"
        )

    def assert_not_enqueued(
        self,
        job: Job[Any, Any] | BoundJob | str | Any,
        *,
        args: Sequence[Any] | None = None,
        kwargs: dict[str, Any] | None = None,
        queue: str | None = None,
    ) -> None:
        """Fail if ``job`` was enqueued (with these ``args``, ``kwargs``, in ``queue``, when
        given)."""
        __tracebackhide__ = True
        matching = self.enqueued(job, args=args, kwargs=kwargs, queue=queue)
        if matching:
            listed = "\n".join(f"  {item}" for item in matching)
            raise AssertionError(
                f"Expected no {_describe(job, args, kwargs, queue)} enqueued, found "
                f"{len(matching)}:\n{listed}"
            )

    def _listing(self) -> str:
        every = self._all()
        if not every:
            return " Nothing was enqueued since the capture began."
        shown = "\n".join(f"  {item}" for item in every[:20])
        more = f"\n  ... and {len(every) - 20} more" if len(every) > 20 else ""
        return f" Enqueued since the capture began:\n{shown}{more}"


def _describe(
    job: Any, args: Sequence[Any] | None, kwargs: dict[str, Any] | None, queue: str | None
) -> str:
    parts = [f"entry of {job_name_of(job)}"]
    if args is not None:
        parts.append(f"args={list(args)!r}")
    if kwargs is not None:
        parts.append(f"kwargs={kwargs!r}")
    if queue is not None:
        parts.append(f"queue={queue!r}")
    return " ".join(parts)


def _from_entry(entry: Entry, state: str | None) -> EnqueuedJob:
    return EnqueuedJob(
        entry_id=entry.pk,
        job_name=entry.job_name,
        args=entry.args,
        kwargs=entry.kwargs,
        queue=entry.queue_id,
        priority=entry.priority,
        run_at=entry.run_at,
        group_key=entry.group_key,
        state=state,
    )
