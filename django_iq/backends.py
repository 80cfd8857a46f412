"""The Django Tasks backend: ``@task`` functions enqueue entries and run on django_iq workers.

A task's result is read, never written apart: from its entry while it is queued (``READY``, or
``RUNNING`` while its group lock points at it) and from its outcome records (one per run) once
it has ended. Each is written in the transaction that changes the entry, so the entry is read
first, then the records: an entry just deleted had its records committed with the delete."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, cast

from django.apps import apps
from django.core import checks
from django.dispatch import receiver
from django.utils import timezone
from django.utils.crypto import get_random_string

from django_iq import signals
from django_iq.context import HeldProgress
from django_iq.dbconn import with_db_retry
from django_iq.exceptions import DatabaseUnavailable, InvalidJobOptions, IQError
from django_iq.models import Entry, EntryError, GroupLock, RunOutcome
from django_iq.registry import (
    Job,
    JobOptions,
    RegisteredJobs,
    get_job,
    register,
    registered_jobs,
    run_coroutine,
)
from django_iq.serialization import validate_arguments
from django_iq.states import OutcomeStatus
from django_iq.tasks_compat import (
    BaseTaskBackend,
    InvalidTask,
    Task,
    TaskContext,
    TaskError,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
    normalize_json,
    task_enqueued,
    task_finished,
    task_started,
)
from django_iq.tasks_options import (
    BACKEND_OPTIONS,
    DEFAULT_TASK_MAX_ATTEMPTS,
    default_max_attempts,
    option_problems,
    queue_problem,
)

# django_iq options a task may carry, beyond the framework's own.
TASK_OPTIONS = ("max_attempts", "group_key", "backoff_base_seconds", "backoff_max_seconds")
# Backoff is read from the decorated task by workers, so using() changes only these.
TASK_USING_OPTIONS = ("max_attempts", "group_key")
__all__ = ["BACKEND_OPTIONS", "TASK_OPTIONS", "IQBackend", "IQTask"]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class IQTask(Task):
    """A task with django_iq's job options: ``@task(max_attempts=5, group_key="reports")``
    (Django 6.1 hands these to the backend's ``task_class``), or ``task.using(...)``."""

    max_attempts: int | None = None
    group_key: str | None = None
    backoff_base_seconds: float | None = None
    backoff_max_seconds: float | None = None

    def __post_init__(self) -> None:
        Task.__post_init__(self)
        _task_job(self)

    def using(self, **changes: Any) -> IQTask:
        """Return a copy with framework options (priority, queue_name, run_after, backend) and
        django_iq options (max_attempts, group_key) changed; backoff is set on ``@task``."""
        ours = {key: changes.pop(key) for key in list(changes) if key in TASK_USING_OPTIONS}
        task = cast("IQTask", Task.using(self, **changes))
        return dataclasses.replace(task, **ours) if ours else task


def _options(task: Task, backend: BaseTaskBackend | None = None) -> JobOptions:
    """The job options of ``task``'s entries; with no ``max_attempts`` of its own, the task
    gets its backend's (``OPTIONS["max_attempts"]``, else one)."""
    max_attempts = getattr(task, "max_attempts", None)
    if max_attempts is None:
        backend = backend or task.get_backend()
        max_attempts = (
            backend.default_max_attempts
            if isinstance(backend, IQBackend)
            else DEFAULT_TASK_MAX_ATTEMPTS
        )
    try:
        return JobOptions(
            queue=task.queue_name,
            priority=task.priority,
            max_attempts=max_attempts,
            group_key=getattr(task, "group_key", None),
            backoff_base_seconds=getattr(task, "backoff_base_seconds", None),
            backoff_max_seconds=getattr(task, "backoff_max_seconds", None),
            run_at=task.run_after,
        )
    except InvalidJobOptions as exc:
        raise InvalidTask(str(exc)) from exc


class TaskJob(Job[Any, Any]):
    """The registry's view of a ``@task``: run through the framework, with results and context."""

    def __init__(self, task: Task) -> None:
        super().__init__(
            task.func, task.module_path, dataclasses.replace(_options(task), run_at=None)
        )
        self.task = task
        if task.takes_context:
            # The runner passes the context first: enqueued calls are checked after it.
            self.leading_arguments = (None,)

    def invoke(
        self,
        entry: Entry,
        worker_name: str,
        timeout: float | None = None,
        lock_id: int | None = None,
        progress: HeldProgress | None = None,
    ) -> Any:
        backend = cast("IQBackend", self.task.get_backend())
        if entry.result_id is not None:
            # A first run has no earlier runs to read; a later one reads them (its errors and
            # workers), before the task's body: a database error here is retried, never
            # charged to the task as a failed attempt.
            result_id = entry.result_id
            first_run = entry.attempts == 0 and entry.snoozes == 0
            runs = (
                []
                if first_run
                else with_db_retry(lambda: _runs_of([result_id])[result_id], "read task runs")
            )
            view = _queued(entry, backend.alias, runs, running=(worker_name, timezone.now()))
        else:
            view = _queued(entry, backend.alias, [], running=(worker_name, timezone.now()))
            view.id = f"entry-{entry.pk}"
            view.worker_ids = [worker_name] * (entry.attempts + 1)
        task_result = backend._to_task_result(view, self.task)
        signals.send(task_started, type(backend), task_result=task_result)
        args = list(entry.args)
        if self.task.takes_context:
            args.insert(0, TaskContext(task_result=task_result))
        if self.is_async:
            # Not Task.call: the coroutine is cancelled at the timeout (JobTimeout).
            value = run_coroutine(self.task.func, args, entry.kwargs, timeout)
        else:
            value = self.task.call(*args, **entry.kwargs)
        return normalize_json(value)


@dataclasses.dataclass
class ResultView:
    """A task's result as read from its entry and its outcome records."""

    id: str
    task_path: str
    backend: str
    status: str
    args: list[Any]
    kwargs: dict[str, Any]
    enqueued_at: datetime | None
    queue_name: str | None = None  # None: the task's own (a record keeps no priority)
    priority: int | None = None
    run_after: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    last_attempted_at: datetime | None = None
    return_value: Any = None
    errors: list[dict[str, str]] = dataclasses.field(default_factory=list)
    worker_ids: list[str] = dataclasses.field(default_factory=list)


# Outcome statuses that are a task's errors, one per failed run; snoozed runs count as runs.
_ERROR_STATUSES = frozenset(
    {OutcomeStatus.FAILED, OutcomeStatus.TIMED_OUT, OutcomeStatus.CANCELLED}
)


def _runs_of(result_ids: Sequence[str]) -> defaultdict[str, list[RunOutcome]]:
    """The outcome records of each result, oldest first, in one query."""
    runs: defaultdict[str, list[RunOutcome]] = defaultdict(list)
    for run in RunOutcome.objects.filter(result_id__in=list(result_ids)).order_by("pk"):
        runs[str(run.result_id)].append(run)
    return runs


def _with_runs(view: ResultView, runs: Sequence[RunOutcome]) -> ResultView:
    """``view`` with what its earlier runs tell: workers, errors and the first start."""
    ran = [run for run in runs if run.started_at is not None or run.worker_name]
    view.worker_ids = [run.worker_name for run in ran]
    view.errors = [
        {"exception_class_path": run.exception_class, "traceback": run.traceback}
        for run in runs
        if run.status in _ERROR_STATUSES
    ]
    if ran:
        view.started_at = ran[0].started_at
        view.last_attempted_at = ran[-1].started_at
    return view


def _queued(
    entry: Entry,
    backend: str,
    runs: Sequence[RunOutcome],
    running: tuple[str, datetime] | None = None,
) -> ResultView:
    """The result of a task whose entry is still queued: ``READY``, or ``RUNNING`` on
    ``running`` (worker name, start)."""
    first = entry.attempts == 0 and entry.snoozes == 0
    view = _with_runs(
        ResultView(
            id=str(entry.result_id),
            task_path=entry.job_name,
            backend=backend,
            status=TaskResultStatus.READY,
            args=list(entry.args),
            kwargs=dict(entry.kwargs),
            enqueued_at=entry.enqueued_at,
            queue_name=entry.queue_id,
            priority=entry.priority,
            run_after=entry.run_at if first and entry.run_at > entry.enqueued_at else None,
        ),
        runs,
    )
    if running is not None:
        worker, started_at = running
        view.status = TaskResultStatus.RUNNING
        view.worker_ids.append(worker)
        view.started_at = view.started_at or started_at
        view.last_attempted_at = started_at
    return view


def _ended(result_id: str, backend: str, runs: Sequence[RunOutcome]) -> ResultView:
    """The result of a task whose entry has ended, from its outcome records."""
    last = runs[-1]
    view = _with_runs(
        ResultView(
            id=result_id,
            task_path=last.job_name,
            backend=backend,
            status=(
                TaskResultStatus.SUCCESSFUL
                if last.status == OutcomeStatus.SUCCEEDED
                else TaskResultStatus.FAILED
            ),
            args=list(last.args),
            kwargs=dict(last.kwargs),
            enqueued_at=last.enqueued_at,
            queue_name=last.queue,
            finished_at=last.finished_at,
        ),
        runs,
    )
    if last.status == OutcomeStatus.SUCCEEDED:
        view.return_value = last.return_value
    return view


def _as_stored(task: Task, **stored: Any) -> Task:
    """A copy of ``task`` with what its entry or records stored, not validated again: a result
    read back shows what was enqueued, even if the queue is no longer configured."""
    copy = object.__new__(type(task))
    for field in dataclasses.fields(task):
        object.__setattr__(copy, field.name, stored.get(field.name, getattr(task, field.name)))
    return cast(Task, copy)


def _task_job(task: Task) -> TaskJob:
    """Return the registered job of ``task``, registering the task the first time it is seen."""
    existing = registered_jobs().get(task.module_path)
    if isinstance(existing, TaskJob) and existing.func is task.func:
        return existing
    job = TaskJob(task)
    register(job)
    return job


class _TaskCatalog(RegisteredJobs):
    """The registry, with the queues a backend's ``QUEUES`` lists declared too: a task sent to
    one of them with ``using(queue_name=...)`` creates its queue on first use."""

    def __init__(self, queues: set[str]) -> None:
        self.queues = queues

    def declared_queues(self) -> dict[str, dict[str, Any]]:
        declared = super().declared_queues()
        for name in self.queues:
            declared.setdefault(name, {})
        return declared


class IQBackend(BaseTaskBackend):
    """Run Django Tasks on django_iq: ``TASKS = {"default": {"BACKEND":
    "django_iq.backends.IQBackend"}}``. Tasks may use the queues of the backend's ``QUEUES``
    when given, any queue when ``QUEUES`` is ``[]`` (the framework then checks no queue name),
    else those configured in ``DJANGO_IQ`` and the framework's default queue
    (``django_iq.tasks_options``). ``OPTIONS["max_attempts"]`` (default 1) is how often a task
    that names no ``max_attempts`` is tried."""

    task_class = IQTask
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        # No QUEUES key: the framework's check is off; validate_task checks the configured
        # queues instead, read when each task is checked (settings may change in tests).
        # QUEUES = []: the framework's check is off and so is ours: any queue, created on use.
        self.queues = set(params["QUEUES"]) if "QUEUES" in params else set()
        self.any_queue = "QUEUES" in params and not params["QUEUES"]
        self.catalog = _TaskCatalog(self.queues)

    @property
    def default_max_attempts(self) -> int:
        """How often a task naming no ``max_attempts`` is tried: ``OPTIONS["max_attempts"]``,
        else 1. Raises ``ImproperlyConfiguredIQ`` for bad ``OPTIONS``."""
        return default_max_attempts(self.alias, self.options)

    def validate_task(self, task: Task) -> None:
        """Raise ``InvalidTask`` for what the framework refuses, a queue that is not configured
        (nothing is declared by a task naming it) and invalid django_iq options."""
        problem = queue_problem(self.alias, task.queue_name, self.queues, any_queue=self.any_queue)
        if problem is not None:
            raise InvalidTask(problem)
        super().validate_task(task)
        _options(task, self)

    def enqueue(self, task: Task, args: Iterable[Any], kwargs: dict[str, Any]) -> TaskResult:
        """Write the task's entry (its result id on it: one statement on PostgreSQL); return
        the READY TaskResult."""
        self.validate_task(task)
        job = _task_job(task)
        args = list(args)
        try:
            validate_arguments(args, kwargs)
            job.check_call(args, kwargs)
        except TypeError as exc:
            raise type(exc)(str(exc)) from None
        result_id = get_random_string(32)
        try:
            (entry,) = Entry.objects.enqueue_many(
                job.name,
                [(args, kwargs)],
                _options(task, self),
                jobs=_TaskCatalog({task.queue_name}) if self.any_queue else self.catalog,
                result_ids=[result_id],
            )
        except IQError as exc:
            if isinstance(exc, TypeError | DatabaseUnavailable):
                raise
            raise InvalidTask(str(exc)) from exc
        view = ResultView(
            id=result_id,
            task_path=task.module_path,
            backend=self.alias,
            status=TaskResultStatus.READY,
            args=args,
            kwargs=kwargs,
            enqueued_at=entry.enqueued_at,
            run_after=task.run_after,
        )
        task_result = self._to_task_result(view, task)
        signals.send(task_enqueued, type(self), task_result=task_result)
        return task_result

    def get_result(self, result_id: str) -> TaskResult:
        """Return the task's result as it stands now; raise ``TaskResultDoesNotExist``.

        The entry is read first, then the outcome records: a task ending meanwhile deletes
        its entry and writes its last record in one transaction, so it is seen either way."""
        if not isinstance(result_id, str) or not 0 < len(result_id) <= 32:
            raise TaskResultDoesNotExist(result_id)
        entry = Entry.objects.filter(result_id=result_id).first()
        runs = _runs_of([result_id])[result_id]
        if entry is not None:
            lock = (
                GroupLock.objects.filter(key=entry.lock_key, entry_id=entry.pk)
                .select_related("worker")
                .first()
            )
            running = None
            if lock is not None:
                running = (lock.worker.name if lock.worker is not None else "", lock.locked_at)
            view = _queued(entry, self.alias, runs, running)
        elif runs:
            view = _ended(result_id, self.alias, runs)
        else:
            raise TaskResultDoesNotExist(result_id)
        try:
            job = get_job(view.task_path)
        except IQError:
            raise TaskResultDoesNotExist(
                f"{result_id} belongs to task {view.task_path}, which is not registered here."
            ) from None
        if not isinstance(job, TaskJob):
            raise TaskResultDoesNotExist(f"{result_id} does not belong to a task.")
        return self._to_task_result(view, job.task)

    def _to_task_result(self, view: ResultView, task: Task) -> TaskResult:
        queue_name = view.queue_name if view.queue_name is not None else task.queue_name
        priority = view.priority if view.priority is not None else task.priority
        if (task.queue_name, task.priority, task.run_after) != (
            queue_name,
            priority,
            view.run_after,
        ):
            # A copy only where the call changed them with ``using()``.
            task = _as_stored(
                task, queue_name=queue_name, priority=priority, run_after=view.run_after
            )
        result: Any = TaskResult(
            task=task,
            id=view.id,
            status=TaskResultStatus(view.status),
            enqueued_at=view.enqueued_at,
            started_at=view.started_at,
            finished_at=view.finished_at,
            last_attempted_at=view.last_attempted_at,
            args=list(view.args),
            kwargs=dict(view.kwargs),
            backend=view.backend,
            errors=[TaskError(**error) for error in view.errors],
            worker_ids=list(view.worker_ids),
        )
        object.__setattr__(result, "_return_value", view.return_value)
        return cast(TaskResult, result)

    def check(self, **kwargs: Any) -> list[checks.CheckMessage]:
        messages: list[checks.CheckMessage] = list(super().check(**kwargs))
        if not apps.is_installed("django_iq"):
            messages.append(
                checks.Error(
                    f"TASKS[{self.alias!r}] uses django_iq.backends.IQBackend but django_iq is not "
                    "in INSTALLED_APPS.",
                    hint='Add "django_iq" to INSTALLED_APPS and run migrate.',
                    id="django_iq.E017",
                )
            )
        for problem in option_problems(self.alias, self.options):
            messages.append(
                checks.Error(
                    problem,
                    hint=f"IQBackend takes {', '.join(BACKEND_OPTIONS)} in OPTIONS; set other "
                    f"options per task ({', '.join(TASK_OPTIONS)}) or in DJANGO_IQ.",
                    id="django_iq.E018",
                )
            )
        return messages


def _finished(entries: Iterable[Entry]) -> None:
    """Send ``task_finished`` for the entries of tasks among ``entries`` (ended: their records
    are written), their runs read in one query."""
    tasks = {}
    for entry in entries:
        job = registered_jobs().get(entry.job_name)
        if entry.result_id is not None and isinstance(job, TaskJob):
            tasks[entry.result_id] = job.task
    if not tasks:
        return
    runs = _runs_of(sorted(tasks))
    for result_id in sorted(tasks):
        if not runs[result_id]:
            continue  # pruned already, or written by another database
        task = tasks[result_id]
        backend = cast("IQBackend", task.get_backend())
        task_result = backend._to_task_result(
            _ended(result_id, backend.alias, runs[result_id]), task
        )
        signals.send(task_finished, type(backend), task_result=task_result)


@receiver(signals.entries_finished)
def _send_task_finished(sender: Any, entries: list[Entry], **kwargs: Any) -> None:
    _finished(entries)


@receiver(signals.entry_failed)
def _send_task_finished_on_final_failure(
    sender: Any, entry: Entry, error: EntryError, **kwargs: Any
) -> None:
    if error.is_final:
        _finished([entry])
