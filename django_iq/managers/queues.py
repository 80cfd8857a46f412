"""Queues: creation of declared queues, pause and resume, per-state statistics."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.db import models
from django.db.models import Count

from django_iq.appmodels import iq
from django_iq.exceptions import QueueNotFound
from django_iq.options import JobCatalog, settings_queues
from django_iq.states import EntryState

if TYPE_CHECKING:
    from django_iq.models import (
        Queue,
    )


@dataclass(frozen=True)
class QueueStats:
    """Counts per state for one queue, read in one statement so they are mutually consistent."""

    queue: str
    is_paused: bool
    initial: int
    pending: int
    disabled: int
    blocked: int
    computing: int
    awaiting_compute: int
    failed: int

    @property
    def invariant_holds(self) -> bool:
        """Every pending entry is either computing (its group lock is held) or awaiting compute.

        The design's ``initial + pending = computing + awaitingCompute`` counts deferred entries
        as waiting too; with ``awaitingCompute`` limited to ready entries, as here, the identity
        is ``initial + pending == initial + computing + awaiting_compute``.
        """
        return self.pending == self.computing + self.awaiting_compute


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
                k: v for k, v in options.items() if k in ("weight", "max_concurrency", "is_paused")
            },
        )
        return queue

    def configure(
        self, name: str, *, weight: int | None = None, max_concurrency: int | bool | None = False
    ) -> int:
        """Change a queue's weight and/or concurrency cap (``max_concurrency=None`` removes the
        cap; leaving it out keeps the current one). Return rows changed."""
        if not self.filter(name=name).exists():
            raise QueueNotFound(f"Queue {name!r} does not exist.")
        changes: dict[str, Any] = {}
        if weight is not None:
            if isinstance(weight, bool) or not isinstance(weight, int) or weight < 1:
                raise ValueError(f"weight must be an integer >= 1, got {weight!r}.")
            changes["weight"] = weight
        if max_concurrency is not False:
            if max_concurrency is not None and (
                isinstance(max_concurrency, bool)
                or not isinstance(max_concurrency, int)
                or max_concurrency < 1
            ):
                raise ValueError(
                    f"max_concurrency must be None or an integer >= 1, got {max_concurrency!r}."
                )
            changes["max_concurrency"] = max_concurrency
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
        """Return per-queue counts of every entry state, stored and inferred."""
        entries = iq.Entry.objects.all()
        if names is not None:
            entries = entries.filter(queue_id__in=names)
        # Stored states: one GROUP BY that the (state, queue, ...) index answers on its own.
        counts: dict[str, dict[str, int]] = {}
        for queue_name, state, n in (
            entries.values("queue", "state")
            .annotate(n=Count("pk"))
            .order_by()
            .values_list("queue", "state", "n")
        ):
            counts.setdefault(str(queue_name), {})[str(state)] = int(n)
        # Computing: read from the lock side, a table as small as the work running now.
        computing: dict[str, int] = {
            str(queue_name): int(n)
            for queue_name, n in entries.filter(
                state=EntryState.PENDING,
                lock_key__in=iq.GroupLock.objects.values("key"),
            )
            .values("queue")
            .annotate(n=Count("pk"))
            .order_by()
            .values_list("queue", "n")
        }
        failed: dict[str, int] = dict(
            iq.EntryError.objects.failed()
            .values("queue")
            .annotate(n=Count("pk"))
            .order_by()
            .values_list("queue", "n")  # type: ignore[arg-type]
        )
        queues = self.all() if names is None else self.filter(name__in=names)
        result = []
        for queue in queues.order_by("name"):
            row = counts.get(queue.name, {})
            pending = row.get(EntryState.PENDING, 0)
            # Two statements, two snapshots: a claim committed between them must not make the
            # counts contradict each other, so computing never exceeds pending.
            running = min(computing.get(queue.name, 0), pending)
            result.append(
                QueueStats(
                    queue=queue.name,
                    is_paused=queue.is_paused,
                    initial=row.get(EntryState.INITIAL, 0),
                    pending=pending,
                    disabled=row.get(EntryState.DISABLED, 0),
                    blocked=row.get(EntryState.BLOCKED, 0),
                    computing=running,
                    awaiting_compute=pending - running,
                    failed=failed.get(queue.name, 0),
                )
            )
        return result
