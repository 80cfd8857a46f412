"""Per-job caps and rate limits: the limits workers declare, the room a claim has under them,
and the starts a rate limit counts (docs/howto/job-limits.md)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from django.db import models, router, transaction
from django.db.models import Count, Q, QuerySet
from django.db.models.functions import Now
from django.utils import timezone

from django_iq.appmodels import iq
from django_iq.options import JobLimits

if TYPE_CHECKING:
    from django_iq.models import Entry, JobLimit

# A claim of a job limited per key reads up to this many ready entries for each one it may
# take (at least KEY_SCAN_MIN, at most KEY_SCAN_MAX), so that it can spread its claim over the
# keys found in them. Keys at their limit are left out by the query itself: a key's backlog
# never fills the rows read.
KEY_SCAN_FACTOR = 4
KEY_SCAN_MIN = 32
KEY_SCAN_MAX = 500
# ... in up to this many reads, each leaving out the keys the ones before filled up.
KEY_SCAN_ROUNDS = 3
# Per-key counts the dashboard and the API show for each job limited per key: the busiest.
USAGE_KEYS_SHOWN = 10


@dataclass(frozen=True)
class KeyUsage:
    """One value of a job's key now: claims of it running and starts in the rate window."""

    key: str
    running: int
    recent_starts: int


@dataclass(frozen=True)
class JobUsage:
    """A limited job now: its limits, entries running (cluster-wide and on the busiest node),
    starts within the rate limit's current window and, for a job limited per key, its busiest
    keys (at most ``USAGE_KEYS_SHOWN``) and how many keys are in use."""

    job_name: str
    limits: JobLimits
    running: int
    running_on_busiest_node: int
    recent_starts: int
    keys: list[KeyUsage] = field(default_factory=list)
    keys_in_use: int = 0


@dataclass(frozen=True)
class Room:
    """What a claim of a limited job may take now, under its row's lock: ``total`` by the
    job-wide limits; ``rated``: its claims record their starts."""

    total: int
    rated: bool
    limits: JobLimits | None = None


