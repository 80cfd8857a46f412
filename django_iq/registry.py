"""``@job`` and the registry of runnable jobs: only a registered name is ever imported and called."""

from __future__ import annotations

import difflib
import functools
import importlib
import inspect
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar, cast

from asgiref.sync import async_to_sync
from django.utils import timezone
from django.utils.module_loading import autodiscover_modules

from django_iq.conf import iq_settings
from django_iq.exceptions import InvalidJobOptions, JobNotRegistered
from django_iq.limits import (
    MAX_ATTEMPTS_LIMIT,
    MAX_BACKOFF_SECONDS,
    capped_backoff,
    run_at_problem,
    text_problem,
)
from django_iq.states import MAX_PRIORITY, MIN_PRIORITY

if TYPE_CHECKING:
    from django_iq.models import Entry

P = ParamSpec("P")
R = TypeVar("R")

# An entry's lock key is "g:" + its group key, stored in a 200-character column.
MAX_GROUP_KEY_LENGTH = 198
# Entry.job_name is a 200-character column.
MAX_JOB_NAME_LENGTH = 200
# Options accepted by ``@job(...)`` and ``Job.using(...)``; ``run_at`` only by ``using``.
JOB_OPTIONS = (
    "queue",
    "priority",
    "max_attempts",
    "group_key",
    "backoff_base_seconds",
    "backoff_max_seconds",
)
# Backoff belongs to the job (workers read it from the registry), so using() cannot change it.
USING_OPTIONS = ("queue", "priority", "max_attempts", "group_key", "run_at")

_jobs: dict[str, Job[Any, Any]] = {}
_discovered = False
_discover_lock = threading.Lock()


