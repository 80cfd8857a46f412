"""django_iq: a database-backed job queue for Django.

The names below are imported on first use, so that importing a submodule (the pytest plugin
pytest loads at start, before Django's settings exist) does not import the rest of the package.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from django_iq.batches import batch
    from django_iq.cancelling import CancelReport, cancel
    from django_iq.context import cancel_requested, current
    from django_iq.exceptions import (
        EntryNotFound,
        Fail,
        InvalidArgument,
        JobCancelled,
        JobExpired,
        JobFailed,
        JobTimeout,
        NotInJob,
        RetryAfter,
        Snooze,
        WaitRefused,
        WaitTimeout,
    )
    from django_iq.progress_reports import Progress, progress, set_progress
    from django_iq.registry import enqueue, enqueue_many, job
    from django_iq.waiting import EntryOutcome, aas_completed, as_completed, await_, wait

__version__ = "0.1.0"
__all__ = [
    "CancelReport",
    "EntryNotFound",
    "EntryOutcome",
    "Fail",
    "InvalidArgument",
    "JobCancelled",
    "JobExpired",
    "JobFailed",
    "JobTimeout",
    "NotInJob",
    "Progress",
    "RetryAfter",
    "Snooze",
    "WaitRefused",
    "WaitTimeout",
    "__version__",
    "aas_completed",
    "as_completed",
    "await_",
    "batch",
    "cancel",
    "cancel_requested",
    "current",
    "enqueue",
    "enqueue_many",
    "job",
    "progress",
    "set_progress",
    "wait",
]

_HOMES = {
    "CancelReport": "django_iq.cancelling",
    "cancel": "django_iq.cancelling",
    "cancel_requested": "django_iq.context",
    "EntryNotFound": "django_iq.exceptions",
    "EntryOutcome": "django_iq.waiting",
    "Fail": "django_iq.exceptions",
    "InvalidArgument": "django_iq.exceptions",
    "JobCancelled": "django_iq.exceptions",
    "JobExpired": "django_iq.exceptions",
    "JobFailed": "django_iq.exceptions",
    "WaitRefused": "django_iq.exceptions",
    "WaitTimeout": "django_iq.exceptions",
    "aas_completed": "django_iq.waiting",
    "as_completed": "django_iq.waiting",
    "await_": "django_iq.waiting",
    "wait": "django_iq.waiting",
    "JobTimeout": "django_iq.exceptions",
    "NotInJob": "django_iq.exceptions",
    "Progress": "django_iq.progress_reports",
    "progress": "django_iq.progress_reports",
    "set_progress": "django_iq.progress_reports",
    "RetryAfter": "django_iq.exceptions",
    "Snooze": "django_iq.exceptions",
    "batch": "django_iq.batches",
    "current": "django_iq.context",
    "enqueue": "django_iq.registry",
    "enqueue_many": "django_iq.registry",
    "job": "django_iq.registry",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'django_iq' has no attribute {name!r}")
    value = getattr(import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