class JobLimitManager(models.Manager["JobLimit"]):
    def publish(self, limits: Mapping[str, JobLimits], unlimited: Iterable[str] = ()) -> None:
        """Write the limits of the caller's registered jobs (a worker, as it starts): one row
        per limited job; the rows of ``unlimited`` jobs (their limits were removed) go."""
        db = router.db_for_write(self.model)
        wanted = {name: _row_values(job_limits) for name, job_limits in limits.items()}
        gone = sorted(set(unlimited) - set(limits))
        rows = self.using(db).filter(job_name__in=[*wanted, *gone])
        stored = {row.job_name: _row_values(_limits(row)) for row in rows}
        missing = [name for name in sorted(wanted) if name not in stored]
        if missing:
            # A fleet's first start: each process inserts what is missing, one insert winning.
            self.using(db).bulk_create(
                [self.model(job_name=name, **wanted[name]) for name in missing],
                ignore_conflicts=True,
            )
            stored = {row.job_name: _row_values(_limits(row)) for row in rows.all()}
        if not set(gone) & set(stored) and all(stored.get(n) == v for n, v in wanted.items()):
            # What a fleet starting together finds: the rows hold these limits. Read without
            # locks: locking them, 48 processes starting at once queued on the rows (and
            # behind claims holding them), about 0.7 s a wait, hundreds of waits.
            return
        with transaction.atomic(using=db):
            for job_name, values in sorted(wanted.items()):
                # Workers starting together race to create the row: one does, the others read it.
                rows = self.using(db).select_for_update()
                row, created = rows.get_or_create(job_name=job_name, defaults=values)
                if not created and any(
                    getattr(row, name) != value for name, value in values.items()
                ):
                    self.using(db).filter(pk=row.pk).update(updated_at=timezone.now(), **values)
            if gone:
                self.using(db).filter(job_name__in=gone).delete()

    def room(self, using: str, job_name: str, node: str | None, own: JobLimits) -> Room:
        """How many entries of ``job_name`` a claim may take now, in the caller's transaction:
        lock the job's row (so claims of the job count one at a time), then count its running
        claims (in the cluster, and on ``node``) and its starts within the rate window. Return
        the room and whether the job has a rate limit (its claims then record their starts);
        limits per key are counted by ``pick_by_key``. The caller's own limits stand in for a
        row not written yet. A row another claim holds is not waited for: the room is 0 for
        now (``SKIP LOCKED``)."""
        rows = self.using(using).filter(job_name=job_name)
        row = rows.select_for_update(skip_locked=True).first()
        if row is None:
            if rows.exists():
                # Another worker is claiming this job right now: it counts and takes the room.
                # Waiting for it would queue every worker of a fleet on this one row (and hold
                # up their heartbeats, which share the scheduling pass's connection).
                return Room(0, False)
            self.publish({job_name: own})
            row = rows.select_for_update().get()
        limits = _limits(row)
        locks = iq.GroupLock.objects.using(using).filter(job_name=job_name)
        # Only the counts a job-wide limit uses are read.
        cluster_cap = limits.max_concurrency is not None and not limits.concurrency_keyed
        running = locks.count() if cluster_cap else 0
        on_node = 0
        if limits.max_concurrency_per_node is not None and node is not None:
            on_node = locks.filter(worker__host=node).count()
        recent = 0
        if limits.is_rated:
            recent = self._starts(using, job_name, limits)
        return Room(max(0, limits.room(running, on_node, recent)), limits.is_rated, limits)

    def _starts(self, using: str, job_name: str, limits: JobLimits) -> int:
        """Starts of the job within the last period, by the database's clock (0 for a rate
        limit per key, counted by ``pick_by_key``); older ones go."""
        starts = iq.JobStart.objects.using(using).filter(job_name=job_name)
        since = self._window_start(using, job_name, limits)
        starts.filter(started_at__lte=since).delete()
        return 0 if limits.rate_keyed else starts.filter(started_at__gt=since).count()

    def _window_start(self, using: str, job_name: str, limits: JobLimits) -> datetime:
        return self._db_now(using, job_name) - timedelta(seconds=limits.rate_period_seconds or 0)

    def pick_by_key(
        self, using: str, job_name: str, limits: JobLimits, ready: QuerySet[Entry], limit: int
    ) -> list[Entry]:
        """Up to ``limit`` of the ``ready`` entries (ordered, ``FOR UPDATE SKIP LOCKED``) of a
        job limited per key, in the claim's transaction holding the job's row: keys at their
        cap or rate limit are left out by the query; from the entries read, each round takes
        the next entry of every key that still has room, in the order the keys' first
        entries come (priority, then FIFO), so one key's backlog never holds up the others."""
        if limits.concurrency_keyed and limits.max_concurrency is not None:
            full = (
                iq.GroupLock.objects.using(using)
                .filter(job_name=job_name)
                .values("concurrency_key")
                .annotate(n=Count("pk"))
                .filter(n__gte=limits.max_concurrency)
                .values("concurrency_key")
            )
            ready = ready.exclude(concurrency_key__in=full)
        rate_keyed = limits.rate_keyed and limits.rate_count is not None
        since = self._window_start(using, job_name, limits) if rate_keyed else None
        if since is not None and limits.rate_count is not None:
            spent = (
                iq.JobStart.objects.using(using)
                .filter(job_name=job_name, started_at__gt=since)
                .values("rate_limit_key")
                .annotate(n=Count("pk"))
                .filter(n__gte=limits.rate_count)
                .values("rate_limit_key")
            )
            ready = ready.exclude(rate_limit_key__in=spent)
        scan = min(KEY_SCAN_MAX, max(KEY_SCAN_MIN, limit * KEY_SCAN_FACTOR))
        running: Counter[str] = Counter()
        recent: Counter[str] = Counter()
        counted: tuple[set[str], set[str]] = (set(), set())  # keys whose counts were read
        taken: list[Entry] = []
        read: list[int] = []
        for _ in range(KEY_SCAN_ROUNDS):
            candidates = list(ready.exclude(pk__in=read)[:scan] if read else ready[:scan])
            read += [entry.pk for entry in candidates]
            ckeys = {entry.concurrency_key for entry in candidates} - counted[0]
            rkeys = {entry.rate_limit_key for entry in candidates} - counted[1]
            counted[0].update(ckeys)
            counted[1].update(rkeys)
            if limits.concurrency_keyed and ckeys:
                locks = iq.GroupLock.objects.using(using).filter(
                    job_name=job_name, concurrency_key__in=ckeys
                )
                running.update(dict(locks.values_list("concurrency_key").annotate(n=Count("pk"))))
            if since is not None and rkeys:
                starts = iq.JobStart.objects.using(using).filter(
                    job_name=job_name, started_at__gt=since, rate_limit_key__in=rkeys
                )
                recent.update(dict(starts.values_list("rate_limit_key").annotate(n=Count("pk"))))
            taken += _round_robin(candidates, limits, running, recent, limit - len(taken))
            if len(taken) >= limit or len(candidates) < scan:
                break
            # The rows read were of keys that filled up meanwhile (one key's backlog at the
            # head of the queue, say): read on past them, leaving those keys out.
            if limits.concurrency_keyed:
                filled = [k for k in counted[0] if limits.key_room(running[k], 0) <= 0]
                ready = ready.exclude(concurrency_key__in=filled)
            if since is not None:
                spent_now = [k for k in counted[1] if limits.key_room(0, recent[k]) <= 0]
                ready = ready.exclude(rate_limit_key__in=spent_now)
        return taken

    def record_starts(self, using: str, job_name: str, entries: Sequence[Entry]) -> None:
        """Count a start of each of ``entries`` (of a rate-limited job) now, with its rate
        limit key, in the claim's transaction."""
        if not entries:
            return
        now = self._db_now(using, job_name)
        iq.JobStart.objects.using(using).bulk_create(
            [
                iq.JobStart(job_name=job_name, started_at=now, rate_limit_key=e.rate_limit_key)
                for e in entries
            ]
        )

    def _db_now(self, using: str, job_name: str) -> datetime:
        """The database's clock, read through the job's row the claim holds: rate windows must
        not depend on the hosts' clocks."""
        rows = self.using(using).filter(job_name=job_name).annotate(now=Now())
        return rows.values_list("now", flat=True).get()

    def limits_of(self, row: JobLimit) -> JobLimits:
        """The limits a ``JobLimit`` row holds."""
        return _limits(row)

    def prune_starts(self, older_than: datetime, batch_size: int) -> int:
        """Delete up to ``batch_size`` rate-limited starts older than ``older_than``."""
        starts = iq.JobStart.objects.filter(started_at__lt=older_than)
        ids = list(starts.values_list("pk", flat=True)[:batch_size])
        return iq.JobStart.objects.filter(pk__in=ids).delete()[0] if ids else 0

    def usage(self) -> list[JobUsage]:
        """Every limited job with what it uses now (the admin, the dashboard, the API)."""
        rows = list(self.get_queryset().order_by("job_name"))
        if not rows:
            return []
        names = [row.job_name for row in rows]
        locks = iq.GroupLock.objects.filter(job_name__in=names)
        running = dict(locks.values_list("job_name").annotate(n=Count("pk")))
        busiest: dict[str, int] = {}
        per_node = locks.values_list("job_name", "worker__host").annotate(n=Count("pk"))
        for job_name, _, count in per_node:
            busiest[job_name] = max(busiest.get(job_name, 0), count)
        now = timezone.now()
        windows = Q()
        for row in rows:
            if row.rate_period_seconds:
                since = now - timedelta(seconds=row.rate_period_seconds)
                windows |= Q(job_name=row.job_name, started_at__gt=since)
        recent: dict[str, int] = {}
        if windows:
            starts = iq.JobStart.objects.filter(windows).values_list("job_name")
            recent = dict(starts.annotate(n=Count("pk")))
        return [
            JobUsage(
                row.job_name,
                _limits(row),
                running.get(row.job_name, 0),
                busiest.get(row.job_name, 0),
                recent.get(row.job_name, 0),
                *self._key_usage(row, now),
            )
            for row in rows
        ]

    def _key_usage(self, row: JobLimit, now: datetime) -> tuple[list[KeyUsage], int]:
        """The busiest keys of a job limited per key (most running, then most recent starts)
        and how many keys have a claim running or a start in the window."""
        if not (row.concurrency_keyed or row.rate_keyed):
            return [], 0
        running: dict[str, int] = {}
        if row.concurrency_keyed:
            locks = iq.GroupLock.objects.filter(job_name=row.job_name)
            running = dict(locks.values_list("concurrency_key").annotate(n=Count("pk")))
        recent: dict[str, int] = {}
        if row.rate_keyed and row.rate_period_seconds:
            since = now - timedelta(seconds=row.rate_period_seconds)
            starts = iq.JobStart.objects.filter(job_name=row.job_name, started_at__gt=since)
            recent = dict(starts.values_list("rate_limit_key").annotate(n=Count("pk")))
        keys = sorted(
            {*running, *recent}, key=lambda key: (-running.get(key, 0), -recent.get(key, 0), key)
        )
        shown = [KeyUsage(key, running.get(key, 0), recent.get(key, 0)) for key in keys]
        return shown[:USAGE_KEYS_SHOWN], len(keys)