def _unknown_option(name: str, allowed: Sequence[str], where: str) -> InvalidJobOptions:
    close = difflib.get_close_matches(name, allowed, n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    return InvalidJobOptions(
        f"Unknown option {name!r} for {where}.{hint} Valid options: {', '.join(allowed)}."
    )


def validate_priority(priority: Any) -> int:
    """Return ``priority`` if it is an int in -100..100, else raise ``InvalidJobOptions``."""
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise InvalidJobOptions(
            f"priority must be an integer from {MIN_PRIORITY} to {MAX_PRIORITY}, got {priority!r}."
        )
    if not MIN_PRIORITY <= priority <= MAX_PRIORITY:
        raise InvalidJobOptions(
            f"priority must be from {MIN_PRIORITY} to {MAX_PRIORITY}, got {priority}."
        )
    return priority


def validate_run_at(run_at: Any) -> datetime | timedelta | None:
    """Return ``run_at`` if it is an aware datetime, a timedelta (counted from each enqueue,
    not from this call) or None; raise ``InvalidJobOptions`` otherwise."""
    if run_at is None:
        return None
    if isinstance(run_at, timedelta):
        return run_at
    if not isinstance(run_at, datetime):
        raise InvalidJobOptions(
            f"run_at must be a datetime or a timedelta, got {type(run_at).__name__} {run_at!r}."
        )
    if timezone.is_naive(run_at):
        raise InvalidJobOptions(
            f"run_at {run_at.isoformat()} has no timezone; pass an aware datetime "
            "(django.utils.timezone.now() + timedelta(...))."
        )
    problem = run_at_problem(run_at)
    if problem is not None:
        raise InvalidJobOptions(f"{problem}.")
    return run_at


def _text_option(name: str, value: str) -> None:
    problem = text_problem(value)
    if problem is not None:
        raise InvalidJobOptions(f"{name} {value!r:.80} {problem}; the database cannot store it.")


@dataclass(frozen=True)
class JobOptions:
    """Where, how urgently and how persistently a job's entries run."""

    queue: str | None = None
    priority: int | None = None
    max_attempts: int | None = None
    group_key: str | None = None
    backoff_base_seconds: float | None = None
    backoff_max_seconds: float | None = None
    run_at: datetime | timedelta | None = field(default=None)

    def __post_init__(self) -> None:
        if self.queue is not None and (not isinstance(self.queue, str) or not self.queue.strip()):
            raise InvalidJobOptions(f"queue must be a non-empty string, got {self.queue!r}.")
        if self.queue is not None and len(self.queue) > 100:
            raise InvalidJobOptions(
                f"queue names are at most 100 characters, got {len(self.queue)}."
            )
        if self.queue is not None:
            _text_option("queue", self.queue)
        if self.priority is not None:
            validate_priority(self.priority)
        if self.max_attempts is not None and (
            isinstance(self.max_attempts, bool)
            or not isinstance(self.max_attempts, int)
            or not 1 <= self.max_attempts <= MAX_ATTEMPTS_LIMIT
        ):
            raise InvalidJobOptions(
                f"max_attempts must be an integer from 1 to {MAX_ATTEMPTS_LIMIT:,}, "
                f"got {self.max_attempts!r:.80}."
            )
        if self.group_key is not None and (
            not isinstance(self.group_key, str)
            or not 0 < len(self.group_key) <= MAX_GROUP_KEY_LENGTH
        ):
            raise InvalidJobOptions(
                f"group_key must be a string of 1 to {MAX_GROUP_KEY_LENGTH} characters, "
                f"got {self.group_key!r:.80}."
            )
        if self.group_key is not None:
            _text_option("group_key", self.group_key)
        for name in ("backoff_base_seconds", "backoff_max_seconds"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not 0 <= value <= MAX_BACKOFF_SECONDS
            ):
                raise InvalidJobOptions(
                    f"{name} must be a number of seconds from 0 to {MAX_BACKOFF_SECONDS:,.0f} "
                    f"(a year), got {value!r:.80}."
                )
        if self.run_at is not None:
            validate_run_at(self.run_at)

    def merged(self, **overrides: Any) -> JobOptions:
        """Return a copy with ``overrides`` applied, validating names and values."""
        for name in overrides:
            if name not in USING_OPTIONS:
                raise _unknown_option(name, USING_OPTIONS, "using()")
        if "run_at" in overrides:
            overrides["run_at"] = validate_run_at(overrides["run_at"])
        return replace(self, **overrides)

    @property
    def queue_name(self) -> str:
        return self.queue or iq_settings.DEFAULT_QUEUE

    @property
    def effective_priority(self) -> int:
        return self.priority if self.priority is not None else iq_settings.DEFAULT_PRIORITY

    @property
    def effective_max_attempts(self) -> int:
        return (
            self.max_attempts if self.max_attempts is not None else iq_settings.DEFAULT_MAX_ATTEMPTS
        )


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

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.func(*args, **kwargs)

    def invoke(self, entry: Entry, worker_name: str) -> Any:
        """Run the job for ``entry`` in a processing thread and return what it returned.

        Coroutine functions run to completion in an event loop of their own.
        """
        if self.is_async:
            return async_to_sync(cast(Any, self.func))(*entry.args, **entry.kwargs)
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

    def backoff_seconds(self, attempt: int) -> float:
        """Return the delay before retry number ``attempt`` (1-based), before jitter."""
        base = self.options.backoff_base_seconds
        cap = self.options.backoff_max_seconds
        base = iq_settings.BACKOFF_BASE_SECONDS if base is None else base
        cap = iq_settings.BACKOFF_MAX_SECONDS if cap is None else cap
        return capped_backoff(base, cap, attempt)


@dataclass(frozen=True)
class BoundJob:
    """A job with options fixed by ``using()``; only ``enqueue`` and ``enqueue_many`` remain."""

    job: Job[Any, Any]
    options: JobOptions

    def using(self, **overrides: Any) -> BoundJob:
        return BoundJob(self.job, self.options.merged(**overrides))

    def enqueue(self, *args: Any, **kwargs: Any) -> Entry:
        from django_iq.models import Entry

        return Entry.objects.enqueue(self.job, args, kwargs, self.options)

    def enqueue_many(self, calls: Iterable[tuple[Sequence[Any], dict[str, Any]]]) -> list[Entry]:
        from django_iq.models import Entry

        return Entry.objects.enqueue_many(self.job, calls, self.options)


def job(func: Callable[P, R] | None = None, *, name: str | None = None, **options: Any) -> Any:
    """Register ``func`` as a job; use bare (``@job``) or with options (``@job(queue="emails")``).

    Options: ``queue``, ``priority`` (-100..100), ``max_attempts``, ``group_key``,
    ``backoff_base_seconds``, ``backoff_max_seconds``. Raises ``InvalidJobOptions``.
    """
    for option in options:
        if option not in JOB_OPTIONS:
            raise _unknown_option(option, JOB_OPTIONS, "@job")
    job_options = JobOptions(**options)

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
        close = difflib.get_close_matches(target, list(_jobs), n=1)
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
