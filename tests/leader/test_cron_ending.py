"""Schedules with no fire time to come, in process with time passed in: refused where they are
given (``save_cron_job``), ended cleanly where they are already stored (the leader's pass, a
worker's success write), armed again by a new schedule."""

from __future__ import annotations

import logging
import re
from datetime import UTC, datetime, timedelta

import pytest

from django_iq import operations
from django_iq.duties import CronDuty, PromotionDuty
from django_iq.exceptions import InvalidSchedule
from django_iq.leader import Leader
from django_iq.models import CronJob, Entry, EntryError, OperatorAction, Queue
from django_iq.registry import catalog
from tests.leader.test_cron_schedules import pass_at, run_due
from tests.leader.test_leader import cron_leader, settings_with

pytestmark = pytest.mark.django_db(transaction=True)

NOOP = "tests.testapp.jobs.noop"
T0 = datetime(2026, 5, 1, 12, 0, 0, tzinfo=UTC)
TICK = {"tick": {"job": NOOP, "schedule": "* * * * *"}}


def stored(name: str, **fields: object) -> CronJob:
    """A cron job stored with ``fields`` as rows written before schedules were checked (or by
    hand) are: updated past ``save()``, which would refuse them now."""
    Queue.objects.ensure("default", catalog)
    cron_job = CronJob.objects.create(
        name=name, schedule="* * * * *", job_name=NOOP, queue_id="default"
    )
    CronJob.objects.filter(pk=cron_job.pk).update(**fields)
    return CronJob.objects.get(pk=cron_job.pk)


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"schedule": "0 0 30 2 *"}, "'0 0 30 2 *' has no fire time after"),
        ({"schedule": "0 9 * * 1-5 0 2026"}, "is not a valid cron expression; use five fields"),
        ({"schedule": "0 9 * * 1-5 0"}, "is not a valid cron expression; use five fields"),
        (
            {"schedule": "", "run_once_at": datetime(1, 1, 1, tzinfo=UTC)},
            "is out of range; a run may be set from 1900-01-01 to 9000-01-01 UTC.",
        ),
        (
            {"schedule": "", "run_once_at": datetime(9999, 12, 31, 23, tzinfo=UTC)},
            "is out of range; a run may be set from 1900-01-01 to 9000-01-01 UTC.",
        ),
    ],
)
def test_save_cron_job_refuses_a_schedule_with_no_fire_time_and_writes_nothing(
    fields: dict[str, object], problem: str
) -> None:
    Queue.objects.ensure("default", catalog)
    cron_job = CronJob(name="bad", job_name=NOOP, queue_id="default", **fields)
    actor = operations.Actor.of_command("test")

    with pytest.raises(InvalidSchedule, match=re.escape(problem)):
        operations.save_cron_job(cron_job, [], actor, created=True)

    assert not CronJob.objects.exists() and not Entry.objects.exists()
    assert not OperatorAction.objects.exists()


def test_a_stored_schedule_whose_year_ran_out_ends_at_the_success_of_its_last_fire() -> None:
    last = T0 + timedelta(minutes=1)
    cron_job = stored("last", schedule=f"1 12 1 5 * 0 {T0.year}")
    leader = Leader(name="a", duties=[PromotionDuty(), CronDuty()], lease_seconds=30)
    pass_at([leader], T0)
    assert Entry.objects.get(cron_job=cron_job).run_at == last
    pass_at([leader], last)

    assert run_due(last, finished_at=last + timedelta(seconds=3)) == [last]

    cron_job.refresh_from_db()
    assert cron_job.last_outcome == "succeeded" and cron_job.is_done
    assert cron_job.ended_at == last + timedelta(seconds=3) and cron_job.next_run_at is None
    assert cron_job.end_reason == (
        f"'1 12 1 5 * 0 {T0.year}' has no fire time after {T0.year}-05-01 12:01:03 UTC."
    )
    assert cron_job.status(job_disabled=False) == "done"
    assert not Entry.objects.exists() and not EntryError.objects.exists()
    pass_at([leader], last + timedelta(minutes=5))
    assert not Entry.objects.exists(), "an ended cron job gets no entry"
    assert not CronJob.objects.run_now(cron_job, catalog), "nor runs now"


def test_a_stored_schedule_with_no_fire_time_ends_at_the_leaders_pass_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    never = stored("never", schedule="0 0 30 2 *")
    # Before the earliest time a run may be set for (MariaDB stores no year before 1000).
    ancient = stored("ancient", schedule="", run_once_at=datetime(1800, 1, 1, tzinfo=UTC))
    fine = stored("fine", schedule="* * * * *")
    leader = cron_leader("a")

    with caplog.at_level(logging.WARNING, logger="django_iq.cron"):
        for second in (0, 10, 20):
            pass_at([leader], T0 + timedelta(seconds=second))

    never.refresh_from_db()
    ancient.refresh_from_db()
    assert never.ended_at == T0 and never.end_reason == (
        "'0 0 30 2 *' has no fire time after 2026-05-01 12:00:00 UTC."
    )
    assert ancient.ended_at == T0 and "at (1800-01-01T00:00:00+00:00) is out of range" in (
        ancient.end_reason
    )
    assert [entry.cron_job_id for entry in Entry.objects.all()] == [fine.pk]
    ended = [r.getMessage() for r in caplog.records if "cron job ended" in r.getMessage()]
    assert len(ended) == 2, f"each logged once, not on every pass: {ended}"


def test_a_new_schedule_arms_an_ended_cron_job_again() -> None:
    cron_job = stored("never", schedule="0 0 30 2 *")
    pass_at([cron_leader("a")], T0)
    cron_job.refresh_from_db()
    assert cron_job.is_done

    cron_job.schedule = "0 3 * * *"
    operations.save_cron_job(
        cron_job, ["schedule"], operations.Actor.of_command("test"), created=False
    )

    cron_job.refresh_from_db()
    assert not cron_job.is_done and cron_job.end_reason == ""
    assert Entry.objects.get(cron_job=cron_job).run_at == cron_job.next_run_at


@settings_with(CRON={"tick": {"job": NOOP, "schedule": "0 0 30 2 *"}})
def test_a_refused_declaration_ends_its_stored_row_until_it_is_declared_valid_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    Queue.objects.ensure("default", catalog)
    CronJob.objects.create(
        name="tick", schedule="* * * * *", job_name=NOOP, queue_id="default", is_declared=True
    )
    leader = cron_leader("a")
    with caplog.at_level(logging.ERROR, logger="django_iq.cron"):
        for second in (0, 10):
            pass_at([leader], T0 + timedelta(seconds=second))

    tick = CronJob.objects.get(name="tick")
    assert tick.is_done and tick.schedule == "* * * * *", "the row keeps its last valid schedule"
    assert tick.end_reason.startswith(
        "DJANGO_IQ['CRON'] declares it with a schedule that cannot be used: '0 0 30 2 *' has no "
        "fire time after"
    )
    assert not Entry.objects.exists()
    refused = [r for r in caplog.records if "cron job refused name=tick" in r.getMessage()]
    assert len(refused) == 1, "refused once, not on every pass"

    # Declared as the row still is: armed again.
    with settings_with(CRON=TICK):
        pass_at([leader], T0 + timedelta(seconds=20))
    tick.refresh_from_db()
    assert not tick.is_done and Entry.objects.filter(cron_job=tick).count() == 1
