"""Read-only admins for what the processes write: workers and their load, group locks, the
leadership lease, and the jobs' caps and rate limits."""

from __future__ import annotations

import threading
from typing import Any

from django.contrib import admin
from django.db.models import DurationField, Exists, ExpressionWrapper, F, OuterRef, Q, QuerySet
from django.db.models.functions import Now
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.safestring import SafeString

from django_iq.admin.common import ReadOnlyAdmin, cut, cut_column, time_column
from django_iq.conf import iq_settings
from django_iq.dashboard.rows import LimitedJobRow, limited_job_row
from django_iq.managers.job_limits import JobUsage
from django_iq.models import GroupLock, JobLimit, LeaderLease, Worker
from django_iq.states import (
    WORKER_DEAD,
    WORKER_LIVE,
    WORKER_STATES,
    WORKER_STOPPED,
    worker_state_label,
)


class WorkerStatusFilter(admin.SimpleListFilter):
    """Live, stopped or dead (``states.worker_state``), as ``Worker.objects.live()`` and
    ``silent()`` decide in database time."""

    title = "status"
    parameter_name = "status"

    def lookups(
        self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]
    ) -> list[tuple[str, str]]:
        return [(state, state) for state in WORKER_STATES]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value == WORKER_LIVE:
            return queryset.filter(pk__in=Worker.objects.live().values("pk"))
        if value == WORKER_STOPPED:
            return queryset.filter(stopped_at__isnull=False, died=False)
        if value == WORKER_DEAD:
            silent = Q(pk__in=Worker.objects.silent(_silent_after()).values("pk"))
            return queryset.filter(silent | Q(stopped_at__isnull=False, died=True))
        return queryset


def _silent_after() -> float:
    seconds: float = iq_settings.WORKER_SILENT_AFTER_SECONDS
    return seconds


@admin.register(Worker)
class WorkerAdmin(ReadOnlyAdmin):
    # The host and the pid are in the name (host:pid) and on each worker's page; the role is a
    # filter (a leader's threads show "-").
    list_display = (
        "worker_name",
        "status_cell",
        "heartbeat_age",
        "threads_cell",
        "cpu",
        "memory",
        "throttled",
        "started",
    )
    list_filter = (WorkerStatusFilter, "role", "is_throttled")
    search_fields = ("name", "host")
    ordering = ("-heartbeat_at",)
    readonly_fields = ("status", "heartbeat_age", "threads")

    worker_name = cut_column("name", "name", "narrow")
    started = time_column("started_at", "started")

    @admin.display(description="throttled", ordering="-is_throttled")
    def throttled(self, worker: Worker) -> str:
        """The word throttled while the governor holds the worker back, the admin's neutral
        "-" otherwise: the usual state should not look like an error, as a red cross would."""
        return "throttled" if worker.is_throttled else ""

    @admin.display(description="threads")
    def threads_cell(self, worker: Worker) -> SafeString | str:
        """The threads, busy and idle on one line and the total on the next."""
        text = self.threads(worker)
        head, _, total = text.partition(" of ")
        if not total:
            return text
        return format_html('<span class="iq-time">{}<br>of {}</span>', head, total)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Worker]:
        # Liveness and heartbeat age in database time (heartbeats are stamped with it), read
        # in the list's own query: nothing is asked per row.
        live = Worker.objects.live().filter(pk=OuterRef("pk"))
        age = ExpressionWrapper(Now() - F("heartbeat_at"), output_field=DurationField())
        workers: QuerySet[Worker] = super().get_queryset(request)
        return workers.annotate(is_live=Exists(live), heartbeat_age_db=age)

    @admin.display(description="status")
    def status(self, worker: Worker) -> str:
        return worker_state_label(
            is_live=bool(getattr(worker, "is_live", False)),
            stopped=worker.stopped_at is not None,
            died=worker.died,
        )

    @admin.display(description="status")
    def status_cell(self, worker: Worker) -> SafeString:
        """The status, its explanation in brackets on a line of its own."""
        state, _, why = self.status(worker).partition(" (")
        if not why:
            return format_html('<span class="iq-time">{}</span>', state)
        return format_html('<span class="iq-time">{}<br>({}</span>', state, why)

    @admin.display(description="heartbeat age", ordering="-heartbeat_at")
    def heartbeat_age(self, worker: Worker) -> str | None:
        age = getattr(worker, "heartbeat_age_db", None)
        return f"{max(0, int(age.total_seconds()))} s" if age is not None else None

    @admin.display(description="threads")
    def threads(self, worker: Worker) -> str:
        if worker.role == Worker.Role.LEADER:
            return "-"
        busy = worker.busy_threads
        idle = max(0, worker.processing_threads - busy) if self.status(worker) == WORKER_LIVE else 0
        return f"{busy} busy / {idle} idle of {worker.processing_threads}"

    @admin.display(description="CPU", ordering="cpu_percent")
    def cpu(self, worker: Worker) -> str:
        return f"{worker.cpu_percent:.0f}%"

    @admin.display(description="memory", ordering="memory_percent")
    def memory(self, worker: Worker) -> str:
        return f"{worker.memory_percent:.0f}%"


