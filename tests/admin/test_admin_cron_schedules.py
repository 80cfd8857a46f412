"""Cron jobs of every kind added and edited through the admin pages (checked, saved through the
operations layer, audited, entry re-timed), who may do it, and what the list shows: next
fires, last run and outcome, a job switched off; in a bounded number of queries."""

from __future__ import annotations

import html
from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.admin.models import ADDITION, LogEntry
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_iq import operations
from django_iq.models import CronJob, Entry, OperatorAction
from django_iq.registry import catalog
from tests.admin.conftest import change_url, changelist_url, column, login, login_superuser
from tests.admin.test_admin_cron import NOOP, form
from tests.factories import CronJobFactory, QueueFactory, complete

pytestmark = pytest.mark.django_db

ADD_URL = "/admin/django_iq/cronjob/add/"


def form_errors(response: object) -> dict[str, list[str]]:
    form = response.context["adminform"].form  # type: ignore[attr-defined]
    return {field: list(messages) for field, messages in form.errors.items()}


def test_an_interval_is_added_as_a_duration_and_gets_its_entry_and_an_audit_record(
    client: Client,
) -> None:
    QueueFactory(name="default")
    login_superuser(client)
    before = timezone.now()

    response = client.post(ADD_URL, form(schedule="", every_seconds="00:05:00"))

    assert response.status_code == 302
    cron_job = CronJob.objects.get(name="nightly")
    entry = Entry.objects.get(cron_job=cron_job)
    assert (cron_job.schedule, cron_job.every_seconds) == ("", 300)
    assert before + timedelta(minutes=5) <= entry.run_at <= timezone.now() + timedelta(minutes=5)
    assert cron_job.next_run_at == entry.run_at
    (action,) = OperatorAction.objects.all()
    assert (action.door, action.actor, action.action) == ("admin", "root", "add_cron")
    assert action.target == "cron job nightly: every 5m"
    assert LogEntry.objects.get().action_flag == ADDITION


def test_a_one_off_is_added_with_its_time_and_waits_for_it_without_an_entry(
    client: Client,
) -> None:
    QueueFactory(name="default")
    login_superuser(client)

    response = client.post(
        ADD_URL, form(schedule="", run_once_at_0="2030-01-01", run_once_at_1="09:00:00")
    )

    assert response.status_code == 302
    cron_job = CronJob.objects.get(name="nightly")
    assert cron_job.run_once_at == datetime(2030, 1, 1, 9, tzinfo=UTC)
    assert cron_job.next_run_at == cron_job.run_once_at
    assert not Entry.objects.exists(), "a one-off gets its entry when its time comes"


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        (
            {"every_seconds": "00:05:00"},
            "__all__",
            "A cron job needs exactly one of schedule (a cron expression), every (an interval) "
            "and at (one time); got schedule, every.",
        ),
        (
            {"schedule": ""},
            "__all__",
            "A cron job needs exactly one of schedule (a cron expression), every (an interval) "
            "and at (one time); got none.",
        ),
        (
            {"schedule": "", "every_seconds": "00:00:01.5"},
            "every_seconds",
            "every (0:00:01.500000) must be whole seconds, e.g. timedelta(seconds=90).",
        ),
        (
            {"schedule": "", "every_seconds": "400 00:00:00"},
            "every_seconds",
            "every (400 days, 0:00:00) must be from 1 second to 366 days.",
        ),
        (
            {"timezone": "Mars/Olympus"},
            "timezone",
            "'Mars/Olympus' is not a known time zone, e.g. 'UTC' or 'Europe/Paris'.",
        ),
        (
            {"job_name": "tests.testapp.jobs.record", "kwargs": '{"colour": "red"}'},
            "__all__",
            "tests.testapp.jobs.record cannot be called with args [] and kwargs "
            "{'colour': 'red'}: missing a required argument: 'token'. Its signature is "
            "record(token: 'str', group_key: 'str' = '', seconds: 'float' = 0.0) -> 'str'.",
        ),
        (
            {"priority": "101"},
            "priority",
            "Ensure this value is less than or equal to 100.",
        ),
        (
            {"queue": "nowhere"},
            "queue",
            "Select a valid choice. That choice is not one of the available choices.",
        ),
    ],
)
def test_bad_input_is_refused_with_the_reason_and_nothing_is_written(
    client: Client, changes: dict[str, str], field: str, message: str
) -> None:
    assert refused(client, changes)[field] == [message]


