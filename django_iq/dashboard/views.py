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
from django.views.decorators.http import require_safe

from django_iq import permissions
from django_iq.alarms import NO_LIVE_WORKER, Alarm
from django_iq.dashboard import charts
from django_iq.dashboard.links import Links
from django_iq.dashboard.panels import (
    LeaderPanel,
    RunningEntry,
    depth_series,
    format_age,
    latency_series,
    leader_panel,
    running_entries,
    tables_panel,
)
from django_iq.dashboard.rows import (
    Cell,
    LimitedJobRow,
    QueueRow,
    WorkerRow,
    display_counts,
    job_links,
    job_rows,
    limited_job_row,
)
from django_iq.managers.job_limits import JobUsage
from django_iq.managers.jobstats import JobStats, window_start
from django_iq.managers.queue_metrics import minute_of
from django_iq.managers.series import DepthPoint, LatencyPoint
from django_iq.models import JobLimit, JobMinute, QueueMinute
from django_iq.snapshot import Snapshot, read_snapshot
from django_iq.states import COUNTED_STATES, RUNNING, STATE_LABELS, WORKER_STOPPED

if TYPE_CHECKING:
    from django.contrib.admin import AdminSite


CHART_MINUTES = 60
# Workers listed, live ones first; stopped rows are kept for WORKER_RETENTION_SECONDS.
WORKER_LIMIT = 100
REFRESH_SECONDS = 5


@dataclass(frozen=True)
class DashboardData:
    """Everything the dashboard shows: the operator snapshot and the last hour's throughput."""

    snapshot: Snapshot
    done_per_minute: list[charts.Point]
    failed_per_minute: list[charts.Point]
    job_limits: list[JobUsage] = field(default_factory=list)
    # Each job with runs that ended in the last hour.
    job_stats: list[JobStats] = field(default_factory=list)
    leader: LeaderPanel | None = None
    running: list[RunningEntry] = field(default_factory=list)
    latency: list[LatencyPoint] = field(default_factory=list)
    depth: list[DepthPoint] = field(default_factory=list)
    links: Links = field(default_factory=lambda: Links(None))

    @property
    def since(self) -> datetime:
        """The first minute of the charts and the hourly counts."""
        return window_start(self.now)

    @property
    def now(self) -> datetime:
        return self.snapshot.now

    @property
    def queues(self) -> list[QueueRow]:
        return [QueueRow(view, self.links) for view in self.snapshot.queues]

    @property
    def workers(self) -> list[WorkerRow]:
        """Live and dead processes (declared dead ones too); stopped ones are counted apart
        (``stopped_workers``)."""
        return [WorkerRow(view) for view in self.snapshot.workers if view.state != WORKER_STOPPED]

    @property
    def workers_truncated(self) -> bool:
        return self.snapshot.workers_truncated

    @property
    def stopped_workers(self) -> int:
        """Processes that exited cleanly (each ``runworker --reload`` restart leaves one), kept
        until pruned: counted apart from the table of live and dead ones."""
        return sum(
            count
            for (_, state), count in self.snapshot.worker_counts.items()
            if state == WORKER_STOPPED
        )

    @property
    def state_columns(self) -> list[tuple[str, str]]:
        """(state, label) of each count column."""
        return [(state, STATE_LABELS.get(state, state)) for state in COUNTED_STATES]

    @property
    def leader_live(self) -> bool:
        return self.snapshot.leader_live

    @property
    def has_live_worker(self) -> bool:
        return any(row.view.role == "worker" for row in self.live_workers)

    @property
    def alarms(self) -> list[Alarm]:
        return self.snapshot.alarms

    @property
    def problems(self) -> list[Alarm]:
        """What the headline reports: no live worker to run anything, the leader missing and
        the other alarms, then the queues whose counts contradict each other."""
        missing = [] if self.has_live_worker else [Alarm(NO_LIVE_WORKER)]
        return missing + self.snapshot.problems

    @property
    def totals(self) -> dict[str, int]:
        totals = dict.fromkeys(COUNTED_STATES, 0)
        for view in self.snapshot.queues:
            for state, count in display_counts(view.stats).items():
                totals[state] += count
        return totals

    @property
    def total_cells(self) -> list[Cell]:
        return [
            (state, count, self.links.entries(None, state)) for state, count in self.totals.items()
        ]

    @property
    def running_total(self) -> int:
        return self.totals[RUNNING]

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
    def job_links(self) -> dict[str, tuple[str | None, str | None]]:
        """Job name -> links to its runs and its failed runs of the last hour."""
        return job_links(self.links, self.since, self.job_stats)

    @property
    def limited_jobs(self) -> list[LimitedJobRow]:
        """Each job with a cap or a rate limit: running / cap, busiest node / per-node cap,
        starts / rate limit ("-" where it has none); a job limited per key also lists its
        busiest keys, each against the limits per key."""
        return [limited_job_row(usage) for usage in self.job_limits]

    @property
    def throttled_workers(self) -> int:
        """Live workers the governor holds back; a stopped one throttles nothing."""
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


