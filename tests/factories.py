"""factory-boy factories for every django_iq model; traits set states."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

import factory
from django.utils import timezone

from django_iq.managers import Success
from django_iq.models import (
    CronJob,
    DisabledJob,
    Entry,
    EntryError,
    GroupLock,
    LeaderLease,
    Queue,
    RunOutcome,
    Worker,
)
from django_iq.registry import autodiscover, registered_jobs


class QueueFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Queue
        django_get_or_create = ("name",)

    name = factory.Sequence(lambda n: f"queue-{n}")
    weight = 1


def every_registered_job() -> list[str]:
    autodiscover()
    return sorted(registered_jobs())


class WorkerFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Worker

    name = factory.Sequence(lambda n: f"host:{1000 + n}")
    host = "host"
    pid = factory.Sequence(lambda n: 1000 + n)
    processing_threads = 4
    # What a worker started by runworker registers: every job it can run.
    job_names = factory.LazyFunction(every_registered_job)


class EntryFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Entry
        # The ``locked`` trait's RelatedFactory writes the lock, not the entry: no second save.
        skip_postgeneration_save = True

    queue = factory.SubFactory(QueueFactory, name="default")
    job_name = "tests.testapp.jobs.record"
    args = factory.Sequence(lambda n: [f"token-{n}"])
    kwargs = factory.LazyFunction(dict)
    priority = 0
    state = "pending"
    group_key = None
    lock_key = factory.LazyAttribute(
        lambda o: f"g:{o.group_key}" if o.group_key else f"e:{uuid.uuid4().hex}"
    )
    run_at = factory.LazyFunction(timezone.now)
    max_attempts = 3

    class Params:
        deferred = factory.Trait(
            state="initial",
            run_at=factory.LazyFunction(lambda: timezone.now() + timedelta(hours=1)),
        )
        disabled = factory.Trait(state="disabled")
        locked = factory.Trait(
            lock=factory.RelatedFactory(
                "tests.factories.GroupLockFactory",
                factory_related_name="entry_for_key",
            )
        )
        # Locked, and the lock's tracked entry: what a live worker's claim runs.
        running = factory.Trait(
            lock=factory.RelatedFactory(
                "tests.factories.GroupLockFactory",
                factory_related_name="entry_for_key",
                track_entry=True,
            )
        )


class GroupLockFactory(factory.django.DjangoModelFactory):
    """A lock; pass ``entry_for_key=entry`` to lock that entry's group, and ``track_entry=True``
    to make that entry the one the claim runs (as a claim does)."""

    class Meta:
        model = GroupLock
        exclude = ("entry_for_key", "track_entry")

    entry_for_key = None
    track_entry = False
    entry_id = factory.LazyAttribute(
        lambda o: o.entry_for_key.pk if o.entry_for_key is not None and o.track_entry else None
    )
    key = factory.LazyAttribute(
        lambda o: o.entry_for_key.lock_key if o.entry_for_key else f"e:{uuid.uuid4().hex}"
    )
    queue = factory.LazyAttribute(
        lambda o: o.entry_for_key.queue if o.entry_for_key else QueueFactory(name="default")
    )
    worker = factory.SubFactory(WorkerFactory)


class EntryErrorFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = EntryError

    entry_id = factory.Sequence(lambda n: 10_000 + n)
    queue = factory.SubFactory(QueueFactory, name="default")
    job_name = "tests.testapp.jobs.record"
    args = factory.Sequence(lambda n: [f"requeued-{n}"])
    attempt = 1
    max_attempts = 1
    exception_class = "builtins.ValueError"
    message = "boom"
    traceback = "Traceback (most recent call last):\nValueError: boom\n"
    is_final = True


class CronJobFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = CronJob

    name = factory.Sequence(lambda n: f"cron-{n}")
    schedule = "*/5 * * * *"
    job_name = "tests.testapp.jobs.noop"
    queue = factory.SubFactory(QueueFactory, name="default")

    class Params:
        disabled = factory.Trait(is_enabled=False)


class DisabledJobFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = DisabledJob
        django_get_or_create = ("job_name",)

    job_name = "tests.testapp.jobs.record"


class RunOutcomeFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = RunOutcome

    entry_id = factory.Sequence(lambda n: n + 1)
    job_name = "tests.testapp.jobs.record"
    queue = "default"
    status = "succeeded"
    attempt = 1
    finished_at = factory.LazyFunction(timezone.now)


class LeaderLeaseFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = LeaderLease
        django_get_or_create = ("name",)

    name = "leader"
    holder = "host:1"
    epoch = 1
    expires_at = factory.LazyFunction(lambda: timezone.now() + timedelta(seconds=15))


def attempt_errors(**filters: object) -> list[tuple[int, str, bool]]:
    """``(attempt, exception class, is final)`` of the error records matching ``filters``, in
    attempt order: what the worker recorded of each failed attempt."""
    return list(
        EntryError.objects.filter(**filters)
        .order_by("attempt")
        .values_list("attempt", "exception_class", "is_final")
    )


def most_at_once(runs: Iterable[tuple[float, float | None]]) -> int:
    """The most runs going on at one time, from each run's (start, end) as the job recorded
    them (an end of None: still running)."""
    events = []
    for started, finished in runs:
        events.append((started, 1))
        events.append((finished if finished is not None else float("inf"), -1))
    running = most = 0
    for _, change in sorted(events):  # an end sorts before a start at the same instant
        running += change
        most = max(most, running)
    return most


def most_starts_within(starts: Iterable[float], seconds: float) -> int:
    """The most starts in any window of ``seconds``."""
    ordered = sorted(starts)
    most = first = 0
    for last, started in enumerate(ordered):
        while started - ordered[first] >= seconds:
            first += 1
        most = max(most, last - first + 1)
    return most


def complete(
    entry: Entry, lock_id: int | None, now: datetime | None = None, return_value: Any = None
) -> bool:
    """Write one success the way the ack writer does (``complete_many``); return False if the
    lock was already gone (recovery released it while the job ran)."""
    lost = Entry.objects.complete_many([Success(entry, lock_id, return_value, now)])
    return lock_id is None or lock_id not in lost
