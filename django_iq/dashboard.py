"""The operations dashboard: queue depths, throughput, waiting times and workers, read in a
fixed number of queries and rendered as an admin page with server-side SVG charts."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.apps import apps
from django.core.exceptions import PermissionDenied
from django.db.models import Exists, OuterRef
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.utils.cache import add_never_cache_headers
from django.utils.safestring import SafeString
from django.views.decorators.http import require_safe

from django_iq import charts
from django_iq.managers.metrics import minute_of
from django_iq.models import Entry, Queue, QueueMinute, Worker
from django_iq.states import COUNTED_STATES

if TYPE_CHECKING:
    from django.contrib.admin import AdminSite

    from django_iq.managers import QueueStats

CHART_MINUTES = 60
# Workers listed, live ones first; stopped rows are kept for WORKER_RETENTION_SECONDS.
WORKER_LIMIT = 100
REFRESH_SECONDS = 5
PERMISSION = "django_iq.view_queue"


def format_age(seconds: float | None) -> str:
    """Format a duration for people: ``"42 s"``, ``"3 min 5 s"``, ``"2 h 10 min"``, ``"3 d 4 h"``;
    an empty string for None."""
    if seconds is None:
        return ""
    whole = max(0, int(seconds))
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    if whole < 86_400:
        return f"{whole // 3600} h {whole % 3600 // 60} min"
    return f"{whole // 86_400} d {whole % 86_400 // 3600} h"


@dataclass(frozen=True)
class QueueRow:
    """One queue's counts per state and how long its oldest ready entry has waited."""

    stats: QueueStats
    oldest_waiting_seconds: float | None

    @property
    def oldest_waiting(self) -> str:
        return format_age(self.oldest_waiting_seconds)


@dataclass(frozen=True)
class WorkerRow:
    """One worker or leader process as last reported by its heartbeat."""

    name: str
    role: str
    host: str
    pid: int
    is_live: bool
    heartbeat_age_seconds: float
    processing_threads: int
    busy_threads: int
    cpu_percent: float
    memory_percent: float
    is_throttled: bool
    # Set when the process exited cleanly; one that went silent or was found dead is not.
    has_stopped: bool = False

    @property
    def state(self) -> str:
        """``live``, ``stopped`` (exited cleanly) or ``dead`` (silent, or found dead)."""
        if self.is_live:
            return "live"
        return "stopped" if self.has_stopped else "dead"

    @property
    def idle_threads(self) -> int:
        return max(0, self.processing_threads - self.busy_threads) if self.is_live else 0

    @property
    def load(self) -> float | None:
        """Busy processing threads over processing threads; None for a process without any."""
        if not self.processing_threads:
            return None
        return min(1.0, self.busy_threads / self.processing_threads)

    @property
    def heartbeat_age(self) -> str:
        return format_age(self.heartbeat_age_seconds)

    @property
    def load_chart(self) -> SafeString:
        if not self.is_live:
            return charts.load_bar(None, label=self.state)
        label = "no processing threads" if self.load is None else f"{self.load:.0%} busy"
        return charts.load_bar(self.load, label=label)


@dataclass(frozen=True)
class DashboardData:
    """Everything the dashboard shows, read at ``now``."""

    now: datetime
    queues: list[QueueRow]
    done_per_minute: list[charts.Point]
    failed_per_minute: list[charts.Point]
    workers: list[WorkerRow]
    # True when more workers exist than the WORKER_LIMIT rows listed.
    workers_truncated: bool

    @property
    def invariant_holds(self) -> bool:
        return all(row.stats.invariant_holds for row in self.queues)

    @property
    def totals(self) -> dict[str, int]:
        """Counts per state summed over all queues."""
        fields = COUNTED_STATES
        return {name: sum(getattr(row.stats, name) for row in self.queues) for name in fields}

    @property
    def live_workers(self) -> list[WorkerRow]:
        return [row for row in self.workers if row.is_live]

    @property
    def busy_threads(self) -> int:
        return sum(row.busy_threads for row in self.live_workers)

    @property
    def processing_threads(self) -> int:
        return sum(row.processing_threads for row in self.live_workers)

    @property
    def throttled_workers(self) -> int:
        return sum(1 for row in self.live_workers if row.is_throttled)

    @property
    def load(self) -> float | None:
        """Busy over available processing threads of the live workers."""
        if not self.processing_threads:
            return None
        return min(1.0, self.busy_threads / self.processing_threads)

    @property
    def done_last_hour(self) -> int:
        return int(sum(value for _, value in self.done_per_minute))

    @property
    def failed_last_hour(self) -> int:
        return int(sum(value for _, value in self.failed_per_minute))


