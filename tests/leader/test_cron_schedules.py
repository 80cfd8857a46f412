"""Interval and one-off cron jobs driven through the leader with time passed in: fire times on
the interval's grid, no backlog after downtime, a one-off that fires once across leaders."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import pytest
from django.db import IntegrityError, router, transaction

from django_iq import operations
from django_iq.duties import CronDuty
from django_iq.exceptions import LeadershipLost
from django_iq.leader import Leader
from django_iq.models import CronJob, Entry, EntryError, Queue
from django_iq.registry import catalog
from tests.conftest import wait_until
from tests.factories import complete
from tests.leader.test_leader import cron_leader, settings_with

pytestmark = pytest.mark.django_db(transaction=True)

NOOP = "tests.testapp.jobs.noop"
T0 = datetime(2026, 5, 1, 12, 0, 0, tzinfo=UTC)
EVERY_10S = {"often": {"job": NOOP, "every": timedelta(seconds=10)}}
AT = T0 + timedelta(seconds=30)
ONCE = {"once": {"job": NOOP, "at": AT}}


def pass_at(leaders: list[Leader], now: datetime) -> None:
    """One pass of every duty of each leader, at ``now``."""
    for leader in leaders:
        leader._last_run.clear()
        leader.run_once(now)


def run_due(now: datetime, finished_at: datetime | None = None) -> list[datetime]:
    """Claim what is pending, complete it at ``finished_at``; return the fire times run."""
    fired = []
    for claim in Entry.objects.claim(None, 10, "default"):
        for entry in claim.entries:
            fired.append(entry.run_at)
            complete(entry, claim.lock_id, now=finished_at or now)
    return fired


@settings_with(CRON=EVERY_10S)
def test_an_interval_fires_on_its_grid_however_late_each_run_ends() -> None:
    leader = cron_leader("a")
    pass_at([leader], T0)
    fired = []
    for _ in range(5):
        (entry,) = Entry.objects.filter(cron_job__name="often")
        pass_at([leader], entry.run_at)
        # Each run ends 3 s after its fire time: the next fire must not move by those 3 s.
        fired += run_due(entry.run_at, finished_at=entry.run_at + timedelta(seconds=3))

    assert fired == [T0 + timedelta(seconds=10 * n) for n in range(1, 6)], (
        "interval fires follow the grid of the first fire, not the end of each run"
    )
    assert CronJob.objects.get(name="often").next_run_at == T0 + timedelta(seconds=60)


@settings_with(CRON=EVERY_10S)
def test_an_interval_skips_the_fires_missed_while_down_instead_of_running_a_backlog() -> None:
    leader = cron_leader("a")
    pass_at([leader], T0)  # first fire at T0 + 10 s
    back = T0 + timedelta(seconds=105)  # nothing ran for 95 s: 9 fires missed

    pass_at([leader], back)
    fired = run_due(back)

    assert fired == [T0 + timedelta(seconds=10)], "the overdue fire runs once"
    (following,) = Entry.objects.filter(cron_job__name="often")
    assert (following.state, following.run_at) == ("initial", T0 + timedelta(seconds=110))
    pass_at([leader], back + timedelta(seconds=1))
    assert run_due(back + timedelta(seconds=1)) == [], "no backlog of missed fires"


@settings_with(CRON=ONCE)
def test_a_one_off_fires_once_with_two_leaders_and_is_then_done() -> None:
    leaders = [cron_leader("a"), cron_leader("b")]
    pass_at(leaders, T0)
    cron_job = CronJob.objects.get(name="once")
    assert not Entry.objects.filter(cron_job=cron_job).exists(), "no entry before its time"
    assert cron_job.next_run_at == AT

    pass_at(leaders, AT + timedelta(seconds=1))
    fired = run_due(AT + timedelta(seconds=1))
    for minute in range(1, 4):
        pass_at(leaders, AT + timedelta(minutes=minute))
        fired += run_due(AT + timedelta(minutes=minute))

    assert fired == [AT]
    cron_job.refresh_from_db()
    assert cron_job.is_done and cron_job.fired_at == AT + timedelta(seconds=1)
    assert (cron_job.last_outcome, cron_job.next_run_at) == ("succeeded", None)
    assert not Entry.objects.filter(cron_job=cron_job).exists()


@settings_with(CRON=ONCE)
def test_a_one_off_does_not_fire_again_after_a_failover() -> None:
    first = Leader(name="first", duties=[CronDuty()], lease_seconds=0.5)
    second = Leader(name="second", duties=[CronDuty()], lease_seconds=30)
    pass_at([first], AT)
    (entry,) = Entry.objects.filter(cron_job__name="once")

    wait_until(lambda: second.run_once(AT).is_leader, timeout=10, message="the failover")
    for later in (AT, AT + timedelta(minutes=5)):
        pass_at([second], later)
        assert list(Entry.objects.filter(cron_job__name="once")) == [entry]
    Entry.objects.run_now([entry.pk])
    run_due(AT + timedelta(minutes=5))
    pass_at([second], AT + timedelta(minutes=6))

    assert not Entry.objects.filter(cron_job__name="once").exists()
    with pytest.raises(LeadershipLost):
        with first.fence():
            pass  # the deposed leader can write nothing, a second fire included


@settings_with(CRON=ONCE)
def test_a_one_offs_fire_and_its_done_mark_are_one_transaction() -> None:
    Queue.objects.ensure("default", catalog)

    @contextmanager
    def fence_lost_at_commit() -> Iterator[None]:
        with transaction.atomic(using=router.db_for_write(Entry)):
            yield
            raise LeadershipLost("lease taken over before the commit")

    with pytest.raises(LeadershipLost):
        CronDuty().run_once(AT + timedelta(seconds=1), fence_lost_at_commit)

    assert not CronJob.objects.exists() and not Entry.objects.exists()
    CronDuty().run_once(AT + timedelta(seconds=1), _plain_fence)
    cron_job = CronJob.objects.get(name="once")
    assert cron_job.fired_at is not None
    assert Entry.objects.filter(cron_job=cron_job).count() == 1


@contextmanager
def _plain_fence() -> Iterator[None]:
    with transaction.atomic(using=router.db_for_write(Entry)):
        yield


@settings_with(CRON={"once": {"job": NOOP, "at": T0 - timedelta(days=1)}})
def test_a_one_off_declared_in_the_past_fires_at_the_first_pass() -> None:
    leader = cron_leader("a")
    pass_at([leader], T0)  # the cron duty fires it
    pass_at([leader], T0)  # the promotion duty makes it pending

    assert run_due(T0) == [T0 - timedelta(days=1)]


@settings_with(CRON=ONCE)
def test_run_now_fires_a_one_off_early_once() -> None:
    pass_at([cron_leader("a")], T0)
    cron_job = CronJob.objects.get(name="once")

    assert CronJob.objects.run_now(cron_job, catalog, now=T0)
    run_due(T0)
    cron_job.refresh_from_db()

    assert cron_job.is_done
    assert not CronJob.objects.run_now(cron_job, catalog, now=T0), "a done one-off is refused"
    pass_at([cron_leader("a")], AT + timedelta(seconds=5))
    assert not Entry.objects.filter(cron_job=cron_job).exists()


def test_a_new_time_in_settings_arms_a_done_one_off_again() -> None:
    leader = cron_leader("a")
    with settings_with(CRON=ONCE):
        pass_at([leader], AT)
        pass_at([leader], AT)
        assert run_due(AT) == [AT]
    later = AT + timedelta(hours=1)
    with settings_with(CRON={"once": {"job": NOOP, "at": later}}):
        pass_at([leader], AT + timedelta(minutes=1))
        assert CronJob.objects.get(name="once").next_run_at == later
        pass_at([leader], later)
        pass_at([leader], later)
        assert run_due(later) == [later]


@settings_with(
    CRON={
        "fails": {
            "job": "tests.testapp.jobs.always_fails",
            "args": ["no"],
            "every": timedelta(minutes=1),
        }
    }
)
def test_a_final_failure_is_the_last_outcome_and_the_interval_goes_on() -> None:
    leader = cron_leader("a")
    pass_at([leader], T0)
    due = T0 + timedelta(minutes=1)
    pass_at([leader], due)
    (claim,) = Entry.objects.claim(None, 10, "default")
    (entry,) = claim.entries
    Entry.objects.fail(
        entry,
        claim.lock_id,
        exception_class="builtins.ValueError",
        message="no",
        traceback="",
        retry_at=None,
        now=due,
    )

    cron_job = CronJob.objects.get(name="fails")
    assert (cron_job.last_outcome, cron_job.last_entry_id) == ("failed", entry.pk)
    assert EntryError.objects.filter(entry_id=cron_job.last_entry_id, is_final=True).exists()
    (following,) = Entry.objects.filter(cron_job=cron_job)
    assert following.run_at == T0 + timedelta(minutes=2)


def test_an_edited_interval_starts_its_grid_afresh() -> None:
    Queue.objects.ensure("default", catalog)
    cron_job = CronJob.objects.create(
        name="often", every_seconds=60, job_name=NOOP, queue_id="default"
    )
    CronJob.objects.reschedule(cron_job, catalog, now=T0)
    assert Entry.objects.get(cron_job=cron_job).run_at == T0 + timedelta(minutes=1)

    cron_job.every_seconds = 3600
    CronJob.objects.save_edited(cron_job, ["every_seconds"], catalog, created=False)

    (entry,) = Entry.objects.filter(cron_job=cron_job)
    assert entry.run_at - CronJob.objects.get(pk=cron_job.pk).next_run_at == timedelta(0)
    assert entry.run_at > T0 + timedelta(minutes=59)


def test_the_database_refuses_a_row_with_two_schedules_or_a_zero_interval() -> None:
    Queue.objects.ensure("default", catalog)
    cron_job = CronJob.objects.create(
        name="tick", schedule="* * * * *", job_name=NOOP, queue_id="default"
    )
    with pytest.raises(IntegrityError), transaction.atomic():
        CronJob.objects.filter(pk=cron_job.pk).update(every_seconds=60)
    with pytest.raises(IntegrityError), transaction.atomic():
        CronJob.objects.filter(pk=cron_job.pk).update(schedule="", every_seconds=0)
    with pytest.raises(IntegrityError), transaction.atomic():
        CronJob.objects.filter(pk=cron_job.pk).update(schedule="")
    assert CronJob.objects.get(pk=cron_job.pk).schedule == "* * * * *"


def test_saving_a_cron_job_with_two_schedules_is_refused_with_the_reason() -> None:
    Queue.objects.ensure("default", catalog)
    with pytest.raises(ValueError, match=r"exactly one of schedule .* got schedule, every"):
        CronJob.objects.create(
            name="both", schedule="* * * * *", every_seconds=5, job_name=NOOP, queue_id="default"
        )
    assert not CronJob.objects.exists()


@settings_with(CRON=ONCE)
def test_disabling_and_enabling_a_done_one_off_does_not_fire_it_again() -> None:
    leader = cron_leader("a")
    pass_at([leader], AT)
    pass_at([leader], AT)
    assert run_due(AT) == [AT]
    actor = operations.Actor.of_command("test")
    operations.set_cron_enabled([CronJob.objects.get(name="once")], False, actor)
    pass_at([leader], AT + timedelta(minutes=1))
    operations.set_cron_enabled([CronJob.objects.get(name="once")], True, actor)

    for minute in (2, 3):
        pass_at([leader], AT + timedelta(minutes=minute))
        assert run_due(AT + timedelta(minutes=minute)) == []
    assert not Entry.objects.exists()
    assert CronJob.objects.get(name="once").status(job_disabled=False) == "done"
