"""The Django Tasks framework's names, from ``django.tasks`` (Django >= 6.0) or the
``django_tasks`` backport (Django 5.2), so the backend has one code base for both."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # type-check against django-stubs' django.tasks
    from django.tasks import (
        DEFAULT_TASK_QUEUE_NAME,
        TaskContext,
        TaskResult,
        TaskResultStatus,
        task_backends,
    )
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import Task, TaskError
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils.json import normalize_json

    TASKS_MODULE = "django.tasks"
else:
    try:
        from django.tasks import (
            DEFAULT_TASK_QUEUE_NAME,
            TaskContext,
            TaskResult,
            TaskResultStatus,
            task_backends,
        )
        from django.tasks.backends.base import BaseTaskBackend
        from django.tasks.base import Task, TaskError
        from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
        from django.tasks.signals import task_enqueued, task_finished, task_started
        from django.utils.json import normalize_json

        TASKS_MODULE = "django.tasks"
    except ImportError:  # Django < 6.0: the backport
        try:
            from django_tasks import (
                DEFAULT_TASK_QUEUE_NAME,
                TaskContext,
                TaskResult,
                TaskResultStatus,
                task_backends,
            )
            from django_tasks.backends.base import BaseTaskBackend
            from django_tasks.base import Task, TaskError
            from django_tasks.exceptions import (
                InvalidTaskError as InvalidTask,
            )
            from django_tasks.exceptions import TaskResultDoesNotExist
            from django_tasks.signals import (
                task_enqueued,
                task_finished,
                task_started,
            )
            from django_tasks.utils import normalize_json
        except ImportError as exc:
            from django.core.exceptions import ImproperlyConfigured

            raise ImproperlyConfigured(
                "django_iq.backends.IQBackend needs Django's Tasks framework: Django >= 6.0, or "
                "`pip install django-tasks` on Django 5.2."
            ) from exc
        TASKS_MODULE = "django_tasks"

__all__ = [
    "DEFAULT_TASK_QUEUE_NAME",
    "TASKS_MODULE",
    "BaseTaskBackend",
    "InvalidTask",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "normalize_json",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
]
