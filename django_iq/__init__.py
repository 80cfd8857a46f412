"""django_iq: a database-backed job queue for Django.

The names below are imported on first use, so that importing a submodule (the pytest plugin
pytest loads at start, before Django's settings exist) does not import the rest of the package.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from django_iq.batches import batch
    from django_iq.context import current
    from django_iq.exceptions import Fail, JobTimeout, RetryAfter, Snooze
    from django_iq.registry import enqueue, enqueue_many, job

__version__ = "0.1.0"
__all__ = [
    "Fail",
    "JobTimeout",
    "RetryAfter",
    "Snooze",
    "__version__",
    "batch",
    "current",
    "enqueue",
    "enqueue_many",
    "job",
]

_HOMES = {
    "Fail": "django_iq.exceptions",
    "JobTimeout": "django_iq.exceptions",
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
