"""The Django Tasks backend: ``@task`` functions enqueue entries and run on django_iq workers."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any, cast

from django.apps import apps
from django.core import checks
from django.dispatch import receiver
from django.utils import timezone
from django.utils.crypto import get_random_string

from django_iq import signals
from django_iq.dbconn import with_db_retry
from django_iq.exceptions import DatabaseUnavailable, InvalidJobOptions, IQError
from django_iq.models import Entry, EntryError, Result
from django_iq.registry import (
    Job,
    JobOptions,
    catalog,
    get_job,
    register,
    registered_jobs,
    run_coroutine,
)
from django_iq.serialization import validate_arguments
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

# django_iq options a task may carry, beyond the framework's own.
TASK_OPTIONS = ("max_attempts", "group_key", "backoff_base_seconds", "backoff_max_seconds")
# Backoff is read from the decorated task by workers, so using() changes only these.
TASK_USING_OPTIONS = ("max_attempts", "group_key")
BACKEND_OPTIONS: tuple[str, ...] = ()


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


def _options(task: Task) -> JobOptions:
    try:
        return JobOptions(
            queue=task.queue_name,
            priority=task.priority,
            max_attempts=getattr(task, "max_attempts", None),
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

    def invoke(
        self,
        entry: Entry,
        worker_name: str,
        started: Callable[[str, datetime], None] | None = None,
        timeout: float | None = None,
    ) -> Any:
        backend = cast("IQBackend", self.task.get_backend())
        first_run = entry.attempts == 0 and entry.snoozes == 0
        if entry.result_id is not None and started is not None and first_run:
            # A first run: the result is as enqueued (READY, no errors, no workers), so it is
            # built here and its start written behind the run, by the worker's ack writer.
            now = timezone.now()
            started(entry.result_id, now)
            task_result = backend._to_task_result(
                _first_start(entry, backend, worker_name, now), self.task
            )
        elif entry.result_id is not None:
            # The queue's own writes, before the task's body: a database error here is retried,
            # never charged to the task as a failed attempt.
            result_id = entry.result_id
            row = with_db_retry(
                lambda: Result.objects.record_start(result_id, worker_name, timezone.now()),
                "record start",
            )
            if row is None:
                raise TaskResultDoesNotExist(result_id)
            task_result = backend._to_task_result(row, self.task)
        else:
            task_result = backend.result_for(self.task, entry, worker_name)
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


def _running(
    entry: Entry,
    *,
    result_id: str,
    task_path: str,
    backend: str,
    worker_ids: list[str],
    now: datetime,
    run_after: datetime | None = None,
) -> Result:
    """A RUNNING result for ``entry`` built in memory, without reading or writing it."""
    return Result(
        id=result_id,
        task_path=task_path,
        backend=backend,
        queue_name=entry.queue_id,
        priority=entry.priority,
        status="RUNNING",
        args=entry.args,
        kwargs=entry.kwargs,
        run_after=run_after,
        enqueued_at=entry.enqueued_at,
        started_at=now,
        last_attempted_at=now,
        worker_ids=worker_ids,
    )


def _first_start(entry: Entry, backend: IQBackend, worker_name: str, now: datetime) -> Result:
    """The result of an entry's first attempt as it stands once started (it is as enqueued)."""
    return _running(
        entry,
        result_id=str(entry.result_id),
        task_path=entry.job_name,
        backend=backend.alias,
        worker_ids=[worker_name],
        now=now,
        run_after=entry.run_at if entry.run_at > entry.enqueued_at else None,
    )


def _task_job(task: Task) -> TaskJob:
    """Return the registered job of ``task``, registering the task the first time it is seen."""
    existing = registered_jobs().get(task.module_path)
    if isinstance(existing, TaskJob) and existing.func is task.func:
        return existing
    job = TaskJob(task)
    register(job)
    return job