@admin.register(GroupLock)
class GroupLockAdmin(ReadOnlyAdmin):
    list_display = ("lock_key", "queue_name", "worker_name", "locked", "entry_id")
    list_select_related = ("worker",)
    list_filter = ("queue",)
    search_fields = ("=key",)
    ordering = ("locked_at",)

    lock_key = cut_column("key", "key")
    locked = time_column("locked_at", "locked at")

    @admin.display(description="worker", ordering="worker__name")
    def worker_name(self, lock: GroupLock) -> Any:
        return cut(lock.worker.name if lock.worker else "", "narrow")

    @admin.display(description="queue", ordering="queue_id")
    def queue_name(self, lock: GroupLock) -> str:
        return str(lock.queue_id)


@admin.register(LeaderLease)
class LeaderLeaseAdmin(ReadOnlyAdmin):
    list_display = ("name", "lease_holder", "epoch", "acquired", "expires", "is_held")
    lease_holder = cut_column("holder", "holder")
    acquired = time_column("acquired_at", "acquired")
    expires = time_column("expires_at", "expires")

    def get_queryset(self, request: HttpRequest) -> QuerySet[LeaderLease]:
        # Held means unexpired in database time, the clock the lease is renewed against.
        current = LeaderLease.objects.filter(pk=OuterRef("pk"), expires_at__gte=Now())
        leases: QuerySet[LeaderLease] = super().get_queryset(request)
        return leases.annotate(held=Exists(current.exclude(holder="")))

    @admin.display(description="held", boolean=True)
    def is_held(self, lease: LeaderLease) -> bool:
        return bool(getattr(lease, "held", False))


@admin.register(JobLimit)
class JobLimitAdmin(ReadOnlyAdmin):
    """Jobs with caps or rate limits, as their workers declare them in ``@job``, with what
    they use now: running claims against the caps, recent starts against the rate limit."""

    list_display = ("job", "running", "busiest_node", "starts", "updated")
    search_fields = ("job_name",)
    ordering = ("job_name",)

    job = cut_column("job_name", "job", "wide")
    updated = time_column("updated_at", "updated")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._page = threading.local()  # the usage read for the page this thread renders

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> Any:
        # One reading for the whole page (four queries), not one per row and column.
        self._page.usage = {usage.job_name: usage for usage in JobLimit.objects.usage()}
        return super().changelist_view(request, extra_context)

    def _usage_of(self, row: JobLimit) -> JobUsage:
        usage: JobUsage | None = getattr(self._page, "usage", {}).get(row.job_name)
        return usage or JobUsage(row.job_name, JobLimit.objects.limits_of(row), 0, 0, 0)

    def _cells_of(self, row: JobLimit) -> LimitedJobRow:
        """The job's cells as the dashboard shows them (a cap or rate limit per key says so)."""
        return limited_job_row(self._usage_of(row))

    @admin.display(description="running / cap")
    def running(self, row: JobLimit) -> str:
        return self._cells_of(row).running

    @admin.display(description="busiest node / cap per node")
    def busiest_node(self, row: JobLimit) -> str:
        return self._cells_of(row).per_node

    @admin.display(description="starts / rate limit")
    def starts(self, row: JobLimit) -> str:
        return self._cells_of(row).rate