def refused(client: Client, changes: dict[str, str]) -> dict[str, list[str]]:
    """Post the add form with ``changes``; check it is shown again (not a 500) and nothing was
    written; return its errors by field."""
    QueueFactory(name="default")
    login_superuser(client)

    response = client.post(ADD_URL, form(**changes))

    assert response.status_code == 200
    assert not CronJob.objects.exists() and not Entry.objects.exists()
    assert not OperatorAction.objects.exists()
    return form_errors(response)


@pytest.mark.parametrize(
    ("changes", "field", "fragment"),
    [
        ({"schedule": "0 0 30 2 *"}, "schedule", "'0 0 30 2 *' has no fire time after "),
        (
            {"schedule": "0 9 * * 1-5 0 2026"},
            "schedule",
            "is not a valid cron expression; use five",
        ),
        ({"schedule": "* * * * * *"}, "schedule", "is not a valid cron expression; use five"),
        ({"schedule": "@daily"}, "schedule", "is not a valid cron expression; use five"),
        (
            {"schedule": "", "run_once_at_0": "0001-01-01", "run_once_at_1": "09:00:00"},
            "run_once_at",
            "is out of range; a run may be set from 1900-01-01 to 9000-01-01 UTC.",
        ),
        (
            {"schedule": "", "run_once_at_0": "9999-12-31", "run_once_at_1": "09:00:00"},
            "run_once_at",
            "is out of range; a run may be set from 1900-01-01 to 9000-01-01 UTC.",
        ),
        ({"args": "[" * 100_000 + "]" * 100_000}, "args", "nested too deeply"),
        ({"kwargs": '{"n": ' + "9" * 5000 + "}"}, "kwargs", "Enter valid JSON: Exceeds the limit"),
    ],
)
def test_a_schedule_with_no_fire_time_and_unreadable_arguments_are_refused_not_a_500(
    client: Client, changes: dict[str, str], field: str, fragment: str
) -> None:
    (error,) = refused(client, changes)[field]
    assert fragment in error


def test_editing_an_interval_re_times_its_waiting_entry_and_is_audited(client: Client) -> None:
    QueueFactory(name="default")
    login_superuser(client)
    client.post(ADD_URL, form(schedule="", every_seconds="00:05:00"))
    cron_job = CronJob.objects.get(name="nightly")

    response = client.post(change_url(cron_job), form(schedule="", every_seconds="1:00:00"))

    assert response.status_code == 302
    (entry,) = Entry.objects.filter(cron_job=cron_job)
    assert entry.run_at > timezone.now() + timedelta(minutes=59)
    assert CronJob.objects.get(pk=cron_job.pk).next_run_at == entry.run_at
    edit = OperatorAction.objects.get(action="edit_cron")
    assert edit.message == "Changed 1 cron job: nightly (every_seconds)."


def test_an_unchanged_interval_is_not_re_timed(client: Client) -> None:
    QueueFactory(name="default")
    login_superuser(client)
    client.post(ADD_URL, form(schedule="", every_seconds="00:05:00"))
    cron_job = CronJob.objects.get(name="nightly")
    before = Entry.objects.get(cron_job=cron_job)

    client.post(change_url(cron_job), form(schedule="", every_seconds="00:05:00", priority="5"))

    after = Entry.objects.get(cron_job=cron_job)
    assert (after.run_at, after.priority) == (before.run_at, 5), "only the priority changed"


def test_a_staff_user_without_the_change_permission_can_look_but_not_add_or_edit(
    client: Client,
) -> None:
    cron_job = CronJobFactory()
    login(client, "view_cronjob")

    page = client.get(change_url(cron_job))
    edit = client.post(change_url(cron_job), form(name=cron_job.name, schedule="1 1 * * *"))
    add = client.post(ADD_URL, form(name="other"))

    assert page.status_code == 200 and 'name="schedule"' not in page.content.decode()
    assert (edit.status_code, add.status_code) == (403, 403)
    assert list(CronJob.objects.values_list("name", "schedule")) == [(cron_job.name, "*/5 * * * *")]
    assert not OperatorAction.objects.exists()


def test_a_staff_user_with_the_change_permission_can_edit(client: Client) -> None:
    cron_job = CronJobFactory()
    login(client, "view_cronjob", "change_cronjob")

    response = client.post(change_url(cron_job), form(name=cron_job.name, schedule="1 1 * * *"))

    assert response.status_code == 302
    assert CronJob.objects.get(pk=cron_job.pk).schedule == "1 1 * * *"
    assert OperatorAction.objects.get().actor == "operator"


