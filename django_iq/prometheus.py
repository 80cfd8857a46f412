"""Prometheus metrics: a collector that reads queue depths, lifetime job counts and durations,
waiting times and workers from the database on each scrape, and the view serving them."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.utils.cache import add_never_cache_headers
from django.views.decorators.http import require_safe

from django_iq import permissions, token_auth
from django_iq.alarms import NO_LEADER, QUEUE_REASONS, UNSERVED_JOB
from django_iq.autoscale import Demand, read_demand
from django_iq.conf import iq_settings
from django_iq.managers.jobstats import QUANTILES, JobStats
from django_iq.managers.queue_metrics import BUCKET_FIELDS, DURATION_BUCKETS_SECONDS
from django_iq.models import JobMinute, QueueTotal, Worker
from django_iq.snapshot import Snapshot, read_snapshot
from django_iq.states import WORKER_STATES

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
MISSING_CLIENT_MESSAGE = (
    "The django_iq metrics endpoint needs the prometheus-client package, which is not "
    "installed. Install it with: pip install django-iq[prometheus]\n"
)
# The gauges per job over the last hour: name, help text, labels.
JOB_FAMILIES = (
    (
        "django_iq_job_runs_last_hour",
        "Runs of a job that ended in the last hour, successful or not.",
        ["job"],
    ),
    (
        "django_iq_job_failures_last_hour",
        "Runs of a job that ended without success in the last hour, timeouts included.",
        ["job"],
    ),
    (
        "django_iq_job_duration_last_hour_seconds",
        "Median (quantile 0.5) and 95th percentile (0.95) of the durations of a job's runs that "
        "ended in the last hour, failures included, within 11.1 % of the true durations.",
        ["job", "quantile"],
    ),
)


@dataclass(frozen=True)
class Scrape:
    """The numbers of one scrape: the operator snapshot and the lifetime totals per queue."""

    snapshot: Snapshot = field(default_factory=lambda: Snapshot(now=timezone.now()))
    totals: dict[str, QueueTotal] = field(default_factory=dict)
    # Each job with runs that ended in the last hour.
    jobs: list[JobStats] = field(default_factory=list)
    # The threads the pending work needs (None in ``describe()``).
    demand: Demand | None = None


def read_scrape(now: datetime) -> Scrape:
    """Read every metric at ``now`` in a fixed number of queries (the snapshot's fourteen, jobs
    no live worker serves included, one for the totals, one for the last hour per job and two
    for the autoscaling signal), whatever the number of queues, entries, jobs or workers."""
    jobs = JobMinute.objects.last_hour(now)
    return Scrape(
        snapshot=read_snapshot(now, unserved_jobs=True),
        totals=QueueTotal.objects.by_queue(),
        jobs=jobs,
        demand=read_demand(now, jobs),
    )


class IQCollector:
    """A prometheus-client collector of django_iq's metrics, read from the database on each
    ``collect()``.

    ``metrics_view`` serves it from a registry of its own. To add the metrics to an exporter
    you already run, register it: ``REGISTRY.register(IQCollector())``. ``describe()`` reads
    nothing, so registering costs no query.
    """

    def describe(self) -> Iterator[Metric]:
        """Yield the metric families without samples."""
        return _families(Scrape())

    def collect(self) -> Iterator[Metric]:
        """Yield the metric families with their current values."""
        return _families(read_scrape(timezone.now()))


def _families(scrape: Scrape) -> Iterator[Metric]:
    from prometheus_client.core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        HistogramMetricFamily,
    )
    from prometheus_client.utils import floatToGoString

    entries = GaugeMetricFamily(
        "django_iq_queue_entries",
        "Entries per queue and state; pending = computing + awaiting_compute, and failed "
        "counts final failures not yet requeued or pruned.",
        labels=["queue", "state"],
    )
    oldest = GaugeMetricFamily(
        "django_iq_oldest_waiting_seconds",
        "Age of the oldest entry awaiting compute (ready, not running) per queue; 0 when none.",
        labels=["queue"],
    )
    dead_locked = GaugeMetricFamily(
        "django_iq_locked_by_dead_workers",
        "Pending entries whose group lock's worker is not live (stopped, dead, silent or gone): "
        "the invariant is broken while this is above 0. Recovery releases them.",
        labels=["queue"],
    )
    orphan_locks = GaugeMetricFamily(
        "django_iq_locks_without_entries",
        "Group locks no entry has as its lock key; 0 in a healthy queue.",
        labels=["queue"],
    )
    invariant = GaugeMetricFamily(
        "django_iq_invariant_holds",
        "1 when pending = computing + awaiting_compute and no lock lacks its entry, else 0.",
        labels=["queue"],
    )
    alarm = GaugeMetricFamily(
        "django_iq_alarm",
        "1 while an alarm is raised, else 0: per queue (no_live_worker, nothing_started: an "
        "entry awaited compute past the queue's threshold; unserved_job: an entry of a job no "
        "live worker has registered waited as long, the job named by "
        "django_iq_unserved_job_waiting_entries) and for the cluster (no_leader, "
        'with queue="").',
        labels=["queue", "reason"],
    )
    raised = {(a.queue or "", a.reason) for a in scrape.snapshot.alarms}
    for queue in scrape.snapshot.queues:
        for state, count in queue.counts.items():
            entries.add_metric([queue.name, state], count)
        oldest.add_metric([queue.name], queue.oldest_waiting_seconds or 0.0)
        dead_locked.add_metric([queue.name], queue.stats.locked_by_dead_workers)
        orphan_locks.add_metric([queue.name], queue.stats.locks_without_entries)
        invariant.add_metric([queue.name], 1 if queue.stats.is_consistent else 0)
        for reason in (*QUEUE_REASONS, UNSERVED_JOB):
            alarm.add_metric([queue.name, reason], 1 if (queue.name, reason) in raised else 0)
    alarm.add_metric(["", NO_LEADER], 1 if ("", NO_LEADER) in raised else 0)
    yield entries
    yield dead_locked
    yield orphan_locks
    yield invariant
    yield alarm
    yield GaugeMetricFamily(
        "django_iq_leader_live",
        "1 while a leader holds an unexpired lease, else 0.",
        value=1 if scrape.snapshot.leader_live else 0,
    )

    done = CounterMetricFamily(
        "django_iq_jobs_done", "Jobs that succeeded, per queue.", labels=["queue"]
    )
    failed = CounterMetricFamily(
        "django_iq_jobs_failed",
        "Job attempts that failed (each retry counts), per queue.",
        labels=["queue"],
    )
    duration = HistogramMetricFamily(
        "django_iq_job_duration_seconds",
        "Run time of finished job attempts, successful or not, per queue.",
        labels=["queue"],
    )
    for queue_name, total in sorted(scrape.totals.items()):
        done.add_metric([queue_name], total.done)
        failed.add_metric([queue_name], total.failed)
        buckets = [
            (floatToGoString(bound), getattr(total, name))
            for bound, name in zip(DURATION_BUCKETS_SECONDS, BUCKET_FIELDS, strict=True)
        ]
        buckets.append(("+Inf", total.done + total.failed))
        duration.add_metric([queue_name], buckets, sum_value=total.busy_seconds)
    merged = CounterMetricFamily(
        "django_iq_entries_merged",
        "Waiting entries merged away by compaction (a group of n entries folded into one "
        "counts n - 1), per queue.",
        labels=["queue"],
    )
    for queue_name, total in sorted(scrape.totals.items()):
        merged.add_metric([queue_name], total.merged)
    yield done
    yield failed
    yield merged
    yield duration
    yield oldest

    workers = GaugeMetricFamily(
        "django_iq_workers",
        "Worker and leader processes by role and state, until their rows are pruned: live "
        "(heartbeat within WORKER_SILENT_AFTER_SECONDS), stopped (exited cleanly) or dead "
        "(silent past that limit, or declared dead by recovery).",
        labels=["role", "state"],
    )
    for role in Worker.Role.values:
        for state in WORKER_STATES:
            workers.add_metric([role, state], scrape.snapshot.worker_counts.get((role, state), 0))
    yield workers
    yield GaugeMetricFamily(
        "django_iq_worker_throttled",
        "Live workers the resource governor is holding back (CPU or memory over threshold).",
        value=scrape.snapshot.throttled_workers,
    )
    server = scrape.snapshot.server_sessions
    if server is not None:
        yield GaugeMetricFamily(
            "django_iq_database_max_connections",
            "The database server's max_connections (the slots reserved for superusers included).",
            value=server.max_connections,
        )
        sessions = GaugeMetricFamily(
            "django_iq_database_sessions",
            "Client sessions open on the database server: all of them (every database's and "
            "user's), those the live django_iq processes report, and the headroom an ordinary "
            "user may still open.",
            labels=["kind"],
        )
        sessions.add_metric(["in_use"], server.in_use)
        sessions.add_metric(["django_iq"], server.django_iq)
        sessions.add_metric(["headroom"], server.headroom)
        yield sessions
    unserved = GaugeMetricFamily(
        "django_iq_unserved_job_waiting_entries",
        "Ready entries of a job that no live worker has registered: they wait, never tried.",
        labels=["job"],
    )
    unserved_oldest = GaugeMetricFamily(
        "django_iq_unserved_job_oldest_waiting_seconds",
        "Age of the oldest ready entry of a job that no live worker has registered.",
        labels=["job"],
    )
    for job in scrape.snapshot.unserved_jobs or []:
        unserved.add_metric([job.job_name], job.waiting)
        unserved_oldest.add_metric([job.job_name], job.oldest_waiting_seconds or 0.0)
    yield unserved
    yield unserved_oldest
    yield from _job_families(scrape.jobs)
    yield from _autoscale_families(scrape.demand)


def _job_families(jobs: list[JobStats]) -> Iterator[Metric]:
    """Per job, over the last hour (the current minute and the 59 before it): runs that ended,
    failures, and duration quantiles."""
    from prometheus_client.core import GaugeMetricFamily

    runs, failures, durations = (
        GaugeMetricFamily(name, documentation, labels=labels)
        for name, documentation, labels in JOB_FAMILIES
    )
    for stats in jobs:
        runs.add_metric([stats.job_name], stats.runs)
        failures.add_metric([stats.job_name], stats.failed)
        for q, seconds in zip(QUANTILES, (stats.p50_seconds, stats.p95_seconds), strict=True):
            durations.add_metric([stats.job_name, str(q)], seconds or 0.0)
    yield runs
    yield failures
    yield durations


def _autoscale_families(demand: Demand | None) -> Iterator[Metric]:
    """The autoscaling signal (django_iq/autoscale.py): per queue, the threads its pending
    entries need and their run time; the target they are measured against."""
    from prometheus_client.core import GaugeMetricFamily

    needed = GaugeMetricFamily(
        "django_iq_threads_needed",
        "Processing threads that would run a queue's pending entries within "
        "AUTOSCALE_TARGET_SECONDS, each at its job's mean duration over the last hour; sum "
        "them and divide by a worker's threads for the workers to run.",
        labels=["queue"],
    )
    backlog = GaugeMetricFamily(
        "django_iq_backlog_seconds",
        "The run time of a queue's pending entries, each at its job's mean duration over the "
        "last hour.",
        labels=["queue"],
    )
    for queue in demand.queues if demand is not None else ():
        needed.add_metric([queue.queue], queue.threads_needed)
        backlog.add_metric([queue.queue], queue.backlog_seconds)
    yield needed
    yield backlog
    yield GaugeMetricFamily(
        "django_iq_autoscale_target_seconds",
        "AUTOSCALE_TARGET_SECONDS: the time django_iq_threads_needed drains the backlog in.",
        value=demand.target_seconds if demand is not None else 0.0,
    )


def refusal(request: HttpRequest) -> HttpResponse | None:
    """The answer refusing ``request`` the metrics, or None to serve them.

    Served to a request with ``Authorization: Bearer <token>`` where the token is
    ``DJANGO_IQ["METRICS_TOKEN"]`` or the API token of an active staff user holding
    ``permissions.METRICS``; or, without that header, to such a user signed in. 401 (with
    ``WWW-Authenticate: Bearer``) without usable credentials, 403 for a user lacking the rights.
    """
    try:
        token = token_auth.bearer_token(request)
        expected = iq_settings.METRICS_TOKEN
        if token is not None and expected and token_auth.matches(token, expected):
            return None
        token_auth.authenticate(request)
    except token_auth.Unauthenticated as exc:
        return _refuse(401, exc.message, exc.challenge)
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return _refuse(
            401,
            "Authentication required: send Authorization: Bearer <token> with the token of "
            'DJANGO_IQ["METRICS_TOKEN"] or an API token, or log in as a staff user.',
            token_auth.CHALLENGE,
        )
    if not permissions.allows(user, permissions.METRICS):
        return _refuse(
            403,
            f"Forbidden: the metrics need staff status and {permissions.named(permissions.METRICS)}.",
        )
    return None


def _refuse(status: int, message: str, challenge: str | None = None) -> HttpResponse:
    response = HttpResponse(f"{message}\n", status=status, content_type="text/plain; charset=utf-8")
    if challenge is not None:
        response["WWW-Authenticate"] = challenge
    return response


# The view authenticates its own callers, tokens included: LoginRequiredMiddleware would send
# Prometheus to a login page, and the view answers 401 itself.
@login_not_required
@require_safe
def metrics_view(request: HttpRequest) -> HttpResponse:
    """Serve the metrics in the Prometheus text format (version 0.0.4).

    Refused as ``refusal(request)`` says; 501 when prometheus-client is not installed.
    """
    refused = refusal(request)
    if refused is not None:
        response = refused
    else:
        try:
            from prometheus_client import CollectorRegistry, generate_latest
        except ImportError:
            response = HttpResponse(
                MISSING_CLIENT_MESSAGE, status=501, content_type="text/plain; charset=utf-8"
            )
        else:
            registry = CollectorRegistry(auto_describe=False)
            registry.register(IQCollector())
            response = HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE)
    add_never_cache_headers(response)
    return response
