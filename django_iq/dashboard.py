"""The operations dashboard: queue depths, throughput, waiting times and workers, read in a
fixed number of queries and rendered as an admin page with server-side SVG charts."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.apps import apps
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.utils.cache import add_never_cache_headers
from django.utils.safestring import SafeString
from django.views.decorators.http import require_safe

from django_iq import charts, permissions
from django_iq.alarms import Alarm
from django_iq.managers.jobstats import JobStats, window_start
from django_iq.managers.limits import JobUsage
from django_iq.managers.metrics import minute_of
from django_iq.models import JobLimit, JobMinute, QueueMinute
from django_iq.snapshot import QueueView, Snapshot, WorkerView, read_snapshot
from django_iq.states import COUNTED_STATES, STATE_LABELS
from django_iq.wording import rate_use, used_of

if TYPE_CHECKING:
    from django.contrib.admin import AdminSite

    from django_iq.managers import QueueStats

CHART_MINUTES = 60
# Workers listed, live ones first; stopped rows are kept for WORKER_RETENTION_SECONDS.
WORKER_LIMIT = 100
REFRESH_SECONDS = 5


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


def format_duration(seconds: float | None) -> str:
    """Format a job's run time: ``"20 ms"``, ``"1.5 s"``, then as ``format_age``; an empty
    string for None."""
    if seconds is None:
        return ""
    if seconds < 1:
        return f"{seconds * 1000:.3g} ms"
    if seconds < 60:
        return f"{seconds:.3g} s"
    return format_age(seconds)


def job_rows(job_stats: list[JobStats]) -> list[tuple[JobStats, str, str]]:
    """``(stats, median, 95th percentile)`` of each job, the durations formatted for people."""
    return [
        (stats, format_duration(stats.p50_seconds), format_duration(stats.p95_seconds))
        for stats in job_stats
    ]


@dataclass(frozen=True)
class QueueRow:
    """One queue of the snapshot, as the dashboard shows it."""

    view: QueueView

    @property
    def stats(self) -> QueueStats:
        return self.view.stats

    @property
    def oldest_waiting_seconds(self) -> float | None:
        return self.view.oldest_waiting_seconds

    @property
    def oldest_waiting(self) -> str:
        return format_age(self.view.oldest_waiting_seconds)

    @property
    def cells(self) -> list[tuple[str, int]]:
        """(state, count) in ``COUNTED_STATES`` order, for the state columns."""
        return list(self.view.counts.items())

    @property
    def broken_counts(self) -> list[tuple[str, int]]:
        """(name, count) of the corruption counts that are not zero."""
        return list(self.view.stats.broken_counts.items())

    def merged(self) -> int:
        return self.view.merged


@dataclass(frozen=True)
class WorkerRow:
    """One worker or leader process of the snapshot, as the dashboard shows it: the
    ``WorkerView``'s fields, plus its load chart."""

    view: WorkerView

    def __getattr__(self, name: str) -> Any:
        return getattr(self.view, name)

    @property
    def load(self) -> float | None:
        """Busy processing threads over processing threads; None for a process without any."""
        if not self.view.processing_threads:
            return None
        return min(1.0, self.view.busy_threads / self.view.processing_threads)

    @property
    def heartbeat_age(self) -> str:
        return format_age(self.view.heartbeat_age_seconds)

    @property
    def load_chart(self) -> SafeString:
        if not self.view.is_live:
            return charts.load_bar(None, label=self.view.state)
        label = "no processing threads" if self.load is None else f"{self.load:.0%} busy"
        return charts.load_bar(self.load, label=label)


