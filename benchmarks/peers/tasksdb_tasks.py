"""django-tasks-db's benchmark tasks: a no-op and a probe."""

from __future__ import annotations

from harness import record_start

try:
    from django.tasks import task
except ImportError:  # Django 5.2 with the django-tasks backport
    from django_tasks import task  # type: ignore[no-redef]


@task()
def noop() -> None:
    return None


@task()
def probe(enqueued_at: float, path: str) -> None:
    record_start(enqueued_at, path)
