"""The leader in this process, with time passed in: election, fencing, cron, recovery, pruning."""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection, connections, transaction
from django.test import override_settings
from django.utils import timezone

from django_iq import operations
from django_iq.duties import CronDuty, Fence, PromotionDuty, PruningDuty, RecoveryDuty
from django_iq.exceptions import LeadershipLost
from django_iq.leader import Leader
from django_iq.models import (
    Batch,
    CronJob,
    Entry,
    EntryError,
    GroupLock,
    JobStart,
    LeaderLease,
    OperatorAction,
    Queue,
    Worker,
)
from django_iq.schedule import next_fire_time, validate_schedule
from tests.conftest import wait_until
from tests.factories import EntryErrorFactory, EntryFactory, WorkerFactory, complete
from tests.testapp.jobs import record

pytestmark = pytest.mark.django_db(transaction=True)

CRON = {"tick": {"job": "tests.testapp.jobs.noop", "schedule": "*/1 * * * *"}}


def settings_with(**overrides: object) -> override_settings:
    from django.conf import settings

    return override_settings(DJANGO_IQ={**settings.DJANGO_IQ, **overrides})


def cron_leader(name: str) -> Leader:
    return Leader(name=name, duties=[PromotionDuty(), CronDuty()], lease_seconds=30)


def test_only_one_of_two_candidates_is_elected() -> None:
    first, second = cron_leader("a"), cron_leader("b")

    assert first.run_once().is_leader
    assert not second.run_once().is_leader
    lease = LeaderLease.objects.current()
    assert lease is not None and lease.holder == first.name and lease.epoch == 1


def test_a_standby_takes_over_an_expired_lease_and_the_old_leader_cannot_write() -> None:
    old = Leader(name="old", duties=[], lease_seconds=0.3)
    new = Leader(name="new", duties=[], lease_seconds=30)
    assert old.run_once().is_leader

    wait_until(lambda: new.run_once().is_leader, timeout=10, message="the standby to take over")

    assert new.epoch == 2
    with pytest.raises(LeadershipLost, match="lost the lease"):
        with old.fence():
            Queue.objects.ensure("reports")
    assert not Queue.objects.filter(name="reports").exists(), (
        "a fenced write of a stale leader rolls back"
    )
    assert not old.is_leader


def test_released_lease_is_taken_at_once() -> None:
    leader, standby = cron_leader("a"), cron_leader("b")
    leader.run_once()
    leader._step_down()

    assert standby.run_once().is_leader


@settings_with(CRON=CRON)
def test_cron_fires_once_per_minute_with_two_leaders_and_completion_creates_the_next_entry() -> (
    None
):
    leaders = [cron_leader("a"), cron_leader("b")]
    start = datetime(2026, 5, 1, 12, 0, 30, tzinfo=UTC)
    fired = []
    for minute in range(6):
        now = start + timedelta(minutes=minute)
        for leader in leaders:
            leader._last_run.clear()
            leader.run_once(now)
        entries = list(Entry.objects.filter(cron_job__name="tick"))
        assert len(entries) == 1, f"exactly one entry per cron job, minute {minute}: {entries}"
        due = now + timedelta(seconds=31)
        for leader in leaders:
            leader._last_run.clear()
            leader.run_once(due)
        claims = Entry.objects.claim(None, 10, "default")
        assert len(claims) == 1, f"one run per minute boundary, minute {minute}"
        (entry,) = claims[0].entries
        fired.append(entry.run_at)
        complete(entry, claims[0].lock_id, now=due)

    assert fired == [datetime(2026, 5, 1, 12, 1 + m, tzinfo=UTC) for m in range(6)]
    cron_job = CronJob.objects.get(name="tick")
    assert cron_job.last_run_at is not None and cron_job.next_run_at == datetime(
        2026, 5, 1, 12, 7, tzinfo=UTC
    )
    assert Entry.objects.filter(cron_job=cron_job, state="initial").count() == 1


