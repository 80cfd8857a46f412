"""The manager API against the real database: claim, outcomes, disable, stats, workers, locks."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from django_iq.exceptions import ProcessNameTaken, QueueNotFound
from django_iq.managers import Claim
from django_iq.models import DisabledJob, Entry, EntryError, GroupLock, Queue, RunOutcome, Worker
from tests.conftest import iq_settings_with
from tests.factories import (
    EntryErrorFactory,
    EntryFactory,
    GroupLockFactory,
    QueueFactory,
    WorkerFactory,
    complete,
)
from tests.testapp.jobs import flaky, record

pytestmark = pytest.mark.django_db


def claimed_ids(claims: list[Claim]) -> list[int]:
    return [entry.pk for claim in claims for entry in claim.entries]


def claim_one(worker: Worker | None = None, queue: str = "default") -> Claim:
    """Claim everything ready in ``queue``, which the test arranged to be exactly one claim."""
    (claim,) = Entry.objects.claim(worker, 10, queue)
    return claim


def fail(entry: Entry, lock_id: int | None, **overrides: Any) -> EntryError:
    options: dict[str, Any] = {
        "exception_class": "builtins.ValueError",
        "message": "boom",
        "traceback": "Traceback (most recent call last):\nValueError: boom\n",
        "retry_at": timezone.now() + timedelta(minutes=1),
        "worker_name": "host:1",
    }
    options.update(overrides)
    return Entry.objects.fail(entry, lock_id, **options)


# -- claim ------------------------------------------------------------------------------------


def test_claim_takes_the_highest_priority_first_then_the_oldest() -> None:
    low_1 = EntryFactory(priority=0)
    high_1 = EntryFactory(priority=50)
    low_2 = EntryFactory(priority=0)
    lowest = EntryFactory(priority=-100)
    high_2 = EntryFactory(priority=50)

    claims = Entry.objects.claim(WorkerFactory(), 10, "default")

    assert claimed_ids(claims) == [high_1.pk, high_2.pk, low_1.pk, low_2.pk, lowest.pk]
    assert all(len(claim.entries) == 1 for claim in claims)


def test_claim_takes_at_most_limit_entries_in_claim_order() -> None:
    EntryFactory(priority=1)
    top = EntryFactory(priority=9)
    second = EntryFactory(priority=5)

    claims = Entry.objects.claim(WorkerFactory(), 2, "default")

    assert claimed_ids(claims) == [top.pk, second.pk]
    assert Entry.objects.awaiting_compute().count() == 1


def test_claim_creates_one_group_lock_per_lock_key_held_by_the_worker() -> None:
    worker = WorkerFactory()
    first_a = EntryFactory(group_key="a")
    EntryFactory(group_key="b")
    EntryFactory(group_key="a")
    alone = EntryFactory()

    claims = Entry.objects.claim(worker, 10, "default")

    locks = {lock.key: lock for lock in GroupLock.objects.all()}
    assert set(locks) == {"g:a", "g:b", alone.lock_key}
    assert {claim.lock_key: claim.lock_id for claim in claims} == {
        key: lock.pk for key, lock in locks.items()
    }
    assert {lock.worker_id for lock in locks.values()} == {worker.pk}
    assert {lock.queue_id for lock in locks.values()} == {"default"}
    assert locks["g:a"].entry_id == first_a.pk, "the lock names the first entry of its claim"


def test_entries_sharing_a_group_key_come_in_one_claim_in_claim_order() -> None:
    first = EntryFactory(group_key="acct-1")
    other = EntryFactory(group_key="acct-2")
    urgent = EntryFactory(group_key="acct-1", priority=10)
    last = EntryFactory(group_key="acct-1")

    claims = Entry.objects.claim(WorkerFactory(), 10, "default")

    by_key = {claim.lock_key: [e.pk for e in claim.entries] for claim in claims}
    assert by_key == {"g:acct-1": [urgent.pk, first.pk, last.pk], "g:acct-2": [other.pk]}


def test_a_locked_group_is_not_claimed_again() -> None:
    EntryFactory(group_key="acct-1")
    Entry.objects.claim(WorkerFactory(), 10, "default")
    later = record.using(group_key="acct-1").enqueue("later")

    assert Entry.objects.claim(WorkerFactory(), 10, "default") == []
    assert list(Entry.objects.computing().filter(pk=later.pk)) == [later]


def test_claim_skips_entries_locked_by_another_worker() -> None:
    EntryFactory(locked=True)
    free = EntryFactory()

    claims = Entry.objects.claim(WorkerFactory(), 10, "default")

    assert claimed_ids(claims) == [free.pk]
    assert GroupLock.objects.count() == 2


def test_claim_without_a_worker_records_no_owner() -> None:
    EntryFactory()

    claim = claim_one()

    assert GroupLock.objects.get(pk=claim.lock_id).worker_id is None


def test_deferred_entries_are_not_claimed_until_promoted() -> None:
    deferred = EntryFactory(deferred=True)

    assert Entry.objects.claim(WorkerFactory(), 10, "default") == []
    Entry.objects.run_now([deferred.pk])
    assert claimed_ids(Entry.objects.claim(WorkerFactory(), 10, "default")) == [deferred.pk]


def test_claim_only_takes_entries_of_the_queue_asked_for() -> None:
    EntryFactory(queue=QueueFactory(name="emails"))
    mine = EntryFactory()

    assert claimed_ids(Entry.objects.claim(WorkerFactory(), 10, "default")) == [mine.pk]


def test_a_paused_queue_yields_nothing_until_resumed() -> None:
    entry = EntryFactory()
    Queue.objects.pause("default")

    assert Entry.objects.claim(WorkerFactory(), 10, "default") == []

    Queue.objects.resume("default")
    assert claimed_ids(Entry.objects.claim(WorkerFactory(), 10, "default")) == [entry.pk]


def test_claiming_from_a_queue_that_does_not_exist_yields_nothing() -> None:
    assert Entry.objects.claim(WorkerFactory(), 10, "no-such-queue") == []


def test_max_concurrency_caps_the_claims_running_at_once_in_a_queue() -> None:
    capped = QueueFactory(name="capped", max_concurrency=2)
    EntryFactory.create_batch(5, queue=capped)
    worker = WorkerFactory()

    first = Entry.objects.claim(worker, 10, "capped")
    assert len(first) == 2
    assert Entry.objects.claim(worker, 10, "capped") == [], "the cap is reached"

    done = first[0]
    complete(done.entries[0], done.lock_id)
    assert len(Entry.objects.claim(worker, 10, "capped")) == 1


# -- the claim's query count: the hot path of every scheduling pass --------------------------


def test_claim_costs_a_fixed_number_of_queries(django_assert_num_queries: Any) -> None:
    EntryFactory.create_batch(3, group_key="g")
    EntryFactory.create_batch(3)
    worker = WorkerFactory()

    # savepoint, queue row, the worker's row (a shared lock, only if the worker is live),
    # candidates (FOR UPDATE SKIP LOCKED), lock insert, release savepoint
    with django_assert_num_queries(6):
        claims = Entry.objects.claim(worker, 10, "default")

    assert len(claims) == 4


def test_claim_of_an_empty_queue_stops_after_the_candidate_query(
    django_assert_num_queries: Any,
) -> None:
    QueueFactory(name="default")
    worker = WorkerFactory()

    with django_assert_num_queries(5):
        assert Entry.objects.claim(worker, 10, "default") == []


# -- disable / enable -------------------------------------------------------------------------


def test_a_disabled_job_yields_nothing_including_entries_enqueued_while_disabled() -> None:
    before = record.enqueue("before")
    other = flaky.using(queue="default").enqueue("other", 0)

    assert Entry.objects.disable(record.name) == 1
    during = record.enqueue("during")

    assert set(Entry.objects.disabled().values_list("pk", flat=True)) == {before.pk, during.pk}
    assert during.state == "disabled"
    assert claimed_ids(Entry.objects.claim(WorkerFactory(), 10, "default")) == [other.pk]


def test_a_pending_entry_of_a_disabled_job_is_not_claimed() -> None:
    Entry.objects.disable(record.name)
    EntryFactory(job_name=record.name)  # written past the manager, e.g. by a migration

    assert Entry.objects.claim(WorkerFactory(), 10, "default") == []


def test_disabling_twice_keeps_one_marker() -> None:
    Entry.objects.disable(record.name)
    Entry.objects.disable(record.name)

    assert DisabledJob.objects.filter(job_name=record.name).count() == 1


def test_enable_restores_initial_or_pending_by_run_at_and_keeps_priority() -> None:
    due = record.using(priority=30).enqueue("due")
    later = record.using(priority=-7, run_at=timedelta(hours=1)).enqueue("later")
    Entry.objects.disable(record.name)
    during = record.using(priority=12).enqueue("during")

    assert Entry.objects.enable(record.name) == 3

    states = dict(Entry.objects.values_list("pk", "state"))
    assert states == {due.pk: "pending", later.pk: "initial", during.pk: "pending"}
    priorities = dict(Entry.objects.values_list("pk", "priority"))
    assert priorities == {due.pk: 30, later.pk: -7, during.pk: 12}
    assert not DisabledJob.objects.exists()
    assert record.enqueue("after").state == "pending"


# -- complete ---------------------------------------------------------------------------------


def test_complete_deletes_the_entry_and_its_lock() -> None:
    EntryFactory()
    claim = claim_one(WorkerFactory())

    assert complete(claim.entries[0], claim.lock_id) is True

    assert not Entry.objects.exists()
    assert not GroupLock.objects.exists()


def test_complete_without_a_lock_id_keeps_the_lock_for_the_rest_of_the_claim() -> None:
    EntryFactory.create_batch(2, group_key="g")
    claim = claim_one(WorkerFactory())

    assert complete(claim.entries[0], None) is True

    assert list(Entry.objects.values_list("pk", flat=True)) == [claim.entries[1].pk]
    assert GroupLock.objects.filter(pk=claim.lock_id).exists()


def test_complete_reports_a_lock_that_recovery_already_released() -> None:
    EntryFactory()
    claim = claim_one(WorkerFactory())
    GroupLock.objects.release([claim.lock_id])

    assert complete(claim.entries[0], claim.lock_id) is False
    assert not Entry.objects.exists()


# -- fail -------------------------------------------------------------------------------------


def test_fail_with_attempts_left_defers_the_entry_and_records_an_error() -> None:
    EntryFactory(max_attempts=3, args=["token"], kwargs={"seconds": 1}, priority=4)
    claim = claim_one(WorkerFactory())
    entry = claim.entries[0]
    now = timezone.now()
    retry_at = now + timedelta(seconds=30)

    error = fail(entry, claim.lock_id, retry_at=retry_at, now=now)

    stored = Entry.objects.get(pk=entry.pk)
    assert (stored.state, stored.run_at, stored.attempts) == ("initial", retry_at, 1)
    assert not GroupLock.objects.exists()
    assert EntryError.objects.get() == error
    assert (error.entry_id, error.queue_id, error.job_name) == (entry.pk, "default", entry.job_name)
    assert (error.args, error.kwargs, error.priority) == (["token"], {"seconds": 1}, 4)
    assert (error.attempt, error.max_attempts, error.is_final) == (1, 3, False)
    assert (error.exception_class, error.message) == ("builtins.ValueError", "boom")
    assert error.traceback.endswith("ValueError: boom\n")
    assert (error.worker_name, error.failed_at) == ("host:1", now)


def test_a_retried_entry_counts_each_attempt() -> None:
    EntryFactory(max_attempts=5)
    for attempt in (1, 2, 3):
        Entry.objects.promote_due(timezone.now() + timedelta(minutes=5))
        claim = claim_one(WorkerFactory())
        fail(claim.entries[0], claim.lock_id)
        assert Entry.objects.get().attempts == attempt

    assert list(EntryError.objects.order_by("attempt").values_list("attempt", flat=True)) == [
        1,
        2,
        3,
    ]


def test_the_final_failure_deletes_the_entry_and_keeps_a_final_error() -> None:
    EntryFactory(max_attempts=2, attempts=1)
    claim = claim_one(WorkerFactory())

    error = fail(claim.entries[0], claim.lock_id)

    assert not Entry.objects.exists()
    assert not GroupLock.objects.exists()
    assert (error.attempt, error.is_final) == (2, True)
    assert error.traceback == "Traceback (most recent call last):\nValueError: boom\n"
    assert list(EntryError.objects.failed()) == [error]


def test_a_failure_without_retry_at_is_final_even_with_attempts_left() -> None:
    EntryFactory(max_attempts=10)
    claim = claim_one(WorkerFactory())

    error = fail(claim.entries[0], claim.lock_id, retry_at=None)

    assert error.is_final and not Entry.objects.exists()


def test_an_oversized_traceback_is_truncated_to_the_limit_keeping_its_end() -> None:
    EntryFactory(max_attempts=1)
    claim = claim_one(WorkerFactory())
    traceback = "Traceback (most recent call last):\n" + "  frame\n" * 1000 + "ValueError: boom\n"

    with iq_settings_with(TRACEBACK_MAX_CHARS=1000):
        error = fail(claim.entries[0], claim.lock_id, traceback=traceback)

    stored = EntryError.objects.get(pk=error.pk).traceback
    assert len(stored) == 1000
    assert stored.startswith("... (truncated)\n")
    assert stored.endswith("  frame\nValueError: boom\n")


def test_a_traceback_at_the_limit_is_kept_whole() -> None:
    EntryFactory(max_attempts=1)
    claim = claim_one(WorkerFactory())
    traceback = "x" * 999 + "\n"

    with iq_settings_with(TRACEBACK_MAX_CHARS=1000):
        error = fail(claim.entries[0], claim.lock_id, traceback=traceback)

    assert EntryError.objects.get(pk=error.pk).traceback == traceback


def test_a_failure_message_with_characters_the_database_rejects_is_still_recorded() -> None:
    EntryFactory(max_attempts=1)
    claim = claim_one(WorkerFactory())

    error = fail(
        claim.entries[0],
        claim.lock_id,
        exception_class="mod.Bad\x00Name\udc80",
        message="bad byte \x00 and \ud800 here",
        traceback="Traceback\nValueError: bad byte \x00\n",
    )

    stored = EntryError.objects.get(pk=error.pk)
    assert stored.exception_class == "mod.Bad\\x00Name\\udc80"
    assert stored.message == "bad byte \\x00 and \\ud800 here"
    assert stored.traceback == "Traceback\nValueError: bad byte \\x00\n"
    assert RunOutcome.objects.get().exception_class == "mod.Bad\\x00Name\\udc80"
    assert not Entry.objects.exists()


def test_an_entry_disabled_while_it_ran_stays_disabled_after_a_failure() -> None:
    EntryFactory(job_name=record.name, max_attempts=3)
    claim = claim_one(WorkerFactory())
    Entry.objects.disable(record.name)

    fail(claim.entries[0], claim.lock_id)

    stored = Entry.objects.get()
    assert (stored.state, stored.attempts) == ("disabled", 1)


# -- requeue ----------------------------------------------------------------------------------


def test_requeue_creates_a_pending_entry_and_marks_the_error_requeued() -> None:
    error = EntryErrorFactory(
        args=["again"], kwargs={"seconds": 0}, priority=7, group_key="acct", max_attempts=4
    )

    (entry,) = EntryError.objects.requeue([error])

    stored = Entry.objects.get(pk=entry.pk)
    assert (stored.state, stored.queue_id, stored.job_name) == (
        "pending",
        "default",
        error.job_name,
    )
    assert (stored.args, stored.kwargs, stored.priority) == (["again"], {"seconds": 0}, 7)
    assert (stored.group_key, stored.lock_key) == ("acct", "g:acct")
    assert (stored.attempts, stored.max_attempts) == (0, 4)
    error.refresh_from_db()
    assert error.requeued_at is not None
    assert not EntryError.objects.failed().exists()


def test_requeue_skips_errors_already_requeued_or_not_final() -> None:
    error = EntryErrorFactory()
    EntryError.objects.requeue([error])
    retrying = EntryErrorFactory(is_final=False)

    assert EntryError.objects.requeue(EntryError.objects.all()) == []
    assert Entry.objects.count() == 1
    retrying.refresh_from_db()
    assert retrying.requeued_at is None


def test_requeue_of_a_disabled_job_gives_a_disabled_entry() -> None:
    Entry.objects.disable(record.name)
    error = EntryErrorFactory(job_name=record.name)

    (entry,) = EntryError.objects.requeue([error])

    assert Entry.objects.get(pk=entry.pk).state == "disabled"


# -- promote ----------------------------------------------------------------------------------


def test_promote_due_makes_deferred_entries_whose_time_has_come_pending() -> None:
    now = timezone.now()
    due = EntryFactory(deferred=True, run_at=now - timedelta(seconds=1))
    exactly = EntryFactory(deferred=True, run_at=now)
    later = EntryFactory(deferred=True, run_at=now + timedelta(seconds=1))

    assert Entry.objects.promote_due(now) == 2

    states = dict(Entry.objects.values_list("pk", "state"))
    assert states == {due.pk: "pending", exactly.pk: "pending", later.pk: "initial"}


def test_promote_due_takes_at_most_limit_entries_oldest_run_at_first() -> None:
    now = timezone.now()
    newer = EntryFactory(deferred=True, run_at=now - timedelta(seconds=1))
    older = EntryFactory(deferred=True, run_at=now - timedelta(seconds=2))

    assert Entry.objects.promote_due(now, limit=1) == 1

    assert list(Entry.objects.pending()) == [older]
    assert list(Entry.objects.initial()) == [newer]


def test_promote_due_leaves_disabled_entries_alone() -> None:
    EntryFactory(disabled=True, run_at=timezone.now() - timedelta(hours=1))

    assert Entry.objects.promote_due() == 0


# -- queues -----------------------------------------------------------------------------------


def test_stats_count_every_state_per_queue() -> None:
    default = QueueFactory(name="default")
    EntryFactory(deferred=True)
    EntryFactory.create_batch(2)  # awaiting compute
    running = EntryFactory(group_key="busy", locked=True)
    EntryFactory(group_key="busy")  # waits behind its group's lock: computing
    EntryFactory(disabled=True)
    EntryErrorFactory.create_batch(2, queue=default)  # failed
    EntryErrorFactory(queue=default, requeued_at=timezone.now())
    EntryErrorFactory(queue=default, is_final=False)
    QueueFactory(name="reports", is_paused=True)

    stats = {s.queue: s for s in Queue.objects.stats()}

    assert sorted(stats) == ["default", "reports"]
    counts = stats["default"]
    assert (counts.initial, counts.pending, counts.disabled) == (1, 4, 1)
    assert (counts.computing, counts.awaiting_compute, counts.failed) == (2, 2, 2)
    assert counts.invariant_holds and not counts.is_paused
    empty = stats["reports"]
    assert empty.is_paused
    assert (empty.initial, empty.pending, empty.computing, empty.failed) == (0, 0, 0, 0)
    assert GroupLock.objects.get().key == running.lock_key


def test_stats_can_be_limited_to_some_queues() -> None:
    EntryFactory(queue=QueueFactory(name="emails"))
    EntryFactory()

    stats = Queue.objects.stats(["emails"])

    assert [(s.queue, s.pending) for s in stats] == [("emails", 1)]


def test_stats_in_a_fixed_number_of_queries(django_assert_num_queries: Any) -> None:
    EntryFactory.create_batch(3)
    EntryFactory(queue=QueueFactory(name="emails"))

    # Stored states, pending entries by their lock, locks by their entries, failures, queues.
    with django_assert_num_queries(5):
        assert len(Queue.objects.stats()) == 2


def test_pause_and_resume_report_whether_anything_changed() -> None:
    QueueFactory(name="default")

    assert Queue.objects.pause("default") == 1
    assert Queue.objects.pause("default") == 0
    assert Queue.objects.get(name="default").is_paused
    assert Queue.objects.resume("default") == 1
    assert Queue.objects.resume("default") == 0
    assert not Queue.objects.get(name="default").is_paused


def test_pausing_an_unknown_queue_raises_queue_not_found() -> None:
    with pytest.raises(QueueNotFound, match=r"^Queue 'nope' does not exist\.$"):
        Queue.objects.pause("nope")


# -- workers ----------------------------------------------------------------------------------


def register(name: str = "host:1") -> Worker:
    return Worker.objects.register(
        name=name, role="worker", host="host", pid=1, queues=["default"], processing_threads=4
    )


def test_register_records_the_process() -> None:
    worker = register()

    stored = Worker.objects.get(pk=worker.pk)
    assert (stored.name, stored.role, stored.host, stored.pid) == ("host:1", "worker", "host", 1)
    assert (stored.queues, stored.processing_threads, stored.stopped_at) == (["default"], 4, None)
    assert list(Worker.objects.live()) == [stored]


def test_registering_a_name_again_replaces_its_stopped_row() -> None:
    old = register()
    Worker.objects.mark_stopped(Worker.objects.filter(pk=old.pk), died=True)

    new = register()

    assert list(Worker.objects.values_list("pk", flat=True)) == [new.pk]
    assert new.pk != old.pk and new.stopped_at is None


def test_a_stopped_row_naming_sessions_to_end_is_neither_replaced_nor_pruned() -> None:
    # A process that exited at once with runs going on named its sessions in its row: whoever
    # releases its locks ends them first, so the row must stay until then.
    old = register()
    Worker.objects.mark_stopped(Worker.objects.filter(pk=old.pk), died=True)
    Worker.objects.filter(pk=old.pk).update(sessions=[[4242, 1.5]])
    Worker.objects.filter(pk=old.pk).update(stopped_at=timezone.now() - timedelta(days=30))

    with pytest.raises(ProcessNameTaken, match=r"names database sessions still to be ended"):
        register()
    assert Worker.objects.prune(60, 100) == 0

    assert Worker.objects.get().sessions == [[4242, 1.5]]
    Worker.objects.filter(pk=old.pk).update(sessions=[])
    assert Worker.objects.prune(60, 100) == 1


def test_registering_the_name_of_a_running_process_is_refused_and_leaves_it_alone() -> None:
    running = register()
    EntryFactory()
    claim = claim_one(running)

    with pytest.raises(
        ProcessNameTaken, match=r"^A running process is already registered as 'host:1'"
    ):
        register()

    assert list(Worker.objects.live()) == [running]
    assert GroupLock.objects.get(pk=claim.lock_id).worker_id == running.pk


def test_a_dead_process_is_marked_by_its_name_not_by_a_host_and_pid_it_shares() -> None:
    # Two containers with one host name, each worker PID 1 in its own.
    crashed = register("node:1:aaaaaaaaaaaa")
    other = register("node:1:bbbbbbbbbbbb")
    assert (crashed.host, crashed.pid) == (other.host, other.pid)

    assert Worker.objects.mark_process_dead(crashed.name) == 1

    assert Worker.objects.get(pk=crashed.pk).died
    assert list(Worker.objects.live()) == [other]


def test_heartbeat_records_load_and_held_locks() -> None:
    worker = register()

    assert Worker.objects.heartbeat(
        worker,
        busy_threads=3,
        cpu_percent=55.5,
        memory_percent=40.0,
        is_throttled=True,
        held_lock_ids=lambda: [9, 2],
    )

    stored = Worker.objects.get(pk=worker.pk)
    assert (stored.busy_threads, stored.cpu_percent, stored.memory_percent) == (3, 55.5, 40.0)
    assert (stored.is_throttled, stored.held_lock_ids) == (True, [2, 9])
    assert stored.held_at == stored.heartbeat_at, "the report is stamped in database time"


def test_stop_marks_the_worker_stopped_and_orphans_its_locks() -> None:
    worker = register()
    EntryFactory()
    claim = claim_one(worker)

    Worker.objects.stop(worker)

    stored = Worker.objects.get(pk=worker.pk)
    assert stored.stopped_at is not None and stored.busy_threads == 0 and not stored.died
    assert GroupLock.objects.get(pk=claim.lock_id).worker_id is None
    assert not Worker.objects.live().exists()
    beat = Worker.objects.heartbeat(
        worker, busy_threads=0, cpu_percent=0, memory_percent=0, is_throttled=False
    )
    assert beat is False, "a stopped worker's heartbeat tells it to stop"


def test_heartbeat_of_a_deleted_worker_returns_false() -> None:
    worker = register()
    Worker.objects.filter(pk=worker.pk).delete()

    beat = Worker.objects.heartbeat(
        worker, busy_threads=0, cpu_percent=0, memory_percent=0, is_throttled=False
    )
    assert beat is False


def test_live_excludes_workers_silent_for_longer_than_the_limit() -> None:
    register("fresh")
    WorkerFactory(name="silent", heartbeat_at=timezone.now() - timedelta(hours=1))

    assert list(Worker.objects.live(60).values_list("name", flat=True)) == ["fresh"]
    assert list(Worker.objects.silent(60).values_list("name", flat=True)) == ["silent"]


# -- locks ------------------------------------------------------------------------------------


def test_release_deletes_the_locks_so_their_entries_are_claimable_again() -> None:
    EntryFactory.create_batch(2, group_key="g")
    worker = WorkerFactory()
    claim = claim_one(worker)
    other_lock = GroupLockFactory()

    assert GroupLock.objects.release([claim.lock_id]) == 1

    assert list(GroupLock.objects.all()) == [other_lock]
    again = Entry.objects.claim(worker, 10, "default")
    assert claimed_ids(again) == [e.pk for e in claim.entries]


def test_release_of_nothing_is_a_no_op(django_assert_num_queries: Any) -> None:
    with django_assert_num_queries(0):
        assert GroupLock.objects.release([]) == 0


def test_adopt_takes_only_locks_that_have_no_worker() -> None:
    EntryFactory.create_batch(3)
    old, new, other = WorkerFactory(), WorkerFactory(), WorkerFactory()
    mine = claim_one_each(old, 2)
    theirs = Entry.objects.claim(other, 1, "default")
    Worker.objects.mark_stopped(Worker.objects.filter(pk=old.pk), died=True)

    taken = GroupLock.objects.adopt([c.lock_id for c in mine + theirs], new)

    assert taken == 2
    assert set(GroupLock.objects.filter(worker=new).values_list("pk", flat=True)) == {
        c.lock_id for c in mine
    }
    assert GroupLock.objects.get(pk=theirs[0].lock_id).worker_id == other.pk


def claim_one_each(worker: Worker, count: int) -> list[Claim]:
    claims = Entry.objects.claim(worker, count, "default")
    assert len(claims) == count
    return claims