def _round_robin(
    candidates: Sequence[Entry],
    limits: JobLimits,
    running: Counter[str],
    recent: Counter[str],
    limit: int,
) -> list[Entry]:
    """Up to ``limit`` of ``candidates`` (in claim order), a round at a time: each round takes
    the next entry of every key with room left, the keys with the fewest running (or, for a
    rate limit alone, the fewest recent starts) first, then in the order their first entry
    comes. An entry of a group already taken under another concurrency key waits: a group's
    lock counts as one key."""
    by_key: dict[str, list[Entry]] = {}
    for entry in candidates:
        key = entry.concurrency_key if limits.concurrency_keyed else entry.rate_limit_key
        by_key.setdefault(key, []).append(entry)
    used = running if limits.concurrency_keyed else recent
    queues = sorted(by_key.items(), key=lambda item: used[item[0]])  # stable: first-come next
    lock_keys: dict[str, str] = {}  # lock key -> the concurrency key it is taken under
    taken: list[Entry] = []
    for index in range(max((len(entries) for _, entries in queues), default=0)):
        for _, entries in queues:
            if len(taken) >= limit:
                return taken
            if index >= len(entries):
                continue
            entry = entries[index]
            ckey, rkey = entry.concurrency_key, entry.rate_limit_key
            if lock_keys.get(entry.lock_key, ckey) != ckey:
                continue
            if limits.key_room(running[ckey], recent[rkey]) <= 0:
                continue
            lock_keys[entry.lock_key] = ckey
            taken.append(entry)
            running[ckey] += 1
            recent[rkey] += 1
    return taken


def _row_values(job_limits: JobLimits) -> dict[str, object]:
    """The ``JobLimit`` row's columns for ``job_limits``."""
    return {
        "max_concurrency": job_limits.max_concurrency,
        "max_concurrency_per_node": job_limits.max_concurrency_per_node,
        "rate_count": job_limits.rate_count,
        "rate_period_seconds": job_limits.rate_period_seconds,
        "concurrency_keyed": job_limits.concurrency_keyed,
        "rate_keyed": job_limits.rate_keyed,
    }


def _limits(row: JobLimit) -> JobLimits:
    return JobLimits(
        row.max_concurrency,
        row.max_concurrency_per_node,
        row.rate_count,
        row.rate_period_seconds,
        concurrency_keyed=row.concurrency_keyed,
        rate_keyed=row.rate_keyed,
    )
