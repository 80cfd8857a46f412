"""Running entries in the calling thread, on its own connection: ``run_jobs`` for tests and for
the ``RUN_ON_COMMIT`` development mode.

What it promises: each entry goes through the worker's own paths, the claim
(``Entry.objects.claim``, group locks included), the processor (``Processor.run_claim``: the
job, its failure record, its retry or final failure, its snooze) and the success write
(``Entry.objects.complete_many``: outcome records, children and batch callbacks released). The
differences are only those of having no worker process: no thread, no ``Worker`` row (the locks
it takes name no worker), no timeouts for plain functions (a coroutine's timeout still holds),
and successes written at once, one by one, instead of in batches by a writer thread.

It never commits, closes or replaces the caller's connection: inside a test's transaction
every write it makes is rolled back with the test. A database error propagates to the caller.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Exists, OuterRef
from django.utils import timezone

from django_iq.acks import ImmediateAckWriter
from django_iq.exceptions import IQError
from django_iq.logs import get_logger
from django_iq.managers import Claim
from django_iq.models import DisabledJob, Entry, EntryError, Queue
from django_iq.processing import FAILED, RETRYING, SUCCEEDED, Processor, RunEnd
from django_iq.registry import BoundJob, Job, autodiscover, get_job, registered_jobs

logger = get_logger(__name__)

# Without a ``limit``, a call running more entries than this stops with ``TooManyRuns``: a job
# that enqueues itself, or snoozes or retries without end, would otherwise never return.
MAX_RUNS = 1000
# Entries claimed per claim statement.
CLAIM_SIZE = 100
WORKER_NAME = "inline"


class TooManyRuns(IQError, RuntimeError):
    """``run_jobs`` ran ``MAX_RUNS`` entries and more were ready: a job keeps enqueueing itself,
    or snoozes or retries without end. Pass ``limit=`` to run a bounded number on purpose."""


@dataclass(frozen=True)
class Outcome:
    """How one run of an entry ended.

    ``status`` is ``"succeeded"``, ``"retrying"`` (the attempt failed and the entry waits for its
    retry), ``"failed"`` (the failure is final: the entry is gone, its error record stays),
    ``"snoozed"`` or ``"expired"`` (not started: its expiry had passed). ``return_value`` is what the job returned; ``exception`` what it raised, and
    ``error`` the ``EntryError`` written for it.
    """

    entry_id: int
    job_name: str
    queue: str
    args: list[Any]
    kwargs: dict[str, Any]
    attempt: int
    status: str
    return_value: Any = None
    exception: BaseException | None = None
    error: EntryError | None = None

    @property
    def succeeded(self) -> bool:
        return self.status == SUCCEEDED

    def __str__(self) -> str:
        ending = f" {type(self.exception).__name__}: {self.exception}" if self.exception else ""
        return f"{self.job_name} entry={self.entry_id} {self.status}{ending}"


def _outcome(run_end: RunEnd) -> Outcome:
    entry = run_end.entry
    return Outcome(
        entry_id=entry.pk,
        job_name=entry.job_name,
        queue=entry.queue_id,
        args=entry.args,
        kwargs=entry.kwargs,
        attempt=run_end.attempt,
        status=run_end.status,
        return_value=run_end.return_value,
        exception=run_end.exception,
        error=run_end.error,
    )


_local = threading.local()


def is_running() -> bool:
    """True while ``run_jobs`` runs in this thread (a job it runs is enqueueing, say)."""
    return bool(getattr(_local, "running", False))


def run_jobs(
    queue: str | Sequence[str] | None = None,
    *,
    limit: int | None = None,
    job: Job[Any, Any] | BoundJob | str | Sequence[Job[Any, Any] | BoundJob | str] | None = None,
    include_deferred: bool = False,
    now: datetime | None = None,
    raise_errors: bool = False,
) -> list[Outcome]:
    """Run ready entries in this thread, on its connection, until none is left; return a
    ``Outcome`` per run, in order.

    ``queue`` and ``job`` (a job, its name, or a list of either) narrow what runs. Only
    registered jobs run; entries of other jobs, of disabled jobs and in paused queues stay.
    Entries whose ``run_at`` is after ``now`` (default: when the call began), as with
    ``using(run_at=...)`` and failed attempts waiting for their retry, stay too, unless
    ``include_deferred`` makes every one of them ready at once (a retry then runs again in the
    same call, until it succeeds or its attempts are used up). Entries released meanwhile
    (children of an entry that ended, batch callbacks, entries the jobs enqueued) run in the
    same call.

    ``limit`` stops after that many runs. Without it, ``TooManyRuns`` is raised once
    ``MAX_RUNS`` entries have run and more are ready. ``raise_errors`` raises the exception
    of the first failed run once everything is run and recorded.
    """
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be a positive number of runs, got {limit!r}.")
    if is_running():
        raise TooManyRuns(
            "run_jobs was called from a job that run_jobs is running; the outer call runs the "
            "entries this job enqueues."
        )
    autodiscover()
    # Due means due when called: a retry whose short backoff ends during the call waits.
    now = now or timezone.now()
    names = _job_names(job)
    queues = [queue] if isinstance(queue, str) else list(queue) if queue is not None else None
    runs: list[Outcome] = []
    processor = Processor(
        WORKER_NAME,
        ImmediateAckWriter(WORKER_NAME),
        on_run_end=lambda run_end: runs.append(_outcome(run_end)),
    )
    _local.running = True
    try:
        while limit is None or len(runs) < limit:
            _make_ready(names, queues, include_deferred, now)
            room = CLAIM_SIZE if limit is None else min(CLAIM_SIZE, limit - len(runs))
            claims = _claim(names, queues, room)
            if not claims:
                break
            for claim in claims:
                processor.run_claim(claim, should_stop=lambda: False)
            if limit is None and len(runs) >= MAX_RUNS and _claim_possible(names):
                raise TooManyRuns(
                    f"run_jobs ran {len(runs)} entries and more are ready: a job "
                    "may enqueue itself, or snooze or retry without end. Pass limit=... to "
                    "run a bounded number."
                )
    finally:
        _local.running = False
    if raise_errors:
        for ran in runs:
            if ran.status in (FAILED, RETRYING) and ran.exception is not None:
                raise ran.exception
    return runs


def _job_names(job: Any) -> list[str]:
    """The registered job names to run: those given, else every registered job. Raises
    ``JobNotRegistered`` for a job or name that is not registered."""
    if job is None:
        return sorted(registered_jobs())
    given = [job] if isinstance(job, Job | BoundJob | str) else list(job)
    names = []
    for target in given:
        if isinstance(target, Job | BoundJob | str):
            names.append(get_job(target).name)
        elif isinstance(getattr(target, "module_path", None), str):
            # A Django task: registered as a job when its first entry is enqueued.
            names.append(target.module_path)
        else:
            raise TypeError(f"job takes a @job function or a job's name, got {target!r:.80}.")
    return names


def _make_ready(
    names: list[str], queues: list[str] | None, include_deferred: bool, now: datetime
) -> None:
    """Make deferred entries that are due by ``now`` ready, or every one of them."""
    if not include_deferred:
        Entry.objects.promote_due(now)
        return
    deferred = Entry.objects.initial().filter(job_name__in=names)
    if queues is not None:
        deferred = deferred.filter(queue_id__in=queues)
    ids = list(deferred.values_list("pk", flat=True))
    if ids:
        Entry.objects.run_now(ids)


def _claim(names: list[str], queues: list[str] | None, room: int) -> list[Claim]:
    """Claim up to ``room`` entries of the queues, in name order, as a worker would."""
    if not names:
        return []
    served = Queue.objects.filter(is_paused=False).order_by("name")
    if queues is not None:
        served = served.filter(name__in=queues)
    claims: list[Claim] = []
    for name, cap in served.values_list("name", "max_concurrency"):
        if len(claims) >= room:
            break
        claims += Entry.objects.claim(
            None, room - len(claims), name, is_capped=cap is not None, job_names=names
        )
    return claims


def _claim_possible(names: list[str]) -> bool:
    """True if a ready entry of ``names`` waits in a queue that is not paused."""
    return (
        Entry.objects.awaiting_compute()
        .filter(job_name__in=names, queue__is_paused=False)
        .exclude(Exists(DisabledJob.objects.filter(job_name=OuterRef("job_name"))))
        .exists()
    )
