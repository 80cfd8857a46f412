"""The rows of the dashboard's tables: a queue's counts per state as people read them, each with
the link to the rows it counts; a worker with its load bar; a job's duration quantiles."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.utils.safestring import SafeString

from django_iq.dashboard import charts
from django_iq.dashboard.links import Links
from django_iq.dashboard.panels import format_age
from django_iq.managers.job_limits import JobUsage
from django_iq.managers.jobstats import JobStats
from django_iq.snapshot import QueueView, WorkerView
from django_iq.states import COUNTED_STATES
from django_iq.wording import rate_use, used_of

if TYPE_CHECKING:
    from django_iq.managers import QueueStats


@dataclass(frozen=True)
class LimitedJobRow:
    """A limited job on the dashboard: running / cap, busiest node / per-node cap and starts /
    rate limit ("-" where it has none); for a job limited per key, the cap and the rate limit
    are per key, ``keys`` are its busiest keys as ``(key, running / cap, starts / rate
    limit)``, and ``more_keys`` the keys in use not listed."""

    job_name: str
    running: str
    per_node: str
    rate: str
    keys: list[tuple[str, str, str]]
    more_keys: int


def limited_job_row(usage: JobUsage) -> LimitedJobRow:
    limits = usage.limits
    cap, count, period = limits.max_concurrency, limits.rate_count, limits.rate_period_seconds
    running = used_of(usage.running, cap)
    if limits.concurrency_keyed:
        running = f"{usage.running} ({cap} per key)"
    rate = rate_use(usage.recent_starts, count, period)
    if limits.rate_keyed:
        rate = f"{count} per {period:g} s per key"
    keys = [
        (
            key.key,
            used_of(key.running, cap) if limits.concurrency_keyed else "-",
            rate_use(key.recent_starts, count, period) if limits.rate_keyed else "-",
        )
        for key in usage.keys
    ]
    return LimitedJobRow(
        usage.job_name,
        running,
        used_of(usage.running_on_busiest_node, limits.max_concurrency_per_node),
        rate,
        keys,
        usage.keys_in_use - len(keys),
    )


def job_rows(job_stats: list[JobStats]) -> list[tuple[JobStats, str, str]]:
    """``(stats, median, 95th percentile)`` of each job, the durations formatted for people."""
    return [
        (stats, format_age(stats.p50_seconds), format_age(stats.p95_seconds)) for stats in job_stats
    ]


def job_links(
    links: Links, since: datetime, job_stats: list[JobStats]
) -> dict[str, tuple[str | None, str | None]]:
    """Job name -> links to its runs, and to its failed runs, that ended since ``since``."""
    return {
        stats.job_name: (
            links.outcomes(since, job=stats.job_name),
            links.outcomes(since, job=stats.job_name, failed=True),
        )
        for stats in job_stats
    }


def display_counts(stats: QueueStats) -> dict[str, int]:
    """Counts per state, in ``COUNTED_STATES`` order (``states`` says what each means)."""
    return {state: stats.count(state) for state in COUNTED_STATES}


# (state, count, link to the rows counted or None)
Cell = tuple[str, int, str | None]


@dataclass(frozen=True)
class QueueRow:
    """One queue of the snapshot, as the dashboard shows it, with links to its rows."""

    view: QueueView
    links: Links

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
    def cells(self) -> list[Cell]:
        """(state, count, link) in ``COUNTED_STATES`` order, for the state columns."""
        return [
            (state, count, self.links.entries(self.view.name, state))
            for state, count in display_counts(self.view.stats).items()
        ]

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
    def shows_throttled(self) -> bool:
        """Throttled, and live: a stopped worker's last report throttles nothing now."""
        return self.view.is_live and self.view.is_throttled

    @property
    def heartbeat_age(self) -> str:
        return format_age(self.view.heartbeat_age_seconds)

    @property
    def load_chart(self) -> SafeString:
        if not self.view.is_live:
            return charts.load_bar(None, label=self.view.state)
        label = "no processing threads" if self.load is None else f"{self.load:.0%} busy"
        return charts.load_bar(self.load, label=label)
