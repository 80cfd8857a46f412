"""django_iq: a database-backed job queue for Django."""

from django_iq.batches import batch
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
    "enqueue",
    "enqueue_many",
    "job",
]