@settings_with(CRON=CRON)
def test_missed_fires_run_once_not_once_per_missed_minute() -> None:
    leader = cron_leader("a")
    start = datetime(2026, 5, 1, 12, 0, 30, tzinfo=UTC)
    leader.run_once(start)
    later = start + timedelta(minutes=10)

    leader._last_run.clear()
    leader.run_once(later)
    claims = Entry.objects.claim(None, 10, "default")
    assert len(claims) == 1
    complete(claims[0].entries[0], claims[0].lock_id, now=later)

    (following,) = Entry.objects.filter(cron_job__name="tick")
    assert following.state == "initial"
    assert following.run_at == datetime(2026, 5, 1, 12, 11, tzinfo=UTC)


@settings_with(CRON=CRON)
def test_a_disabled_cron_job_has_no_runnable_entry_and_does_not_fire() -> None:
    leader = cron_leader("a")
    now = datetime(2026, 5, 1, 12, 0, 30, tzinfo=UTC)
    leader.run_once(now)
    CronJob.objects.filter(name="tick").update(is_enabled=False)

    leader._last_run.clear()
    leader.run_once(now + timedelta(minutes=3))

    assert not Entry.objects.filter(cron_job__name="tick").exists()
    assert Entry.objects.claim(None, 10, "default") == []


def test_invalid_cron_expression_is_refused_when_saved() -> None:
    Queue.objects.ensure("default")
    with pytest.raises(ValueError, match="'every minute' is not a valid cron expression"):
        CronJob.objects.create(
            name="bad",
            schedule="every minute",
            job_name="tests.testapp.jobs.noop",
            queue_id="default",
        )
    with pytest.raises(ValueError, match="'Mars/Olympus' is not a known time zone"):
        validate_schedule("* * * * *", "Mars/Olympus")


def test_next_fire_time_follows_the_cron_job_time_zone() -> None:
    after = datetime(2026, 1, 1, 6, 30, tzinfo=UTC)
    assert next_fire_time("0 9 * * *", "Europe/Paris", after) == datetime(
        2026, 1, 1, 8, 0, tzinfo=UTC
    )


def recovery_leader() -> Leader:
    return Leader(name="recovery", duties=[RecoveryDuty()], lease_seconds=30)


def claimed_by(worker: Worker, token: str, max_attempts: int = 3, priority: int = 0) -> GroupLock:
    record.using(max_attempts=max_attempts, priority=priority).enqueue(token)
    (claim,) = Entry.objects.claim(worker, 1, "default")
    return GroupLock.objects.get(pk=claim.lock_id)


@settings_with(WORKER_SILENT_AFTER_SECONDS=0.2)
def test_recovery_unlocks_the_entry_of_a_silent_worker_and_counts_the_attempt() -> None:
    worker = Worker.objects.register(
        name="w:1", role="worker", host="h", pid=1, queues=[], processing_threads=1
    )
    lock = claimed_by(worker, "silent", priority=20)
    wait_until(lambda: Worker.objects.silent(0.2).exists(), message="the worker to fall silent")

    result = recovery_leader().run_once()

    assert result.ran["recovery"].recovered == {lock.key: "retry"}
    entry = Entry.objects.get()
    assert entry.attempts == 1 and entry.priority == 10 and entry.state == "pending"
    assert Entry.objects.awaiting_compute().count() == 1
    error = EntryError.objects.get()
    assert error.exception_class == "django_iq.exceptions.WorkerLost"
    assert "Worker w:1 was found dead: last heartbeat at" in error.message
    marked = Worker.objects.get(pk=worker.pk)
    assert marked.stopped_at is not None and marked.died


