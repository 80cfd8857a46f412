"""Compaction (``compaction.compact`` over ``Entry.objects.compact_group``): which entries a
merge replaces, what the merged entry keeps, which groups it leaves alone, and what it counts."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from django_iq.compaction import compact, merging_jobs
from django_iq.exceptions import InvalidJobOptions, JobNotRegistered
from django_iq.managers.compaction import GROUP_LOCKED
from django_iq.models import Entry, QueueMinute, QueueTotal
from django_iq.states import EntryState
from tests.factories import CronJobFactory, EntryFactory, GroupLockFactory, QueueFactory
from tests.testapp.jobs import folds_to_a_set, invalidate, record, unfoldable

pytestmark = pytest.mark.django_db

INVALIDATE = "tests.testapp.jobs.invalidate"


def waiting(job_name: str = INVALIDATE) -> list[Entry]:
    return list(Entry.objects.filter(job_name=job_name).order_by("pk"))


def test_a_group_of_waiting_entries_becomes_one_entry_with_the_folded_arguments() -> None:
    invalidate.enqueue("o1", [1, 2])
    invalidate.enqueue(obj_id="o1", ids=[2, 3])
    invalidate.enqueue("o1", ids=[4], seconds=0.5)
    result = compact()
    (merged,) = waiting()
    assert merged.args == []
    # The fold saw each call bound through the signature, defaults filled, in enqueue order.
    assert merged.kwargs == {"obj_id": "o1", "ids": [1, 2, 3, 4], "seconds": 0.0}
    assert (merged.group_key, merged.lock_key, merged.state) == ("o1", "g:o1", "pending")
    assert [(len(c.replaced), c.entry_id) for c in result.merged] == [(3, merged.pk)]
    assert result.merged_away == 2


def test_the_merged_entry_keeps_the_highest_priority_and_the_earliest_times() -> None:
    now = timezone.now()
    first = invalidate.using(
        priority=-5, run_at=now + timedelta(hours=2), timeout=30, max_attempts=1
    ).enqueue("o1", [1])
    invalidate.using(priority=7, run_at=now + timedelta(hours=1), timeout=90).enqueue("o1", [2])
    invalidate.using(priority=3, run_at=now + timedelta(hours=3)).enqueue("o1", [3])
    compact(now=now)
    (merged,) = waiting()
    assert merged.priority == 7
    assert merged.enqueued_at == first.enqueued_at
    assert merged.run_at == now + timedelta(hours=1)
    assert merged.state == EntryState.INITIAL
    assert merged.max_attempts == 5  # the job's, whatever the entries had
    assert merged.timeout_seconds == 30  # the oldest entry's


def test_a_deferred_entry_merged_with_a_ready_one_makes_a_ready_entry() -> None:
    invalidate.using(run_at=timedelta(hours=1)).enqueue("o1", [1])
    invalidate.enqueue("o1", [2])
    compact()
    (merged,) = waiting()
    assert merged.state == EntryState.PENDING
    assert merged.run_at <= timezone.now()


def test_only_entries_of_the_same_job_queue_and_group_are_merged() -> None:
    invalidate.enqueue("o1", [1])
    invalidate.enqueue("o1", [2])
    invalidate.enqueue("o2", [3])
    other_queue = invalidate.using(queue="emails").enqueue("o1", [4])
    other_job = record.using(group_key="o1").enqueue("t")
    compact()
    groups = sorted((e.queue_id, e.group_key, e.kwargs.get("ids") or e.args[1]) for e in waiting())
    assert groups == [("default", "o1", [1, 2]), ("default", "o2", [3]), ("emails", "o1", [4])]
    assert Entry.objects.filter(pk__in=[other_queue.pk, other_job.pk]).count() == 2


def test_a_group_whose_lock_is_held_is_left_alone() -> None:
    entries = [invalidate.enqueue("o1", [n]) for n in range(3)]
    GroupLockFactory(entry_for_key=entries[0])
    result = compact()
    assert [e.pk for e in waiting()] == [e.pk for e in entries]
    assert result.merged == []
    assert result.skipped == {}  # a locked group is not even a candidate


def test_compact_group_refuses_a_group_locked_after_it_was_found() -> None:
    entries = [invalidate.enqueue("o1", [n]) for n in range(2)]
    (group,) = Entry.objects.compactable_groups([INVALIDATE])
    GroupLockFactory(entry_for_key=entries[0])
    done = Entry.objects.compact_group(group, lambda rows: {}, max_attempts=1, now=timezone.now())
    assert done == GROUP_LOCKED
    assert [e.pk for e in waiting()] == [e.pk for e in entries]


def test_disabled_entries_are_not_merged() -> None:
    invalidate.enqueue("o1", [1])
    disabled = invalidate.enqueue("o1", [2])
    Entry.objects.filter(pk=disabled.pk).update(state=EntryState.DISABLED)
    assert compact().merged == []
    assert len(waiting()) == 2


@pytest.mark.parametrize("kind", ["unique key", "cron job", "task result", "retried", "snoozed"])
def test_entries_held_by_something_else_or_that_ran_are_left_alone(kind: str) -> None:
    special: dict[str, Any] = {
        "unique key": {"unique_key": "u:1"},
        "cron job": {"cron_job": CronJobFactory(job_name=INVALIDATE)},
        "task result": {"result_id": "r" * 32},
        "retried": {"attempts": 1},
        "snoozed": {"snoozes": 1},
    }[kind]
    plain = [invalidate.enqueue("o1", [n]) for n in range(2)]
    kept = EntryFactory(job_name=INVALIDATE, args=["o1", [9]], group_key="o1", **special)
    compact()
    rows = waiting()
    assert kept.pk in [e.pk for e in rows], f"the {kind} entry must keep its row"
    merged = [e for e in rows if e.pk != kept.pk]
    assert [e.kwargs["ids"] for e in merged] == [[0, 1]]
    assert not {e.pk for e in plain} & {e.pk for e in rows}


def test_a_lone_waiting_entry_is_not_a_group_to_merge() -> None:
    invalidate.enqueue("o1", [1])
    EntryFactory(job_name=INVALIDATE, args=["o1", [2]], group_key="o1", attempts=2)
    assert compact().merged == []
    assert len(waiting()) == 2


def test_a_fold_that_raises_leaves_its_group_alone_and_the_pass_goes_on() -> None:
    bad = [unfoldable.enqueue("o1", [n]) for n in range(2)]
    invalidate.enqueue("o1", [1])
    invalidate.enqueue("o1", [2])
    result = compact()
    assert [e.pk for e in waiting(unfoldable.name)] == [e.pk for e in bad]
    assert result.skipped == {
        f"{unfoldable.name} default 'o1'": "merge raised ValueError: cannot fold these"
    }
    assert [e.kwargs["ids"] for e in waiting()] == [[1, 2]]
    assert QueueTotal.objects.get(queue="default").merged == 1


def test_a_fold_returning_what_json_cannot_store_leaves_its_group_alone() -> None:
    entries = [folds_to_a_set.enqueue("o1", [n]) for n in range(2)]
    result = compact(job=folds_to_a_set.name)
    assert [e.pk for e in waiting(folds_to_a_set.name)] == [e.pk for e in entries]
    (reason,) = result.skipped.values()
    assert reason.startswith(
        "merge returned arguments that cannot be enqueued: Unsupported type: <class 'set'>: "
        "job argument "
    ), reason


def test_merged_entries_are_counted_per_queue_and_minute() -> None:
    for obj in ("o1", "o2"):
        for n in range(3):
            invalidate.enqueue(obj, [n])
    invalidate.using(queue="emails").enqueue("o1", [1])
    invalidate.using(queue="emails").enqueue("o1", [2])
    assert compact().merged_away == 5
    assert QueueTotal.objects.merged_by_queue() == {"default": 4, "emails": 1}
    minutes = dict(QueueMinute.objects.values_list("queue", "merged"))
    assert minutes == {"default": 4, "emails": 1}


def test_a_pass_can_be_limited_to_a_queue_and_a_job() -> None:
    QueueFactory(name="emails")
    for queue in ("default", "emails"):
        for n in range(2):
            invalidate.using(queue=queue).enqueue("o1", [n])
    compact(queue="emails", job=INVALIDATE)
    assert sorted(Entry.objects.values_list("queue_id", flat=True)) == [
        "default",
        "default",
        "emails",
    ]


def test_a_pass_is_bounded_in_groups_and_entries_per_group() -> None:
    for obj in ("o1", "o2"):
        for n in range(3):
            invalidate.enqueue(obj, [n])
    result = compact(max_groups=1, max_entries=2)
    assert [len(c.replaced) for c in result.merged] == [2]
    assert Entry.objects.count() == 5


def test_only_jobs_with_merge_can_be_compacted_by_name() -> None:
    with pytest.raises(InvalidJobOptions, match="has no merge function"):
        merging_jobs(record.name)
    with pytest.raises(JobNotRegistered):
        merging_jobs("tests.testapp.jobs.nope")
    assert INVALIDATE in merging_jobs()
    assert record.name not in merging_jobs()
