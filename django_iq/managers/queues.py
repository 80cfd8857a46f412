"""Queues: creation of declared queues, pause and resume, per-state statistics."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.db import models
from django.db.models import Count, Exists, OuterRef, Q

from django_iq.appmodels import iq
from django_iq.exceptions import QueueNotFound
from django_iq.managers.entry_states import lock_held, lock_held_by_live_worker, lock_running_it
from django_iq.options import JobCatalog, settings_queues
from django_iq.queries import snapshot_reads
from django_iq.states import EntryState

if TYPE_CHECKING:
    from django_iq.models import (
        Queue,
    )


@dataclass(frozen=True)
class QueueStats:
    """Counts per state for one queue, each counted on its own from stored rows, all read in one
    snapshot of the database (``queries.snapshot_reads``) so that they are mutually consistent.

    ``stored`` holds every stored state (``EntryState``); the inferred ones have fields.
    ``locked_by_dead_workers`` and ``locks_without_entries`` count corruption: both are zero in
    a healthy queue, outside the moments between a worker's death and its recovery.
    """

    queue: str
    is_paused: bool
    stored: Mapping[str, int]
    computing: int
    awaiting_compute: int
    failed: int
    # Pending entries whose group lock exists but whose worker is not live (or there is none).
    locked_by_dead_workers: int = 0
    # Group locks of this queue that no entry has as its lock key.
    locks_without_entries: int = 0
    # Group locks of this queue held by a live worker: claims running now.
    live_locks: int = 0
    # The queue's own alarm threshold; None: ALERT_WAITING_SECONDS.
    alert_waiting_seconds: int | None = None
    # Computing entries their live worker is running (each live lock's tracked entry); the
    # rest of ``computing`` wait in their worker's prefetch or behind their group's running
    # entry.
    running: int = 0

    def __getattr__(self, name: str) -> int:
        # A stored state reads as an attribute (``stats.pending``), new states included.
        if name in EntryState.values:
            return int(self.__dict__["stored"].get(name, 0))
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def count(self, state: str) -> int:
        """The count of ``state``, one of ``states.COUNTED_STATES``."""
        return int(getattr(self, state))

    @property
    def invariant_holds(self) -> bool:
        """Every pending entry is either computing (its group lock is held by a live worker) or
        awaiting compute (no lock): false when a pending entry is locked by a dead worker.

        The design's ``initial + pending = computing + awaitingCompute`` counts deferred entries
        as waiting too; with ``awaitingCompute`` limited to ready entries, as here, the identity
        is ``initial + pending == initial + computing + awaiting_compute``.
        """
        return self.count(EntryState.PENDING) == self.computing + self.awaiting_compute

    @property
    def broken_counts(self) -> dict[str, int]:
        """The corruption counts that are not zero, by name."""
        counts = {
            "locked_by_dead_workers": self.locked_by_dead_workers,
            "locks_without_entries": self.locks_without_entries,
        }
        return {name: n for name, n in counts.items() if n}

    @property
    def is_consistent(self) -> bool:
        """The invariant holds and no lock is left without an entry."""
        return self.invariant_holds and not self.locks_without_entries


class QueueManager(models.Manager["Queue"]):
    def ensure(self, name: str, jobs: JobCatalog | None = None) -> Queue:
        """Return queue ``name``, creating it if declared (in settings, or by one of ``jobs``
        when given); raise ``QueueNotFound`` otherwise."""
        queue = self.filter(name=name).first()
        if queue is not None:
            return queue
        declared = jobs.declared_queues() if jobs is not None else settings_queues()
        if name not in declared:
            known = sorted(set(declared) | set(self.values_list("name", flat=True)))
            raise QueueNotFound(
                f"Queue {name!r} does not exist. Create it in the admin, declare it in "
                f'DJANGO_IQ["QUEUES"] or in @job(queue=...). Known queues: {", ".join(known)}.'
            )
        options = declared[name]
        queue, _ = self.get_or_create(
            name=name,
            defaults={
                k: v
                for k, v in options.items()
                if k in ("weight", "max_concurrency", "is_paused", "alert_waiting_seconds")
            },
        )
        return queue

    def configure(
        self,
        name: str,
        *,
        weight: int | None = None,
        max_concurrency: int | bool | None = False,
        alert_waiting_seconds: int | bool | None = False,
    ) -> int:
        """Change a queue's weight, concurrency cap and/or alarm threshold (``None`` removes the
        cap, or the queue's own threshold; leaving one out keeps the current value). Return
        rows changed."""
        if not self.filter(name=name).exists():
            raise QueueNotFound(f"Queue {name!r} does not exist.")
        changes: dict[str, Any] = {}
        if weight is not None:
            if isinstance(weight, bool) or not isinstance(weight, int) or weight < 1:
                raise ValueError(f"weight must be an integer >= 1, got {weight!r}.")
            changes["weight"] = weight
        for option, value in (
            ("max_concurrency", max_concurrency),
            ("alert_waiting_seconds", alert_waiting_seconds),
        ):
            if value is False:
                continue
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 1
            ):
                raise ValueError(f"{option} must be None or an integer >= 1, got {value!r}.")
            changes[option] = value
        return self.filter(name=name).update(**changes) if changes else 0

    def pause(self, name: str) -> int:
        """Stop serving queue ``name``; running entries finish. Return rows changed."""
        return self._set_paused(name, True)

    def resume(self, name: str) -> int:
        """Serve queue ``name`` again. Return rows changed."""
        return self._set_paused(name, False)

    def _set_paused(self, name: str, paused: bool) -> int:
        if not self.filter(name=name).exists():
            raise QueueNotFound(f"Queue {name!r} does not exist.")
        return self.filter(name=name, is_paused=not paused).update(is_paused=paused)

    def stats(self, names: Sequence[str] | None = None) -> list[QueueStats]:
        """Return per-queue counts of every entry state, stored and inferred, and of the
        corruption that breaks the invariant: five queries in one snapshot of the database."""
        with snapshot_reads(self.db):
            return self._stats(names)

    def _stats(self, names: Sequence[str] | None) -> list[QueueStats]:
        entries = iq.Entry.objects.all()
        locks = iq.GroupLock.objects.all()
        failed_errors = iq.EntryError.objects.failed()
        queues = self.all()
        if names is not None:
            entries = entries.filter(queue_id__in=names)
            locks = locks.filter(queue_id__in=names)
            failed_errors = failed_errors.filter(queue_id__in=names)
            queues = queues.filter(name__in=names)
        # Stored states: one GROUP BY that the (state, queue, ...) index answers on its own.
        stored: dict[str, dict[str, int]] = {}
        for queue_name, state, n in (
            entries.values("queue", "state")
            .annotate(n=Count("pk"))
            .order_by()
            .values_list("queue", "state", "n")
        ):
            stored.setdefault(str(queue_name), {})[str(state)] = int(n)
        # Each pending entry by its lock: held by a live worker, absent, or held by no live
        # worker. Counted apart, not derived from each other, so that corruption shows.
        held, live, running = lock_held(), lock_held_by_live_worker(), lock_running_it()
        pending: dict[str, tuple[int, int, int, int]] = {
            str(queue_name): (int(computing), int(awaiting), int(dead), int(run))
            for queue_name, computing, awaiting, dead, run in entries.filter(
                state=EntryState.PENDING
            )
            .values("queue")
            .annotate(
                computing=Count("pk", filter=Q(live)),
                awaiting=Count("pk", filter=~Q(held)),
                dead=Count("pk", filter=Q(held) & ~Q(live)),
                run=Count("pk", filter=Q(running)),
            )
            .order_by()
            .values_list("queue", "computing", "awaiting", "dead", "run")
        }
        live_workers = iq.Worker.objects.live().values("pk")
        lock_counts: dict[str, tuple[int, int]] = {
            str(queue_name): (int(live_locks), int(orphans))
            for queue_name, live_locks, orphans in locks.values("queue")
            .annotate(
                live_locks=Count("pk", filter=Q(worker__in=live_workers)),
                orphans=Count(
                    "pk", filter=~Q(Exists(iq.Entry.objects.filter(lock_key=OuterRef("key"))))
                ),
            )
            .order_by()
            .values_list("queue", "live_locks", "orphans")
        }
        failed: dict[str, int] = {
            str(queue_name): int(n)
            for queue_name, n in failed_errors.values("queue")
            .annotate(n=Count("pk"))
            .order_by()
            .values_list("queue", "n")
        }
        result = []
        for name, is_paused, alert_waiting_seconds in queues.order_by("name").values_list(
            "name", "is_paused", "alert_waiting_seconds"
        ):
            counts = stored.get(name, {})
            computing, awaiting, dead, run = pending.get(name, (0, 0, 0, 0))
            live_locks, orphans = lock_counts.get(name, (0, 0))
            result.append(
                QueueStats(
                    queue=name,
                    is_paused=is_paused,
                    stored={state: counts.get(state, 0) for state in EntryState.values},
                    computing=computing,
                    awaiting_compute=awaiting,
                    failed=failed.get(name, 0),
                    locked_by_dead_workers=dead,
                    locks_without_entries=orphans,
                    live_locks=live_locks,
                    alert_waiting_seconds=alert_waiting_seconds,
                    running=run,
                )
            )
        return result
