"""``@job`` and the registry of runnable jobs: only a registered name is ever imported and called."""

from __future__ import annotations

import asyncio
import functools
import importlib
import inspect
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar

from asgiref.sync import async_to_sync
from django.utils.module_loading import autodiscover_modules

from django_iq.appmodels import iq
from django_iq.conf import iq_settings
from django_iq.context import HeldProgress, current, running
from django_iq.exceptions import (
    InvalidJobArguments,
    InvalidJobOptions,
    JobCancelled,
    JobNotRegistered,
    JobTimeout,
)
from django_iq.group_keys import check_grouping, check_key_source, group_key_of, key_of
from django_iq.options import (
    JOB_OPTIONS,
    MAX_GROUP_KEY_LENGTH,
    USING_OPTIONS,
    JobOptions,
    settings_queues,
    unknown_option,
    validate_priority,
    validate_run_at,
)
from django_iq.serialization import call_pair
from django_iq.wording import close_names

if TYPE_CHECKING:
    from django_iq.models import Entry

__all__ = [
    "JOB_OPTIONS",
    "MAX_GROUP_KEY_LENGTH",
    "USING_OPTIONS",
    "BoundJob",
    "Job",
    "JobOptions",
    "RegisteredJobs",
    "autodiscover",
    "catalog",
    "declared_queues",
    "enqueue",
    "enqueue_many",
    "get_job",
    "job",
    "register",
    "registered_jobs",
    "validate_priority",
    "validate_run_at",
]

P = ParamSpec("P")
R = TypeVar("R")

# Entry.job_name is a 200-character column.
MAX_JOB_NAME_LENGTH = 200

_jobs: dict[str, Job[Any, Any]] = {}
_discovered = False
_discover_lock = threading.Lock()