def dashboard_data(now: datetime) -> DashboardData:
    """Read the dashboard's numbers at ``now`` in a fixed number of queries, whatever the
    number of queues, entries or finished jobs: three for the queue statistics, one for the
    oldest waiting entries, one for the per-minute counts and one for the workers."""
    stats = Queue.objects.stats()
    oldest = Entry.objects.oldest_waiting()
    queues = [
        QueueRow(
            stats=row,
            oldest_waiting_seconds=(
                max(0.0, (now - oldest[row.queue]).total_seconds()) if row.queue in oldest else None
            ),
        )
        for row in stats
    ]

    start = minute_of(now) - timedelta(minutes=CHART_MINUTES - 1)
    counts = QueueMinute.objects.per_minute(start)
    minutes = [start + timedelta(minutes=offset) for offset in range(CHART_MINUTES)]
    empty = {"done": 0, "failed": 0}
    done: list[charts.Point] = [(m, counts.get(m, empty)["done"]) for m in minutes]
    failed: list[charts.Point] = [(m, counts.get(m, empty)["failed"]) for m in minutes]

    # Liveness comes from Worker.objects.live() (database time), as a subquery so that one
    # statement returns every listed row with its state.
    rows = list(
        Worker.objects.annotate(is_live=Exists(Worker.objects.live().filter(pk=OuterRef("pk"))))
        .order_by("-is_live", "-heartbeat_at", "name")
        .values(
            "name",
            "role",
            "host",
            "pid",
            "is_live",
            "heartbeat_at",
            "processing_threads",
            "busy_threads",
            "cpu_percent",
            "memory_percent",
            "is_throttled",
            "stopped_at",
            "died",
        )[: WORKER_LIMIT + 1]
    )
    workers = [
        WorkerRow(
            name=row["name"],
            role=row["role"],
            host=row["host"],
            pid=row["pid"],
            is_live=bool(row["is_live"]),
            heartbeat_age_seconds=max(0.0, (now - row["heartbeat_at"]).total_seconds()),
            processing_threads=row["processing_threads"],
            busy_threads=row["busy_threads"],
            cpu_percent=row["cpu_percent"],
            memory_percent=row["memory_percent"],
            is_throttled=row["is_throttled"],
            has_stopped=row["stopped_at"] is not None and not row["died"],
        )
        for row in rows[:WORKER_LIMIT]
    ]
    return DashboardData(
        now=now,
        queues=queues,
        done_per_minute=done,
        failed_per_minute=failed,
        workers=workers,
        workers_truncated=len(rows) > WORKER_LIMIT,
    )


def _admin_context(request: HttpRequest, admin_site: AdminSite | None) -> dict[str, Any]:
    """The admin's common template context (site header, sidebar, user links), when the
    admin is installed."""
    if admin_site is None:
        if not apps.is_installed("django.contrib.admin"):
            return {}
        from django.contrib import admin

        admin_site = admin.site
    return dict(admin_site.each_context(request))


@require_safe
def dashboard_view(request: HttpRequest, admin_site: AdminSite | None = None) -> HttpResponse:
    """Render the dashboard, or with ``?partial=1`` only its content (the page re-fetches it
    every REFRESH_SECONDS seconds).

    Needs an active staff user with the ``django_iq.view_queue`` permission; raises
    ``PermissionDenied`` (403) otherwise. ``admin_site`` gives the page that site's header and
    sidebar (default: ``django.contrib.admin.site``).
    """
    user = request.user
    if not (user.is_active and user.is_staff and user.has_perm(PERMISSION)):
        raise PermissionDenied(f"The queue dashboard needs staff status and {PERMISSION}.")
    data = dashboard_data(timezone.now())
    context: dict[str, Any] = {
        "data": data,
        "done_chart": charts.bar_chart(data.done_per_minute, title="Jobs done per minute"),
        "failed_chart": charts.line_chart(data.failed_per_minute, title="Failures per minute"),
        "load_chart": charts.load_bar(
            data.load,
            label="no live processing threads"
            if data.load is None
            else f"{data.load:.0%} of processing threads busy",
            width=160,
            height=12,
        ),
        "refresh_seconds": REFRESH_SECONDS,
        "partial_url": f"{request.path}?partial=1",
    }
    if request.GET.get("partial"):
        template = "django_iq/dashboard/content.html"
    else:
        template = "django_iq/dashboard.html"
        context = _admin_context(request, admin_site) | {"title": "Queue dashboard"} | context
    response = render(request, template, context)
    add_never_cache_headers(response)
    return response