def test_the_list_shows_next_fires_last_run_last_outcome_and_a_disabled_job(
    client: Client,
) -> None:
    QueueFactory(name="default")
    at = datetime(2030, 1, 1, 9, tzinfo=UTC)
    CronJobFactory(
        name="a-interval",
        schedule="",
        every_seconds=90,
        next_run_at=datetime(2030, 1, 1, 0, 0, 30, tzinfo=UTC),
    )
    one_off = CronJobFactory(name="b-once", schedule="", run_once_at=at)
    CronJob.objects.reschedule(one_off, catalog)
    assert CronJob.objects.run_now(one_off, catalog)
    (claim,) = Entry.objects.claim(None, 10, "default")
    complete(claim.entries[0], claim.lock_id)
    CronJobFactory(name="c-other-job", job_name="tests.testapp.jobs.record", args=["x"])
    operations.disable([NOOP], operations.Actor.of_command("test"))
    login_superuser(client)

    response = client.get(changelist_url(CronJob))

    assert column(response, "schedule_text") == [
        "every 1m30s",
        "once at 2030-01-01 09:00:00 UTC",
        "*/5 * * * *",
    ]
    assert column(response, "status") == ["enabled, job disabled", "done, job disabled", "enabled"]
    assert column(response, "next_run")[:2] == ["2030-01-01", "done"]
    assert (
        'title="Next runs: 2030-01-01 00:00:30 UTC, 2030-01-01 00:02:00 UTC, '
        '2030-01-01 00:03:30 UTC, 2030-01-01 00:05:00 UTC"' in response.content.decode()
    )
    one_off.refresh_from_db()
    assert column(response, "last_outcome_link") == ["-", "succeeded", "-"]
    assert (
        f'href="/admin/django_iq/runoutcome/?entry_id={one_off.last_entry_id}"'
        in response.content.decode()
    )
    assert column(response, "last_run")[1] != "-"


def test_the_change_page_shows_the_job_disabled_and_the_last_outcome(client: Client) -> None:
    cron_job = CronJobFactory(last_outcome="failed", last_entry_id=42)
    operations.disable([NOOP], operations.Actor.of_command("test"))
    login_superuser(client)

    page = client.get(change_url(cron_job)).content.decode()

    assert "enabled,<br>job disabled" in page
    assert 'href="/admin/django_iq/entryerror/?entry_id=42">failed</a>' in page


def test_the_changelist_takes_as_many_queries_for_many_cron_jobs_as_for_one(
    client: Client,
) -> None:
    QueueFactory(name="default")
    login_superuser(client)

    def queries_for_list() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert client.get(changelist_url(CronJob)).status_code == 200
        return len(captured)

    CronJobFactory(last_outcome="succeeded", last_entry_id=1)
    one = queries_for_list()
    for n in range(10):
        CronJobFactory(every_seconds=60 + n, schedule="", last_outcome="failed", last_entry_id=n)
    many = queries_for_list()

    assert many == one, "a changelist query per row: annotate it in get_queryset instead"


def test_a_declared_interval_stays_as_declared_whatever_is_posted(client: Client) -> None:
    cron_job = CronJobFactory(is_declared=True, schedule="", every_seconds=60)
    login_superuser(client)

    page = client.get(change_url(cron_job))
    response = client.post(change_url(cron_job), form(name=cron_job.name, every_seconds="1:00:00"))

    assert response.status_code == 302
    assert 'name="every_seconds"' not in page.content.decode()
    stored = CronJob.objects.get(pk=cron_job.pk)
    assert (stored.schedule, stored.every_seconds) == ("", 60)


def test_an_ended_schedule_is_listed_done_with_its_reason_on_the_list_and_its_page(
    client: Client,
) -> None:
    QueueFactory(name="default")
    cron_job = CronJobFactory(name="never")
    CronJob.objects.filter(pk=cron_job.pk).update(schedule="0 0 30 2 *")
    CronJob.objects.reschedule(CronJob.objects.get(pk=cron_job.pk), catalog)
    cron_job.refresh_from_db()
    login_superuser(client)

    response = client.get(changelist_url(CronJob))
    page = client.get(change_url(cron_job)).content.decode()

    assert cron_job.end_reason.startswith("'0 0 30 2 *' has no fire time after ")
    assert column(response, "status") == ["done"]
    assert column(response, "next_run") == [f"ended: {cron_job.end_reason}"]
    assert html.escape(cron_job.end_reason) in page and not Entry.objects.exists()