class Job(Generic[P, R]):
    """A registered job: call it to run inline, ``enqueue()`` it to run on a worker."""

    def __init__(self, func: Callable[P, R], name: str, options: JobOptions) -> None:
        self.func = func
        self.name = name
        self.options = options
        self.is_async = inspect.iscoroutinefunction(func)
        functools.update_wrapper(self, func)

    def __repr__(self) -> str:
        return f"<Job {self.name}>"

    @functools.cached_property
    def call_signature(self) -> inspect.Signature | None:
        """The function's signature, read once; None for a callable Python cannot read one of
        (a builtin): its calls are not checked."""
        try:
            return inspect.signature(self.func)
        except (TypeError, ValueError):
            return None

    def limit_keys_of(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> tuple[str, str]:
        """The call's concurrency key and rate limit key (``@job(concurrency_key=...,
        rate_limit_key=...)``), "" for one the job does not have; raise
        ``InvalidJobArguments`` if a key cannot be taken from the call."""
        found = []
        for option in ("concurrency_key", "rate_limit_key"):
            source = getattr(self.options, option)
            what = option.replace("_", " ")
            hint = f"pass a value, the job's {option.removesuffix('_key')} is counted per key"
            found.append(
                ""
                if source is None
                else key_of(self.func, source, args, kwargs, what, option, hint)
            )
        return found[0], found[1]

    def check_call(self, args: Sequence[Any], kwargs: dict[str, Any], index: int = -1) -> None:
        """Raise ``InvalidJobArguments`` if the function cannot be called with ``args`` and
        ``kwargs`` (``index``: the call's place in an ``enqueue_many``): too many or too few
        arguments, or a keyword it has no parameter for."""
        signature = self.call_signature
        if signature is None:
            return
        try:
            signature.bind(*self.leading_arguments, *args, **kwargs)
        except TypeError as exc:
            where = f"Call {index}: " if index >= 0 else ""
            raise InvalidJobArguments(
                f"{where}{self.name}{self.shown_signature()} cannot be called with "
                f"{_shown_call(args, kwargs)}: {exc}. Nothing was enqueued."
            ) from None

    # Arguments the runner passes before the enqueued ones (a task's context).
    leading_arguments: tuple[Any, ...] = ()

    def shown_signature(self) -> str:
        """The parameters a caller gives, without annotations: ``(a, b, *, limit=1)``."""
        return _plain(self.call_signature, skip=len(self.leading_arguments))

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.func(*args, **kwargs)

    def invoke(
        self,
        entry: Entry,
        worker_name: str,
        timeout: float | None = None,
        lock_id: int | None = None,
        progress: HeldProgress | None = None,
    ) -> Any:
        """Run the job for ``entry`` in a processing thread, under the group lock ``lock_id``,
        and return what it returned.

        Coroutine functions run to completion in an event loop of their own, cancelled at
        ``timeout`` seconds (``JobTimeout``); the worker's watchdog times out the others. The
        run's progress reports are held in ``progress``: the worker writes the one still held
        once the run can no longer be timed out (``progress_reports.end_run``).
        """
        with running(entry, worker_name, lock_id, progress):
            if self.is_async:
                return run_coroutine(self.func, entry.args, entry.kwargs, timeout)
            return self.func(*entry.args, **entry.kwargs)

    def using(self, **overrides: Any) -> BoundJob:
        """Return this job with options overridden for the entries it enqueues."""
        return BoundJob(self, self.options.merged(**overrides))

    def enqueue(self, *args: Any, **kwargs: Any) -> Entry:
        """Enqueue one entry running ``job(*args, **kwargs)``; return the ``Entry``."""
        return BoundJob(self, self.options).enqueue(*args, **kwargs)

    def enqueue_many(self, calls: Iterable[tuple[Sequence[Any], dict[str, Any]]]) -> list[Entry]:
        """Enqueue one entry per ``(args, kwargs)`` pair in as few round trips as possible."""
        return BoundJob(self, self.options).enqueue_many(calls)


def _plain(signature: inspect.Signature | None, skip: int = 0) -> str:
    if signature is None:
        return "(...)"
    parameters = list(signature.parameters.values())[skip:]
    return str(
        signature.replace(
            parameters=[parameter.replace(annotation=parameter.empty) for parameter in parameters],
            return_annotation=signature.empty,
        )
    )


def _shown_call(args: Sequence[Any], kwargs: dict[str, Any]) -> str:
    shown = [f"{value!r:.40}" for value in args] + [
        f"{key}={value!r:.40}" for key, value in kwargs.items()
    ]
    text = ", ".join(shown)
    return f"({text[:200]}{'...' if len(text) > 200 else ''})"


def run_coroutine(
    func: Callable[..., Any],
    args: Sequence[Any],
    kwargs: dict[str, Any],
    timeout: float | None,
) -> Any:
    """Run the coroutine function to completion in an event loop of its own; at ``timeout``
    seconds cancel it and raise ``JobTimeout``; when its run is cancelled (``django_iq.cancel``
    reached the worker) cancel it and raise ``JobCancelled``."""

    async def bounded() -> Any:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        cancelled = threading.Event()

        def cancel() -> None:
            cancelled.set()
            if task is not None:
                loop.call_soon_threadsafe(task.cancel)

        context = current()
        if context is not None:
            context.on_cancel(cancel)
        try:
            async with asyncio.timeout(timeout) as deadline:
                return await func(*args, **kwargs)
        except TimeoutError:
            if deadline.expired():
                raise JobTimeout(f"The coroutine ran past its timeout of {timeout:g} s.") from None
            raise
        except asyncio.CancelledError:
            if cancelled.is_set():
                raise JobCancelled("The run was cancelled.") from None
            raise

    return async_to_sync(bounded)()


@dataclass(frozen=True)
class BoundJob:
    """A job with options fixed by ``using()``; only ``enqueue`` and ``enqueue_many`` remain."""

    job: Job[Any, Any]
    options: JobOptions

    def using(self, **overrides: Any) -> BoundJob:
        return BoundJob(self.job, self.options.merged(**overrides))

    def enqueue(self, *args: Any, **kwargs: Any) -> Entry:
        self.job.check_call(args, kwargs)
        (entry,) = self._enqueue_checked([(args, kwargs)])
        return entry

    def enqueue_many(self, calls: Iterable[tuple[Sequence[Any], dict[str, Any]]]) -> list[Entry]:
        # Every call is checked against the function's signature before anything is written.
        listed = [call_pair(index, call) for index, call in enumerate(calls)]
        for index, (args, kwargs) in enumerate(listed):
            self.job.check_call(args, kwargs, index)
        return self._enqueue_checked(listed)

    def _enqueue_checked(self, listed: list[tuple[Sequence[Any], dict[str, Any]]]) -> list[Entry]:
        options = self.options
        group_by = options.group_by
        keys: list[str | None] = []
        if group_by is not None and options.group_key is None:
            # A group key per call, each found before anything is written.
            keys = [
                group_key_of(self.job.func, group_by, *call_pair(index, call))
                for index, call in enumerate(listed)
            ]
        # The keys the job's limits count per value of (concurrency_key, rate_limit_key): taken
        # only for a job that has them, not on every enqueue.
        limit_keys: list[tuple[str, str]] = []
        if options.concurrency_key is not None or options.rate_limit_key is not None:
            limit_keys = [self.job.limit_keys_of(*call) for call in listed]
        return iq.Entry.objects.enqueue_many(
            self.job.name, listed, options, jobs=catalog, group_keys=keys, limit_keys=limit_keys
        )


def job(func: Callable[P, R] | None = None, *, name: str | None = None, **options: Any) -> Any:
    """Register ``func`` as a job; use bare (``@job``) or with options (``@job(queue="emails")``).

    Options: ``queue``, ``priority`` (-100..100), ``max_attempts``, ``group_key``, ``group_by``
    (a parameter name or ``f(args, kwargs)``: each call's group key), ``merge`` (with
    ``group_by``: folds a group's waiting entries into one, see ``compaction.py``),
    ``backoff_base_seconds``, ``backoff_max_seconds``, ``retry_on``, ``dont_retry_on``,
    ``max_snoozes``, ``unique``, ``unique_for`` and ``keep_outcomes`` (False: runs leave no
    outcome record). Raises ``InvalidJobOptions``.
    """
    for option in options:
        if option not in JOB_OPTIONS:
            raise unknown_option(option, JOB_OPTIONS, "@job")
    job_options = JobOptions(**options)
    if isinstance(job_options.expires, datetime):
        raise InvalidJobOptions(
            "@job(expires=...) takes seconds or a timedelta (counted from when each entry is "
            "due); a datetime only with using(expires=...)."
        )

    def register(inner: Callable[P, R]) -> Job[P, R]:
        job_name = name or f"{inner.__module__}.{inner.__qualname__}"
        if "<locals>" in job_name:
            raise InvalidJobOptions(
                f"{job_name} is defined inside a function; workers could not find it. "
                "Define jobs at module level."
            )
        if len(job_name) > MAX_JOB_NAME_LENGTH:
            raise InvalidJobOptions(
                f"Job name {job_name[:80]}... has {len(job_name)} characters; the most is "
                f"{MAX_JOB_NAME_LENGTH}. Pass a shorter one with @job(name=...)."
            )
        check_grouping(
            inner, job_name, job_options.group_by, job_options.merge, job_options.group_key
        )
        for option in ("concurrency_key", "rate_limit_key"):
            check_key_source(inner, job_name, option, getattr(job_options, option))
        new = Job(inner, job_name, job_options)
        # Re-registering a name (a module reloaded by the dev server) keeps the newest definition.
        _jobs[job_name] = new
        return new

    return register(func) if func is not None else register


def autodiscover() -> None:
    """Import each installed app's ``jobs`` module and ``DJANGO_IQ["JOB_MODULES"]``, once."""
    global _discovered
    with _discover_lock:
        if _discovered:
            return
        autodiscover_modules("jobs")
        autodiscover_modules("tasks")  # Django Tasks' convention: @task functions in tasks.py
        for module in iq_settings.JOB_MODULES:
            importlib.import_module(module)
        _discovered = True


def get_job(target: Job[Any, Any] | BoundJob | str) -> Job[Any, Any]:
    """Return the registered job for a ``Job`` or a dotted name; raise ``JobNotRegistered``."""
    if isinstance(target, BoundJob):
        return target.job
    if isinstance(target, Job):
        if target.name not in _jobs:
            raise JobNotRegistered(f"Job {target.name} is not registered.")
        return target
    if not isinstance(target, str):
        raise JobNotRegistered(
            f"Expected a @job function or its dotted name, got {type(target).__name__} {target!r:.80}."
        )
    found = _jobs.get(target)
    if found is None:
        autodiscover()
        found = _jobs.get(target)
    if found is None:
        close = close_names(target, list(_jobs))
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise JobNotRegistered(
            f"{target!r} is not a registered job.{hint} Decorate the function with "
            "@django_iq.job in an installed app's jobs.py or a module listed in "
            'DJANGO_IQ["JOB_MODULES"].'
        )
    return found


def register(job: Job[Any, Any]) -> Job[Any, Any]:
    """Add ``job`` to the registry under ``job.name`` (used by the Django Tasks backend)."""
    _jobs[job.name] = job
    return job


def registered_jobs() -> dict[str, Job[Any, Any]]:
    """Return a copy of the registry, name to job."""
    return dict(_jobs)


def enqueue(target: Job[Any, Any] | BoundJob | str, *args: Any, **kwargs: Any) -> Entry:
    """Enqueue ``target(*args, **kwargs)``; ``target`` is a job, ``job.using(...)`` or a name."""
    if isinstance(target, BoundJob):
        return target.enqueue(*args, **kwargs)
    return get_job(target).enqueue(*args, **kwargs)


def enqueue_many(
    target: Job[Any, Any] | BoundJob | str, calls: Iterable[tuple[Sequence[Any], dict[str, Any]]]
) -> list[Entry]:
    """Enqueue one entry per ``(args, kwargs)`` pair of ``calls`` in batches."""
    if isinstance(target, BoundJob):
        return target.enqueue_many(calls)
    return get_job(target).enqueue_many(calls)


def declared_queues() -> dict[str, dict[str, Any]]:
    """Queues declared in ``DJANGO_IQ["QUEUES"]`` (with their options) and by registered jobs."""
    declared = settings_queues()
    for registered in _jobs.values():
        declared.setdefault(registered.options.queue_name, {})
    return declared


class RegisteredJobs:
    """The registry as the managers see it (``django_iq.options.JobCatalog``)."""

    def declared_queues(self) -> dict[str, dict[str, Any]]:
        return declared_queues()

    def queue_of(self, job_name: str) -> str:
        return get_job(job_name).options.queue_name

    def max_attempts_of(self, job_name: str) -> int:
        try:
            return get_job(job_name).options.effective_max_attempts
        except JobNotRegistered:
            default: int = iq_settings.DEFAULT_MAX_ATTEMPTS
            return default

    def keeps_outcomes(self, job_name: str) -> bool:
        job = registered_jobs().get(job_name)
        return job is None or job.options.keep_outcomes

    def limit_keys_of(
        self, job_name: str, args: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> tuple[str, str]:
        try:
            job = get_job(job_name)  # the job modules discovered first, as a worker does
        except JobNotRegistered:
            return "", ""
        return job.limit_keys_of(args, kwargs)


catalog = RegisteredJobs()
