"""django_iq's benchmark jobs: a no-op and a probe, as ``@job`` and as Django Tasks ``@task``."""

from __future__ import annotations

from harness import record_start

from django_iq import job
from django_iq.tasks_compat import TASKS_MODULE

if TASKS_MODULE == "django.tasks":
    from django.tasks import task
else:  # Django 5.2 with the django-tasks backport
    from django_tasks import task  # type: ignore[no-redef]


@job
def noop() -> None:
    return None


@job
def probe(enqueued_at: float, path: str) -> None:
    record_start(enqueued_at, path)


@task()
def noop_task() -> None:
    return None


@task()
def probe_task(enqueued_at: float, path: str) -> None:
    record_start(enqueued_at, path)
