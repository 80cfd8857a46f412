"""Tasks declared with Django's Tasks framework, run by django_iq through IQBackend."""

from __future__ import annotations

import asyncio

from django_iq.tasks_compat import TASKS_MODULE

if TASKS_MODULE == "django.tasks":
    from django.tasks import task
else:  # Django 5.2 with the django-tasks backport
    from django_tasks import task  # type: ignore[no-redef]

from tests.testapp.models import JobRun


@task()
def add(a: int, b: int) -> int:
    JobRun.objects.create(token=f"add:{a}:{b}")
    return a + b


@task(priority=10, queue_name="emails")
def greet(name: str) -> dict[str, str]:
    JobRun.objects.create(token=f"greet:{name}")
    return {"greeting": f"hello {name}"}


@task(takes_context=True, max_attempts=3)
def attempt_number(context, token: str) -> int:
    JobRun.objects.create(token=f"{token}:{context.attempt}")
    if context.attempt < 2:
        raise RuntimeError(f"attempt {context.attempt} fails")
    return context.attempt


@task()
def explode(message: str) -> None:
    raise ValueError(message)


@task()
async def async_double(value: int) -> int:
    await asyncio.sleep(0)
    return value * 2


@task()
def not_json() -> object:
    return object()


@task(max_attempts=1, group_key="ledger", backoff_base_seconds=0.5)
def post_to_ledger(amount: int) -> int:
    return amount


@task(takes_context=True)
def snoozes_once(context, token: str) -> str:
    runs = JobRun.objects.filter(token__startswith=f"{token}:").count()
    JobRun.objects.create(token=f"{token}:{runs}")
    if runs == 0:
        from django_iq import Snooze

        raise Snooze(0)
    return f"{token} after {runs} snooze, attempt {context.attempt}"
