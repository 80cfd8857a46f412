"""The states of entries as querysets (``Entry.objects.pending()``, ``computing()`` ...) and the
lock predicates they are built on, shared with the admin, the API and the queue statistics."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from django.db import models
from django.db.models import Exists, OuterRef

from django_iq.appmodels import iq
from django_iq.states import EntryState

if TYPE_CHECKING:
    from django_iq.models import Entry  # noqa: F401 (named in a string)


def lock_held() -> Exists:
    """True for an entry whose group lock exists (whoever holds it)."""
    return Exists(iq.GroupLock.objects.filter(key=OuterRef("lock_key")))


def lock_held_by_live_worker() -> Exists:
    """True for an entry whose group lock is held by a live worker (``WorkerManager.live``)."""
    return Exists(
        iq.GroupLock.objects.filter(
            key=OuterRef("lock_key"), worker__in=iq.Worker.objects.live().values("pk")
        )
    )


def lock_running_it() -> Exists:
    """True for an entry its group lock's live worker is running (or about to run next): the
    lock's tracked entry (``GroupLock.entry_id``). The group's other pending entries wait behind
    it."""
    return Exists(
        iq.GroupLock.objects.filter(
            key=OuterRef("lock_key"),
            entry_id=OuterRef("pk"),
            worker__in=iq.Worker.objects.live().values("pk"),
        )
    )


class EntryQuerySet(models.QuerySet["Entry"]):
    def initial(self) -> EntryQuerySet:
        return self.filter(state=EntryState.INITIAL)

    def pending(self) -> EntryQuerySet:
        return self.filter(state=EntryState.PENDING)

    def disabled(self) -> EntryQuerySet:
        return self.filter(state=EntryState.DISABLED)

    def blocked(self) -> EntryQuerySet:
        """Entries waiting for their parent entries (``using(after=...)``)."""
        return self.filter(state=EntryState.BLOCKED)

    def computing(self) -> EntryQuerySet:
        """Pending entries whose group lock is held by a live worker: it has them (running,
        waiting in its prefetch, or waiting behind their group's running entry)."""
        return self.pending().filter(lock_held_by_live_worker())

    def locked_by_dead_workers(self) -> EntryQuerySet:
        """Pending entries whose group lock exists but whose worker is not live (stopped,
        declared dead, silent, or gone): neither running nor claimable until recovery
        releases the lock. None outside the moments between a death and its recovery."""
        return self.pending().filter(lock_held()).exclude(lock_held_by_live_worker())

    def awaiting_compute(self) -> EntryQuerySet:
        """Pending entries with no lock: ready, waiting for a processing thread."""
        return self.pending().filter(~lock_held())

    def running(self) -> EntryQuerySet:
        """Computing entries a live worker is running: each live lock's tracked entry (the
        ``running`` count)."""
        return self.pending().filter(lock_running_it())

    def due(self, now: datetime) -> EntryQuerySet:
        """Deferred entries whose run_at has come."""
        return self.initial().filter(run_at__lte=now)
