"""The Django admin for django_iq: ModelAdmins that display and call the manager API, one module
per model family, registered on import (Django's admin autodiscovery imports this package).

QueueMinute and QueueTotal are not registered: they are counters added to by every worker
heartbeat, read by the dashboard's charts and the Prometheus endpoint, which show them better
than rows of numbers; editing them by hand would only falsify the metrics.
"""

from django_iq.admin import (
    audit,
    batches,
    cron,
    dashboard,
    entries,
    errors,
    outcomes,
    processes,
    queues,
    tokens,
)
from django_iq.admin.common import EstimatedCountPaginator

__all__ = [
    "EstimatedCountPaginator",
    "audit",
    "batches",
    "cron",
    "dashboard",
    "entries",
    "errors",
    "outcomes",
    "processes",
    "queues",
    "tokens",
]
