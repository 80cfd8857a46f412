"""Dependencies between entries (``using(after=[...])``): a child stays ``blocked`` until every
parent has ended; a parent's end releases its children in the transaction that writes it.

Each child counts its parents not ended yet (``Entry.blockers``). A parent that ends deletes
its edges and takes one from each child's count with an ``UPDATE`` of the child's row, which
waits for any other parent's update of the same row: two parents ending at once cannot both
miss the child's last parent, and the one that takes the count to 0 makes the child ready.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db import models
from django.db.models import Case, F, Value, When
from django.utils import timezone

from django_iq.appmodels import iq
from django_iq.queries import notify_ready
from django_iq.states import EntryState

if TYPE_CHECKING:
    from django_iq.models import Entry, EntryDependency

# The exception class a child's error record names when a parent failed for good.
PARENT_FAILED = "django_iq.exceptions.ParentFailed"


class EntryDependencyManager(models.Manager["EntryDependency"]):
    def attach(
        self,
        using: str,
        entries: Sequence[Entry],
        parent_ids: Sequence[int],
        run_on_failure: bool,
        insert: Callable[[], None],
    ) -> list[int]:
        """In the caller's transaction: lock the parents still waiting or running, make
        ``entries`` wait for them (``blocked``, ``blockers``), ``insert()`` the entries, and
        write the edges. Return the parents that had already failed for good (the caller
        fails the children, or lets them run). A parent gone without a final failure
        succeeded. Locking the parents makes a parent ending meanwhile wait for the edges, then
        release the children like any other."""
        wanted = sorted(set(parent_ids))
        alive = list(
            iq.Entry.objects.using(using)
            .filter(pk__in=wanted)
            .order_by("pk")
            .select_for_update()
            .values_list("pk", flat=True)
        )
        for entry in entries:
            entry.parent_ids = list(dict.fromkeys(parent_ids))
            entry.blockers = len(alive)
            if alive and entry.state != EntryState.DISABLED:
                entry.state = EntryState.BLOCKED
        insert()
        edges: list[EntryDependency] = [
            self.model(parent_id=parent, child_id=entry.pk, run_on_failure=run_on_failure)
            for entry in entries
            for parent in alive
        ]
        self.using(using).bulk_create(edges)
        gone = set(wanted) - set(alive)
        if not gone:
            return []
        failed = iq.EntryError.objects.db_manager(using).failed().filter(entry_id__in=gone)
        return sorted(set(failed.values_list("entry_id", flat=True)))

    def parents_ended(
        self,
        using: str,
        parent_ids: Sequence[int],
        *,
        failure: str | None = None,
        now: datetime | None = None,
        jobs: Any = None,
    ) -> None:
        """In the caller's transaction, the parents ``parent_ids`` ended: succeeded, or with
        ``failure`` (why) failed for good or were cancelled. Each child is released once its
        last parent has ended; with a ``failure``, a child that does not run on its parents'
        failures ends too, as a final ``ParentFailed`` failure, and so do its own children."""
        if not parent_ids:
            return
        edges = list(
            self.using(using)
            .filter(parent_id__in=parent_ids)
            .values_list("child_id", "parent_id", "run_on_failure")
        )
        if not edges:
            return
        self.using(using).filter(parent_id__in=parent_ids).delete()
        now = now or timezone.now()
        released = Counter(child for child, _, runs in edges if failure is None or runs)
        self.release(using, released, now)
        if failure is None:
            return
        doomed: dict[int, int] = {}
        for child, parent, runs in edges:
            if not runs:
                doomed.setdefault(child, parent)
        self._fail_children(using, doomed, failure, now, jobs)

    def release(self, using: str, counts: Counter[int], now: datetime) -> None:
        """In the caller's transaction, take ``counts[child]`` from each child's count of
        blockers (a parent's end, or a blocker that is no edge: a batch's open block), and
        release the children left with none."""
        entries = iq.Entry.objects.using(using)
        ready_queues: list[Any] = []
        for child in sorted(counts):  # the children's rows in id order, as every writer
            rows = entries.filter(pk=child)
            rows.update(blockers=F("blockers") - counts[child])
            released = rows.filter(state=EntryState.BLOCKED, blockers__lte=0)
            state = Case(
                When(run_at__gt=now, then=Value(EntryState.INITIAL.value)),
                default=Value(EntryState.PENDING.value),
            )
            if released.update(state=state):
                ready_queues.extend(
                    rows.filter(state=EntryState.PENDING).values_list("queue_id", flat=True)
                )
        notify_ready(using, ready_queues)

    def _fail_children(
        self, using: str, doomed: dict[int, int], failure: str, now: datetime, jobs: Any
    ) -> None:
        from django_iq.managers.attempts import Failure

        children = (
            iq.Entry.objects.using(using)
            .filter(pk__in=sorted(doomed))
            .order_by("pk")
            .select_for_update()
        )
        for child in children:
            parent = doomed[child.pk]
            iq.Entry.objects.end_attempt(
                child,
                Failure(
                    exception_class=PARENT_FAILED,
                    message=f"Parent entry {parent} {failure}; this entry waited for it "
                    "(using(after=...)) and does not run on a parent's failure.",
                    final=True,
                    ran=False,
                ),
                now=now,
                using=using,
                jobs=jobs,
            )