class IQBackend(BaseTaskBackend):
    """Run Django Tasks on django_iq: ``TASKS = {"default": {"BACKEND":
    "django_iq.backends.IQBackend"}}``. Queues are django_iq queues; ``QUEUES`` in the
    backend's settings, when given, limits which of them tasks may use."""

    task_class = IQTask
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        # No QUEUES key: every django_iq queue may be used, checked at enqueue.
        self.queues = set(params["QUEUES"]) if "QUEUES" in params else set()

    def validate_task(self, task: Task) -> None:
        super().validate_task(task)
        _options(task)

    def enqueue(self, task: Task, args: Iterable[Any], kwargs: dict[str, Any]) -> TaskResult:
        """Write a READY result and its entry together (one statement on PostgreSQL); return the TaskResult."""
        self.validate_task(task)
        job = _task_job(task)
        args = list(args)
        try:
            validate_arguments(args, kwargs)
        except TypeError as exc:
            raise type(exc)(str(exc)) from None
        now = timezone.now()
        row = Result(
            id=get_random_string(32),
            task_path=task.module_path,
            backend=self.alias,
            queue_name=task.queue_name,
            priority=task.priority,
            args=args,
            kwargs=kwargs,
            run_after=task.run_after,
            enqueued_at=now,
        )
        try:
            # The result row is written with its entry: one statement on PostgreSQL.
            Entry.objects.enqueue_many(
                job.name, [(args, kwargs)], _options(task), jobs=catalog, results=[row]
            )
        except IQError as exc:
            if isinstance(exc, TypeError | DatabaseUnavailable):
                raise
            raise InvalidTask(str(exc)) from exc
        row._state.adding = False
        task_result = self._to_task_result(row, task)
        signals.send(task_enqueued, type(self), task_result=task_result)
        return task_result

    def get_result(self, result_id: str) -> TaskResult:
        """Return the task's result as stored now; raise ``TaskResultDoesNotExist``."""
        row = Result.objects.filter(pk=result_id).first()
        if row is None:
            raise TaskResultDoesNotExist(result_id)
        try:
            job = get_job(row.task_path)
        except IQError:
            raise TaskResultDoesNotExist(
                f"{result_id} belongs to task {row.task_path}, which is not registered here."
            ) from None
        task = job.task if isinstance(job, TaskJob) else None
        if task is None:
            raise TaskResultDoesNotExist(f"{result_id} does not belong to a task.")
        return self._to_task_result(row, task)

    def result_for(self, task: Task, entry: Entry, worker_name: str) -> TaskResult:
        """A RUNNING result for an entry that has no stored result (enqueued as a plain job)."""
        row = _running(
            entry,
            result_id=f"entry-{entry.pk}",
            task_path=task.module_path,
            backend=self.alias,
            worker_ids=[worker_name] * (entry.attempts + 1),
            now=timezone.now(),
        )
        return self._to_task_result(row, task)

    def _to_task_result(self, row: Result, task: Task) -> TaskResult:
        if (task.queue_name, task.priority, task.run_after) != (
            row.queue_name,
            row.priority,
            row.run_after,
        ):
            # A copy (validated again) only where the call changed them with ``using()``.
            task = Task.using(
                task, queue_name=row.queue_name, priority=row.priority, run_after=row.run_after
            )
        result: Any = TaskResult(
            task=task,
            id=row.pk,
            status=TaskResultStatus(row.status),
            enqueued_at=row.enqueued_at,
            started_at=row.started_at,
            finished_at=row.finished_at,
            last_attempted_at=row.last_attempted_at,
            args=list(row.args),
            kwargs=dict(row.kwargs),
            backend=row.backend,
            errors=[TaskError(**error) for error in row.errors],
            worker_ids=list(row.worker_ids),
        )
        object.__setattr__(result, "_return_value", row.return_value)
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
        for key in self.options:
            if key not in BACKEND_OPTIONS:
                messages.append(
                    checks.Error(
                        f"TASKS[{self.alias!r}]['OPTIONS'] has an unknown key {key!r}.",
                        hint="IQBackend takes no OPTIONS; set queue and retry options per task "
                        f"({', '.join(TASK_OPTIONS)}) or in DJANGO_IQ.",
                        id="django_iq.E018",
                    )
                )
        return messages


def _finished(entries: Iterable[Entry], written: Mapping[str, Result] | None = None) -> None:
    """Send ``task_finished`` for the entries of tasks among ``entries``, their results taken
    from ``written`` (as the write returned them) or read in one query."""
    tasks = {}
    for entry in entries:
        job = registered_jobs().get(entry.job_name)
        if entry.result_id is not None and isinstance(job, TaskJob):
            tasks[entry.result_id] = job.task
    if not tasks:
        return
    rows = [written[pk] for pk in sorted(tasks) if written and pk in written]
    unread = sorted(pk for pk in tasks if not written or pk not in written)
    if unread:
        rows.extend(Result.objects.filter(pk__in=unread).order_by("pk"))
    for row in rows:
        task = tasks[row.pk]
        backend = cast("IQBackend", task.get_backend())
        task_result = backend._to_task_result(row, task)
        signals.send(task_finished, type(backend), task_result=task_result)


@receiver(signals.entries_finished)
def _send_task_finished(
    sender: Any, entries: list[Entry], results: Mapping[str, Result] | None = None, **kwargs: Any
) -> None:
    _finished(entries, results)


@receiver(signals.entry_failed)
def _send_task_finished_on_final_failure(
    sender: Any, entry: Entry, error: EntryError, **kwargs: Any
) -> None:
    if error.is_final:
        _finished([entry])