@dataclass(frozen=True)
class DashboardData:
    """Everything the dashboard shows: the operator snapshot and the last hour's throughput."""

    snapshot: Snapshot
    done_per_minute: list[charts.Point]
    failed_per_minute: list[charts.Point]
    job_limits: list[JobUsage] = field(default_factory=list)
    # Each job with runs that ended in the last hour.
    job_stats: list[JobStats] = field(default_factory=list)

    @property
    def now(self) -> datetime:
        return self.snapshot.now

    @property
    def queues(self) -> list[QueueRow]:
        return [QueueRow(view) for view in self.snapshot.queues]

    @property
    def workers(self) -> list[WorkerRow]:
        return [WorkerRow(view) for view in self.snapshot.workers]

    @property
    def workers_truncated(self) -> bool:
        return self.snapshot.workers_truncated

    @property
    def state_columns(self) -> list[tuple[str, str]]:
        """(state, label) of each count column."""
        return [(state, STATE_LABELS.get(state, state)) for state in COUNTED_STATES]

    @property
    def invariant_holds(self) -> bool:
        return self.snapshot.invariant_holds

    @property
    def leader_live(self) -> bool:
        return self.snapshot.leader_live

    @property
    def alarms(self) -> list[Alarm]:
        return self.snapshot.alarms

    @property
    def problems(self) -> list[Alarm]:
        """The alarms, then the queues whose counts contradict each other."""
        return self.snapshot.problems

    @property
    def totals(self) -> dict[str, int]:
        return self.snapshot.totals

    @property
    def total_cells(self) -> list[tuple[str, int]]:
        return list(self.snapshot.totals.items())

    @property
    def merged(self) -> int:
        return self.snapshot.merged

    @property
    def live_workers(self) -> list[WorkerRow]:
        return [row for row in self.workers if row.view.is_live]

    @property
    def busy_threads(self) -> int:
        return sum(row.view.busy_threads for row in self.live_workers)

    @property
    def processing_threads(self) -> int:
        return sum(row.view.processing_threads for row in self.live_workers)

    @property
    def unserved_jobs(self) -> list[tuple[str, int, str]]:
        """``(job name, entries waiting, oldest wait)`` of jobs no live worker registered."""
        return [
            (job.job_name, job.waiting, format_age(job.oldest_waiting_seconds))
            for job in self.snapshot.unserved_jobs or []
        ]

    @property
    def job_rows(self) -> list[tuple[JobStats, str, str]]:
        """``(stats, median, 95th percentile)`` of each job that ran in the last hour."""
        return job_rows(self.job_stats)

    @property
    def limited_jobs(self) -> list[tuple[str, str, str, str]]:
        """``(job, running / cap, busiest node / per-node cap, starts / rate limit)`` of each
        job with a cap or a rate limit ("-" where it has none)."""
        return [
            (
                usage.job_name,
                used_of(usage.running, usage.limits.max_concurrency),
                used_of(usage.running_on_busiest_node, usage.limits.max_concurrency_per_node),
                rate_use(
                    usage.recent_starts,
                    usage.limits.rate_count,
                    usage.limits.rate_period_seconds,
                ),
            )
            for usage in self.job_limits
        ]

    @property
    def throttled_workers(self) -> int:
        return sum(1 for row in self.live_workers if row.view.is_throttled)

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
    number of queues, entries or finished jobs: the operator snapshot's fourteen (jobs no live
    worker serves included), one for the per-minute counts, one for the last hour per job, and
    one to four for the jobs' limits."""
    snapshot = read_snapshot(now, worker_limit=WORKER_LIMIT, unserved_jobs=True)
    start = minute_of(now) - timedelta(minutes=CHART_MINUTES - 1)
    counts = QueueMinute.objects.per_minute(start)
    minutes = [start + timedelta(minutes=offset) for offset in range(CHART_MINUTES)]
    empty = {"done": 0, "failed": 0}
    done: list[charts.Point] = [(m, counts.get(m, empty)["done"]) for m in minutes]
    failed: list[charts.Point] = [(m, counts.get(m, empty)["failed"]) for m in minutes]
    return DashboardData(
        snapshot=snapshot,
        done_per_minute=done,
        failed_per_minute=failed,
        job_limits=JobLimit.objects.usage(),
        job_stats=JobMinute.objects.last_hour(now),
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


def _check_permission(request: HttpRequest, page: str, needed: tuple[str, ...]) -> None:
    if not permissions.allows(request.user, needed):
        raise PermissionDenied(f"{page} needs staff status and {permissions.named(needed)}.")


@require_safe
def job_stats_view(request: HttpRequest, admin_site: AdminSite | None = None) -> HttpResponse:
    """Render each job's runs, failures and duration quantiles over the last hour as an admin
    page, in one query. Needs an active staff user with ``permissions.JOB_STATS``
    (``PermissionDenied`` otherwise), as the API's job statistics do."""
    _check_permission(request, "The job statistics", permissions.JOB_STATS)
    now = timezone.now()
    job_stats = JobMinute.objects.last_hour(now)
    context = _admin_context(request, admin_site) | {
        "title": "Job statistics, last hour",
        "now": now,
        "window_start": window_start(now),
        "job_stats": job_stats,
        "job_rows": job_rows(job_stats),
    }
    response = render(request, "django_iq/job_stats.html", context)
    add_never_cache_headers(response)
    return response


@require_safe
def dashboard_view(request: HttpRequest, admin_site: AdminSite | None = None) -> HttpResponse:
    """Render the dashboard, or with ``?partial=1`` only its content (the page re-fetches it
    every REFRESH_SECONDS seconds).

    Needs an active staff user with ``permissions.DASHBOARD`` (``view_queue`` and
    ``view_worker``: it lists the worker processes); raises
    ``PermissionDenied`` (403) otherwise. ``admin_site`` gives the page that site's header and
    sidebar (default: ``django.contrib.admin.site``).
    """
    _check_permission(request, "The queue dashboard", permissions.DASHBOARD)
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