def dashboard_data(now: datetime, site_name: str | None = None) -> DashboardData:
    """Read the dashboard's numbers at ``now`` in a fixed number of queries, whatever the
    number of queues, entries or finished jobs: the operator snapshot's fourteen (jobs no live
    worker serves included), one for the per-minute counts, one for the last hour per job, one
    to four for the jobs' limits, one for the leader's row, two for the running entries and
    one each for the latency and depth series. Links lead into the admin site ``site_name``
    (None: no links)."""
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
        leader=leader_panel(now, snapshot.leader),
        running=running_entries(now),
        latency=latency_series(start, now),
        depth=depth_series(start, now),
        links=Links(site_name),
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


def _site_name(admin_site: AdminSite | None) -> str | None:
    """The admin site whose changelists the numbers link to: ``admin_site``, else Django's
    default site when the admin is installed."""
    if admin_site is not None:
        return admin_site.name
    return "admin" if apps.is_installed("django.contrib.admin") else None


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
        "job_links": job_links(Links(_site_name(admin_site)), window_start(now), job_stats),
    }
    response = render(request, "django_iq/job_stats.html", context)
    add_never_cache_headers(response)
    return response


@require_safe
def dashboard_view(request: HttpRequest, admin_site: AdminSite | None = None) -> HttpResponse:
    """Render the dashboard, or with ``?partial=1`` only its content (the page re-fetches it
    every REFRESH_SECONDS seconds). The tables panel (sizes, oldest records, pruning) is read
    with the page only, never with the refreshes: its figures change slowly, and on SQLite a
    size is read page by page.

    Needs an active staff user with ``permissions.DASHBOARD`` (``view_queue`` and
    ``view_worker``: it lists the worker processes); raises
    ``PermissionDenied`` (403) otherwise. ``admin_site`` gives the page that site's header and
    sidebar (default: ``django.contrib.admin.site``).
    """
    _check_permission(request, "The queue dashboard", permissions.DASHBOARD)
    data = dashboard_data(timezone.now(), _site_name(admin_site))
    context: dict[str, Any] = {
        "data": data,
        "done_chart": charts.bar_chart(data.done_per_minute, title="Jobs done per minute"),
        "failed_chart": charts.line_chart(data.failed_per_minute, title="Failures per minute"),
        "depth_chart": charts.lines_chart(
            [
                ("ready", [(p.minute, p.ready) for p in data.depth]),
                ("running", [(p.minute, p.running) for p in data.depth]),
            ],
            title="Queue depth, sampled each minute",
        ),
        "latency_chart": charts.lines_chart(
            [
                ("p50", [(p.minute, p.p50_seconds) for p in data.latency]),
                ("p95", [(p.minute, p.p95_seconds) for p in data.latency]),
            ],
            title="Enqueue to start, seconds",
            unit=" s",
        ),
        "load_chart": charts.load_bar(
            data.load,
            label="no live processing threads"
            if data.load is None
            else f"{data.load:.0%} of processing threads busy",
            width=160,
            height=12,
        ),
        "done_link": data.links.outcomes(data.since, failed=False),
        "failed_link": data.links.outcomes(data.since, failed=True),
        "throttled_link": data.links.workers(throttled=True),
        "stopped_link": data.links.workers(status=WORKER_STOPPED),
        "refresh_seconds": REFRESH_SECONDS,
        "partial_url": f"{request.path}?partial=1",
    }
    if request.GET.get("partial"):
        template = "django_iq/dashboard/content.html"
    else:
        template = "django_iq/dashboard.html"
        context = (
            _admin_context(request, admin_site)
            | {"title": "Queue dashboard", "tables_panel": tables_panel(data.now)}
            | context
        )
    response = render(request, template, context)
    add_never_cache_headers(response)
    return response