@settings_with(WORKER_SILENT_AFTER_SECONDS=0.2)
def test_recovery_logs_lock_ids_never_group_keys(caplog: pytest.LogCaptureFixture) -> None:
    worker = Worker.objects.register(
        name="w:9", role="worker", host="h", pid=9, queues=[], processing_threads=1
    )
    record.using(group_key="customer:alice@example.com").enqueue("grouped")
    (claim,) = Entry.objects.claim(worker, 1, "default")
    wait_until(lambda: Worker.objects.silent(0.2).exists(), message="the worker to fall silent")

    with caplog.at_level(logging.DEBUG, logger="django_iq"):
        result = recovery_leader().run_once()

    assert list(result.ran["recovery"].recovered.values()) == ["retry"]
    assert f"recovered lock={claim.lock_id} " in caplog.text
    assert "alice@example.com" not in caplog.text
    assert "alice@example.com" not in EntryError.objects.get().message


def test_recovery_leaves_a_live_busy_worker_alone() -> None:
    worker = Worker.objects.register(
        name="w:2", role="worker", host="h", pid=2, queues=[], processing_threads=1
    )
    lock = claimed_by(worker, "busy")
    Worker.objects.heartbeat(
        worker,
        busy_threads=1,
        cpu_percent=1,
        memory_percent=1,
        is_throttled=False,
        held_lock_ids=[lock.pk],
    )
    # As if the lock had been taken long before this report.
    GroupLock.objects.filter(pk=lock.pk).update(locked_at=timezone.now() - timedelta(minutes=5))

    result = recovery_leader().run_once()

    assert result.ran["recovery"].recovered == {}
    assert GroupLock.objects.filter(pk=lock.pk).exists()
    assert Entry.objects.computing().count() == 1


def test_recovery_releases_a_lock_a_live_worker_no_longer_reports_without_counting_an_attempt() -> (
    None
):
    worker = Worker.objects.register(
        name="w:3", role="worker", host="h", pid=3, queues=[], processing_threads=1
    )
    lock = claimed_by(worker, "forgotten")
    Worker.objects.heartbeat(
        worker,
        busy_threads=0,
        cpu_percent=1,
        memory_percent=1,
        is_throttled=False,
        held_lock_ids=[],
    )
    # As if the lock had been taken long before this report.
    GroupLock.objects.filter(pk=lock.pk).update(locked_at=timezone.now() - timedelta(minutes=5))

    result = recovery_leader().run_once()

    assert result.ran["recovery"].recovered == {lock.key: "released"}
    entry = Entry.objects.get()
    assert (entry.attempts, entry.state) == (0, "pending"), "the worker never ran it: no attempt"
    assert not EntryError.objects.exists()
    assert Entry.objects.awaiting_compute().count() == 1


def test_an_entry_that_keeps_losing_its_worker_decays_then_fails_with_a_reason() -> None:
    leader = recovery_leader()
    for attempt in range(1, 4):
        worker = WorkerFactory()
        if Entry.objects.first() is None:
            lock = claimed_by(worker, "poison", max_attempts=3, priority=15)
        else:
            (claim,) = Entry.objects.claim(worker, 1, "default")
            lock = GroupLock.objects.get(pk=claim.lock_id)
        Worker.objects.stop(worker)
        leader._last_run.clear()
        outcome = leader.run_once().ran["recovery"].recovered[lock.key]
        assert outcome == ("failed" if attempt == 3 else "retry")

    assert Entry.objects.count() == 0
    errors = list(
        EntryError.objects.order_by("attempt").values_list("attempt", "priority", "is_final")
    )
    assert errors == [(1, 15, False), (2, 5, False), (3, -5, True)]
    (stats,) = [s for s in Queue.objects.stats() if s.queue == "default"]
    assert stats.failed == 1


