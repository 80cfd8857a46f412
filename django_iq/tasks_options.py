"""What ``IQBackend`` takes from its ``TASKS`` entry and from settings, checked in one place:
the attempts a task gets when it names none (``OPTIONS["max_attempts"]``, else one, as on the
framework's own backends) and the queues its tasks may name (the backend's ``QUEUES``, else the
queues configured in ``DJANGO_IQ`` and the framework's default queue; any queue when the backend's ``QUEUES`` is ``[]``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from django_iq.bounds import MAX_ATTEMPTS_LIMIT
from django_iq.exceptions import ImproperlyConfiguredIQ
from django_iq.options import settings_queues
from django_iq.tasks_compat import DEFAULT_TASK_QUEUE_NAME
from django_iq.wording import close_names

# Keys IQBackend reads from TASKS[alias]["OPTIONS"].
BACKEND_OPTIONS = ("max_attempts",)
# The framework runs a task once; so does IQBackend, unless OPTIONS or the task say otherwise.
DEFAULT_TASK_MAX_ATTEMPTS = 1
# Queue.name's length: the longest name a task may give when the backend allows any queue.
QUEUE_NAME_MAX_LENGTH = 100


def option_problems(alias: str, options: Any) -> list[str]:
    """What is wrong with ``TASKS[alias]["OPTIONS"]``, one sentence per problem."""
    where = f"TASKS[{alias!r}]['OPTIONS']"
    if not isinstance(options, Mapping):
        return [f"{where} must be a dict, got {type(options).__name__} {options!r:.80}."]
    problems = []
    for key in options:
        if key not in BACKEND_OPTIONS:
            close = close_names(str(key), BACKEND_OPTIONS)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            problems.append(f"{where} has an unknown key {key!r}.{hint}")
    attempts = options.get("max_attempts", DEFAULT_TASK_MAX_ATTEMPTS)
    if (
        isinstance(attempts, bool)
        or not isinstance(attempts, int)
        or not 1 <= attempts <= MAX_ATTEMPTS_LIMIT
    ):
        problems.append(
            f"{where}['max_attempts'] must be an integer from 1 to {MAX_ATTEMPTS_LIMIT:,}, "
            f"got {attempts!r:.80}."
        )
    return problems


def default_max_attempts(alias: str, options: Any) -> int:
    """The attempts a task of backend ``alias`` gets when it names none; raise
    ``ImproperlyConfiguredIQ`` for bad ``OPTIONS`` (``manage.py check`` reports them too)."""
    problems = option_problems(alias, options)
    if problems:
        raise ImproperlyConfiguredIQ(" ".join(problems))
    attempts: int = options.get("max_attempts", DEFAULT_TASK_MAX_ATTEMPTS)
    return attempts


def task_queues(backend_queues: Iterable[str]) -> set[str]:
    """The queues tasks may name: the backend's ``QUEUES`` when it lists some; else the default
    queue and ``DJANGO_IQ["QUEUES"]``, and the framework's default queue."""
    listed = set(backend_queues)
    return listed or {*settings_queues(), DEFAULT_TASK_QUEUE_NAME}


def queue_problem(
    alias: str, name: str, backend_queues: Iterable[str], *, any_queue: bool = False
) -> str | None:
    """Why tasks of backend ``alias`` cannot use queue ``name``, in the framework's words first;
    None when they can. ``any_queue`` (the backend's ``QUEUES`` is ``[]``, which turns the
    framework's check off) allows every name a queue can have."""
    if not isinstance(name, str):
        return f"queue_name must be a string, got {type(name).__name__} {name!r:.80}."
    if any_queue:
        if not 0 < len(name) <= QUEUE_NAME_MAX_LENGTH:
            return (
                f"queue_name must be 1 to {QUEUE_NAME_MAX_LENGTH} characters, "
                f"got {len(name)}: {name!r:.80}."
            )
        return None
    listed = set(backend_queues)
    allowed = task_queues(listed)
    if name in allowed:
        return None
    close = close_names(name, sorted(allowed))
    hint = f" Did you mean {close[0]!r}?" if close else ""
    where = (
        f"TASKS[{alias!r}]['QUEUES']"
        if listed
        else 'DJANGO_IQ["QUEUES"] (or TASKS[alias]["QUEUES"])'
    )
    return (
        f"Queue '{name}' is not valid for backend.{hint} Tasks of {alias!r} may use "
        f"{', '.join(sorted(allowed))}; declare the queue in {where}."
    )
