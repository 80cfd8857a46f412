"""Entries: compaction (``Entry.objects.compactable_groups`` and ``compact_group``). The groups
whose waiting entries can be merged, and the merge of one group in one transaction under the
group's own lock (the fold itself is the caller's: ``django_iq.compaction`` binds the arguments
and calls the job's ``merge``).

What a merge may touch: waiting (``initial`` or ``pending``) entries of one job, queue and group
key that never ran (no attempt, no snooze), hold no unique key, belong to no cron job and to no
Django Tasks result. Entries with a unique key, a cron entry, a task's entry or one that ran
before keep their own row, since something outside the entry refers to it or counts on it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db import router
from django.db.models import Count, Exists, Min, OuterRef, Q

from django_iq.appmodels import iq
from django_iq.managers.common import atomic_retrying
from django_iq.managers.queue_metrics import QueueTally, minute_of
from django_iq.queries import insert_group_locks, notify_ready
from django_iq.states import WAITING, EntryState, group_lock_key

if TYPE_CHECKING:
    from django_iq.managers.entries import EntryManager
    from django_iq.models import Entry

# Entries a merge may replace: see the module docstring.
MERGEABLE = Q(
    state__in=WAITING,
    group_key__isnull=False,
    unique_key__isnull=True,
    cron_job__isnull=True,
    result_id__isnull=True,
    attempts=0,
    snoozes=0,
)


def _mergeable() -> Q:
    """``MERGEABLE``, less the parents of other entries (``using(after=...)``): a child waits
    for its own parent, which a merge would remove."""
    return MERGEABLE & ~Q(Exists(iq.EntryDependency.objects.filter(parent_id=OuterRef("pk"))))


# Why a group was left as it was.
GROUP_LOCKED = "its group lock is held: a worker is running the group"
TOO_FEW = "fewer than two waiting entries left to merge"


@dataclass(frozen=True)
class Group:
    """A job's waiting entries of one queue and group key, as a pass found them."""

    job_name: str
    queue: str
    group_key: str
    waiting: int
    first_id: int


@dataclass(frozen=True)
class Compacted:
    """One group merged: the entries it replaced (in enqueue order) and the entry now there."""

    group: Group
    replaced: list[int]
    entry_id: int

    @property
    def merged_away(self) -> int:
        """Entries fewer in the queue: a group of n entries became one."""
        return len(self.replaced) - 1


def compactable_groups(
    manager: EntryManager, job_names: Sequence[str], *, queue: str | None = None, limit: int = 100
) -> list[Group]:
    """Groups of ``job_names`` with two or more mergeable entries and no lock held, oldest
    first, at most ``limit``. A read without locks: ``compact_group`` checks again."""
    db = router.db_for_write(manager.model)
    rows = manager.on(db).filter(_mergeable(), job_name__in=list(job_names))
    if queue is not None:
        rows = rows.filter(queue_id=queue)
    found = (
        rows.exclude(Exists(iq.GroupLock.objects.filter(key=OuterRef("lock_key"))))
        .values("job_name", "queue_id", "group_key")
        .annotate(waiting=Count("pk"), first_id=Min("pk"))
        .filter(waiting__gte=2)
        .order_by("first_id")[:limit]
    )
    return [
        Group(
            str(row["job_name"]),
            str(row["queue_id"]),
            str(row["group_key"]),
            int(row["waiting"]),
            int(row["first_id"]),
        )
        for row in found
    ]


def compact_group(
    manager: EntryManager,
    group: Group,
    fold: Callable[[list[Entry]], dict[str, Any]],
    *,
    max_attempts: int,
    now: datetime,
    limit: int = 1000,
    limit_keys: Callable[[dict[str, Any]], tuple[str, str]] | None = None,
) -> Compacted | str:
    """Replace the group's mergeable entries (the oldest ``limit``) by one entry whose
    kwargs are ``fold(entries)``, in one transaction; return what was done, or why nothing
    was (``GROUP_LOCKED``, ``TOO_FEW``). An exception from ``fold`` rolls it all back and
    reaches the caller.

    The transaction first takes the group's lock as a claim does (``insert_group_locks``):
    if a worker holds it, the group is left alone; while this transaction holds it, no
    worker can claim the group. The entries are then read ``FOR UPDATE SKIP LOCKED``: one a
    claim locked just before (its lock insert now waits for this transaction) stays for that
    claim, and one committed after the read stays for the next pass. The merged entry keeps
    the highest priority, the earliest ``enqueued_at`` and ``run_at``, and the first
    entry's timeout; ``max_attempts`` is the job's; ``limit_keys(kwargs)`` gives its
    concurrency key and rate limit key (none: the empty keys). The lock is deleted before the commit,
    so the merged entry is claimable as soon as it is visible.
    """
    db = router.db_for_write(manager.model)
    lock_key = group_lock_key(group.group_key)

    def merge() -> Compacted | str:
        taken = insert_group_locks(db, {lock_key: group.first_id}, group.queue, None)
        if not taken:
            return GROUP_LOCKED
        members = list(
            manager.on(db)
            .filter(
                _mergeable(),
                job_name=group.job_name,
                queue_id=group.queue,
                group_key=group.group_key,
            )
            .order_by("pk")
            .select_for_update(skip_locked=True)[:limit]
        )
        if len(members) < 2:
            iq.GroupLock.objects.using(db).filter(pk=taken[lock_key]).delete()
            return TOO_FEW
        kwargs = fold(members)
        concurrency_key, rate_limit_key = limit_keys(kwargs) if limit_keys else ("", "")
        run_at = min(entry.run_at for entry in members)
        merged = manager.model(
            queue_id=group.queue,
            job_name=group.job_name,
            args=[],
            kwargs=kwargs,
            priority=max(entry.priority for entry in members),
            state=EntryState.INITIAL if run_at > now else EntryState.PENDING,
            group_key=group.group_key,
            lock_key=lock_key,
            run_at=run_at,
            max_attempts=max_attempts,
            enqueued_at=min(entry.enqueued_at for entry in members),
            timeout_seconds=members[0].timeout_seconds,
            concurrency_key=concurrency_key,
            rate_limit_key=rate_limit_key,
            # The merged call may start while any member could: the latest expiry, or none.
            expires_at=(
                None
                if any(m.expires_at is None for m in members)
                else max(m.expires_at for m in members if m.expires_at is not None)
            ),
        )
        replaced = [entry.pk for entry in members]
        manager.on(db).filter(pk__in=replaced).delete()
        merged.save(force_insert=True, using=db)
        iq.GroupLock.objects.using(db).filter(pk=taken[lock_key]).delete()
        if merged.state == EntryState.PENDING:
            notify_ready(db, [group.queue])
        tally = QueueTally(merged=len(replaced) - 1)
        iq.QueueMinute.objects.db_manager(db).record({(group.queue, minute_of(now)): tally})
        return Compacted(group, replaced, merged.pk)

    return atomic_retrying(db, merge, "compact")