@settings_with(ERROR_RETENTION_SECONDS=3600, WORKER_RETENTION_SECONDS=3600)
def test_pruning_removes_only_records_past_their_time_to_live() -> None:
    now = timezone.now()
    old_error = EntryErrorFactory(failed_at=now - timedelta(hours=2))
    new_error = EntryErrorFactory(failed_at=now - timedelta(minutes=5))
    long_gone = WorkerFactory(stopped_at=now - timedelta(hours=2))
    recently_stopped = WorkerFactory(stopped_at=now - timedelta(minutes=5))
    running = WorkerFactory()
    leader = Leader(name="pruner", duties=[PruningDuty()], lease_seconds=30)

    result = leader.run_once(now).ran["pruning"]

    assert (result.errors, result.workers) == (1, 1)
    assert set(EntryError.objects.values_list("pk", flat=True)) == {new_error.pk}
    assert not EntryError.objects.filter(pk=old_error.pk).exists()
    assert set(Worker.objects.exclude(role="leader").values_list("pk", flat=True)) == {
        recently_stopped.pk,
        running.pk,
    }
    assert not Worker.objects.filter(pk=long_gone.pk).exists()


@settings_with(OUTCOME_RETENTION_SECONDS=3600)
def test_pruning_removes_batches_whose_callback_ended_past_their_time_to_live() -> None:
    now = timezone.now()
    old = now - timedelta(hours=2)
    done = Batch.objects.create(on_complete="j", completed_at=old, closed_at=old)
    cancelled = Batch.objects.create(on_complete="j", closed_at=old)
    recent = Batch.objects.create(on_complete="j", completed_at=now, closed_at=now)
    waiting = EntryFactory(state="blocked", blockers=1)
    retrying = Batch.objects.create(
        on_complete="j", completed_at=old, closed_at=old, callback_entry_id=waiting.pk
    )
    never_closed = Batch.objects.create(on_complete="j", created_at=old)
    leader = Leader(name="pruner", duties=[PruningDuty()], lease_seconds=30)

    result = leader.run_once(now).ran["pruning"]

    assert result.batches == 2
    assert not Batch.objects.filter(pk__in=[done.pk, cancelled.pk]).exists()
    assert set(Batch.objects.values_list("pk", flat=True)) == {
        recent.pk,
        retrying.pk,
        never_closed.pk,
    }


@settings_with(AUDIT_RETENTION_SECONDS=86_400)
def test_pruning_removes_audit_records_past_their_time_to_live() -> None:
    now = timezone.now()
    actor = operations.Actor.of_command("iq_pause")
    operations.pause(["default"], actor)
    operations.resume(["default"], actor)
    old, recent = OperatorAction.objects.order_by("pk")
    OperatorAction.objects.filter(pk=old.pk).update(at=now - timedelta(days=2))
    leader = Leader(name="pruner", duties=[PruningDuty()], lease_seconds=30)

    result = leader.run_once(now).ran["pruning"]

    assert result.audit == 1
    assert list(OperatorAction.objects.values_list("pk", flat=True)) == [recent.pk]


def test_pruning_removes_rate_limited_starts_older_than_a_day() -> None:
    now = timezone.now()
    JobStart.objects.create(job_name="j", started_at=now - timedelta(days=2))
    recent = JobStart.objects.create(job_name="j", started_at=now - timedelta(hours=2))
    leader = Leader(name="pruner", duties=[PruningDuty()], lease_seconds=30)

    result = leader.run_once(now).ran["pruning"]

    assert result.starts == 1
    assert list(JobStart.objects.values_list("pk", flat=True)) == [recent.pk]


@pytest.mark.skipif(
    connection.vendor == "sqlite", reason="SQLite writers wait on the file, not on rows"
)
@settings_with(ERROR_RETENTION_SECONDS=3600, WORKER_RETENTION_SECONDS=3600)
def test_pruning_skips_and_reports_a_table_it_cannot_prune_and_prunes_the_others() -> None:
    now = timezone.now()
    stuck_error = EntryErrorFactory(failed_at=now - timedelta(hours=2))
    long_gone = WorkerFactory(stopped_at=now - timedelta(hours=2))
    holding, release = threading.Event(), threading.Event()

    def hold_the_error_row() -> None:
        with transaction.atomic():
            list(EntryError.objects.select_for_update().filter(pk=stuck_error.pk))
            holding.set()
            release.wait(30)
        connections.close_all()

    holder = threading.Thread(target=hold_the_error_row)
    holder.start()
    try:
        assert holding.wait(10)
        # A lease of 3 s: the leader waits 1 s for a row lock before it gives the table up.
        result = Leader(name="pruner", duties=[PruningDuty()], lease_seconds=3).run_once(now)
    finally:
        release.set()
        holder.join()

    pruned = result.ran["pruning"]
    assert set(pruned.skipped) == {"errors"}
    assert "OperationalError" in pruned.skipped["errors"]
    assert pruned.workers == 1 and not Worker.objects.filter(pk=long_gone.pk).exists()
    assert EntryError.objects.filter(pk=stuck_error.pk).exists()


