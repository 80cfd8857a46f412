"""``iq_cron`` through call_command: the list, enable, disable and run now."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from django.core.management import CommandError
from django.utils import timezone

from django_iq import operations
from django_iq.models import (
    CronJob,
    Entry,
)
from tests.conftest import iq_settings_with
from tests.factories import (
    CronJobFactory,
)
from tests.ops.conftest import NOOP, run, timestamp

pytestmark = pytest.mark.django_db


# -- iq_cron ---------------------------------------------------------------------------------


def test_cron_list_prints_a_table_of_cron_jobs() -> None:
    CronJobFactory(
        name="nightly", schedule="0 3 * * *", next_run_at=datetime(2030, 1, 1, 3, tzinfo=UTC)
    )
    CronJobFactory(name="weekly", schedule="0 4 * * 1", disabled=True)

    lines = run("iq_cron", "list").splitlines()

    assert lines[0].split() == [
        "NAME",
        "SCHEDULE",
        "TIMEZONE",
        "JOB",
        "QUEUE",
        "STATUS",
        "ENTRY",
        "NEXT",
        "RUN",
        "LAST",
        "RUN",
        "LAST",
        "OUTCOME",
    ]
    assert lines[1].split() == [
        "nightly",
        "0",
        "3",
        "*",
        "*",
        "*",
        "UTC",
        NOOP,
        "default",
        "enabled",
        "-",
        "2030-01-01",
        "03:00:00",
        "UTC",
        "-",
        "-",
    ]
    assert lines[2].split()[:2] == ["weekly", "0"]
    assert lines[2].split()[-6:] == ["default", "disabled", "-", "-", "-", "-"]


def test_cron_list_shows_intervals_one_offs_a_disabled_job_and_the_last_outcome() -> None:
    CronJobFactory(name="often", schedule="", every_seconds=5400, last_outcome="failed")
    CronJobFactory(
        name="once",
        schedule="",
        run_once_at=datetime(2030, 1, 1, 9, tzinfo=UTC),
        fired_at=datetime(2030, 1, 1, 9, tzinfo=UTC),
        job_name="tests.testapp.jobs.record",
        args=["x"],
        last_outcome="succeeded",
    )
    operations.disable([NOOP], operations.Actor.of_command("test"))

    lines = run("iq_cron", "list").splitlines()

    assert lines[1].split() == [
        "often",
        "every",
        "1h30m",
        "UTC",
        NOOP,
        "default",
        "enabled,",
        "job",
        "disabled",
        "-",
        "-",
        "-",
        "failed",
    ]
    assert lines[2].split()[:5] == ["once", "once", "at", "2030-01-01", "09:00:00"]
    assert lines[2].split()[-6:] == ["default", "done", "-", "-", "-", "succeeded"]


def test_cron_list_shows_an_ended_schedule_as_done_with_its_reason() -> None:
    reason = "'0 0 30 2 *' has no fire time after 2026-05-01 12:00:00 UTC."
    cron_job = CronJobFactory(name="never", schedule="0 3 * * *")
    CronJob.objects.filter(pk=cron_job.pk).update(
        schedule="0 0 30 2 *", ended_at=datetime(2026, 5, 1, 12, tzinfo=UTC), end_reason=reason
    )

    lines = run("iq_cron", "list").splitlines()
    document = json.loads(run("iq_cron", "list", "--json"))

    assert f"  done    -      ended: {reason}  -" in lines[1], lines[1]
    (row,) = document["cron_jobs"]
    assert row["is_done"] and row["end_reason"] == reason
    assert row["ended_at"] == "2026-05-01T12:00:00Z"


def test_cron_list_json_matches_the_database() -> None:
    nightly = CronJobFactory(name="nightly")
    CronJob.objects.schedule_next(nightly, timezone.now(), max_attempts=3)
    nightly.refresh_from_db()

    document = json.loads(run("iq_cron", "list", "--json"))

    (row,) = document["cron_jobs"]
    assert row == {
        "name": "nightly",
        "schedule": "*/5 * * * *",
        "every_seconds": None,
        "at": None,
        "timezone": "UTC",
        "job": NOOP,
        "queue": "default",
        "priority": 0,
        "is_enabled": True,
        "is_declared": False,
        "is_done": False,
        "job_disabled": False,
        "entry_state": "initial",
        "next_run_at": row["next_run_at"],
        "fired_at": None,
        "ended_at": None,
        "end_reason": None,
        "last_run_at": None,
        "last_outcome": None,
        "last_entry_id": None,
    }
    assert nightly.next_run_at is not None
    assert timestamp(row["next_run_at"]) == nightly.next_run_at


def test_cron_list_with_no_cron_jobs_says_where_to_declare_them() -> None:
    assert run("iq_cron", "list") == (
        'No cron jobs. Declare them in DJANGO_IQ["CRON"] or in the admin.\n'
    )


def test_cron_enable_and_disable_change_only_what_needs_changing() -> None:
    CronJobFactory(name="nightly")
    CronJobFactory(name="weekly", disabled=True)

    assert run("iq_cron", "disable", "nightly", "weekly") == (
        "Disabled 1 cron job: nightly. Skipped 1, already disabled: weekly.\n"
    )
    assert dict(CronJob.objects.values_list("name", "is_enabled")) == {
        "nightly": False,
        "weekly": False,
    }
    assert (
        run("iq_cron", "enable", "nightly", "weekly") == "Enabled 2 cron jobs: nightly, weekly.\n"
    )
    assert set(CronJob.objects.values_list("is_enabled", flat=True)) == {True}


def test_cron_run_now_makes_the_waiting_entry_pending() -> None:
    nightly = CronJobFactory(name="nightly")
    CronJob.objects.schedule_next(nightly, timezone.now(), max_attempts=3)

    assert run("iq_cron", "run-now", "nightly") == "Made pending now 1 cron job: nightly.\n"
    assert Entry.objects.pending().get().cron_job_id == nightly.pk
    assert run("iq_cron", "run-now", "nightly") == (
        "Made pending now 0 cron jobs. Skipped 1, disabled, done, or already pending or running: nightly.\n"
    )


def test_cron_run_now_refuses_a_disabled_cron_job() -> None:
    CronJobFactory(name="nightly", disabled=True)

    with pytest.raises(CommandError) as raised:
        run("iq_cron", "run-now", "nightly")

    assert str(raised.value) == (
        "Disabled cron job nightly cannot run; enable first: manage.py iq_cron enable nightly"
    )
    assert not Entry.objects.exists()


def test_cron_refuses_unknown_names_with_a_suggestion() -> None:
    CronJobFactory(name="nightly")

    with pytest.raises(CommandError) as raised:
        run("iq_cron", "disable", "nightly", "nighty")

    assert str(raised.value) == (
        "'nighty' is not a cron job (did you mean 'nightly'?). Cron jobs: nightly."
    )
    assert CronJob.objects.get().is_enabled, "nothing changes when one name is wrong"


def test_cron_explains_a_declared_cron_job_the_leader_has_not_created() -> None:
    with iq_settings_with(CRON={"tick": {"job": NOOP, "schedule": "* * * * *"}}):
        with pytest.raises(CommandError) as raised:
            run("iq_cron", "enable", "tick")

    assert str(raised.value) == (
        "'tick' is declared in DJANGO_IQ[\"CRON\"] but the leader has not created it yet "
        "(is manage.py runleader running?). Cron jobs: none."
    )


def test_cron_needs_an_action() -> None:
    with pytest.raises(CommandError, match="the following arguments are required: ACTION"):
        run("iq_cron")