_BOUNDS_BY_VENDOR = {
    "postgresql": "SELECT current_setting('lock_timeout'), "
    "current_setting('idle_in_transaction_session_timeout')",
    "mysql": "SELECT @@SESSION.innodb_lock_wait_timeout, @@SESSION.idle_transaction_timeout",
}


def _bounds() -> tuple[str, str]:
    with connection.cursor() as cursor:
        cursor.execute(_BOUNDS_BY_VENDOR[connection.vendor])
        lock, idle = cursor.fetchone()
    return str(lock), str(idle)


@pytest.mark.skipif(connection.vendor == "sqlite", reason="SQLite has no lock or idle timeouts")
def test_the_fence_bounds_lock_waits_and_idleness_and_on_postgresql_only_its_transaction() -> None:
    leader = Leader(name="bounded", duties=[], lease_seconds=3)
    leader.run_once()
    before = _bounds()

    with leader.fence():
        inside = _bounds()
    after = _bounds()

    if connection.vendor == "postgresql":
        # Transaction-local: nothing is left on the connection for whoever uses it next (a
        # pooler in transaction mode hands it to another client).
        assert (before, inside, after) == (("0", "0"), ("1s", "3s"), ("0", "0"))
    else:
        # MariaDB's session variables (no transaction-local form), set again in each fence.
        assert inside == after == ("1", "3")


class BrokenDuty:
    """A duty that raises on every pass until it is mended."""

    name = "broken"
    interval_seconds = 0.0

    def __init__(self) -> None:
        self.mended = False

    def run_once(self, now: datetime, fence: Fence) -> str:
        if not self.mended:
            raise RuntimeError("this duty cannot run")
        return "ran"


@settings_with(CRON=CRON)
def test_a_failing_duty_is_logged_at_most_once_a_minute_and_the_duties_after_it_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    broken = BrokenDuty()
    leader = Leader(name="a", duties=[broken, CronDuty()], lease_seconds=30)
    start = datetime(2026, 5, 1, 12, 0, 0, tzinfo=UTC)
    passes = []

    with caplog.at_level(logging.INFO, logger="django_iq.leader"):
        for second in (0, 1, 2, 30, 59, 60, 61):
            leader._last_run.clear()
            passes.append(leader.run_once(start + timedelta(seconds=second)))
        broken.mended = True
        leader._last_run.clear()
        mended = leader.run_once(start + timedelta(seconds=62))

    assert all(p.is_leader and isinstance(p.failed["broken"], RuntimeError) for p in passes)
    assert all("cron" in p.ran for p in passes), "the cron duty ran in every pass"
    assert Entry.objects.filter(cron_job__name="tick").count() == 1
    failures = [r for r in caplog.records if "leader duty failed" in r.getMessage()]
    assert [r.getMessage() for r in failures] == [
        f"leader duty failed name={leader.name} duty=broken",
        f"leader duty failed name={leader.name} duty=broken (4 more failures since the last "
        "report)",
    ]
    assert all(r.exc_info and "this duty cannot run" in str(r.exc_info[1]) for r in failures)
    assert mended.ran["broken"] == "ran" and not mended.failed
    recovered = f"leader duty recovered name={leader.name} duty=broken"
    assert any(recovered == r.getMessage() for r in caplog.records)
