"""The CronJob admin: next fire times, validation at the form, edits that replace the waiting
entry, deletion with it, and what enable, disable and run now report."""

from __future__ import annotations

import html
import re
from datetime import UTC, datetime

import pytest
from django.test import Client

from django_iq.models import CronJob, Entry
from django_iq.registry import catalog
from tests.admin.conftest import (
    change_url,
    changelist_url,
    column,
    log_entries,
    login_superuser,
    messages_of,
    run_action,
)
from tests.factories import CronJobFactory, QueueFactory

pytestmark = pytest.mark.django_db

NOOP = "tests.testapp.jobs.noop"


def form(**changes: object) -> dict[str, object]:
    data: dict[str, object] = {
        "name": "nightly",
        "schedule": "0 3 * * *",
        "timezone": "UTC",
        "job_name": NOOP,
        "args": "[]",
        "kwargs": "{}",
        "queue": "default",
        "priority": "0",
    }
    data.update(changes)
    return data


def test_next_runs_lists_next_run_at_then_the_three_fire_times_after_it(client: Client) -> None:
    nightly = CronJobFactory(
        schedule="0 3 * * *", next_run_at=datetime(2030, 1, 1, 3, 0, tzinfo=UTC)
    )
    CronJobFactory(disabled=True)
    login_superuser(client)

    response = client.get(changelist_url(CronJob))
    page = client.get(change_url(nightly))

    # The list shows the next one, the following ones in its title; the page lists them all.
    assert column(response, "next_run") == ["2030-01-01", "disabled"]
    next_runs = (
        "2030-01-01 03:00:00 UTC, 2030-01-02 03:00:00 UTC, 2030-01-03 03:00:00 UTC, "
        "2030-01-04 03:00:00 UTC"
    )
    assert f'title="Next runs: {next_runs}"' in response.content.decode()
    assert all(time in page.content.decode() for time in next_runs.split(", "))


def test_the_times_of_a_cron_job_firing_every_ten_seconds_are_shown_to_the_second(
    client: Client,
) -> None:
    every_10s = CronJobFactory(
        schedule="",
        every_seconds=10,
        next_run_at=datetime(2030, 1, 1, 3, 50, 50, tzinfo=UTC),
        last_run_at=datetime(2030, 1, 1, 3, 50, 40, tzinfo=UTC),
    )
    login_superuser(client)

    page = client.get(change_url(every_10s)).content.decode()

    fields = {
        name: " ".join(re.sub(r"<[^>]+>", " ", html.unescape(text)).split())
        for name, text in re.findall(
            r'<div class="form-row field-(\w+)">(.*?)</div>\s*</div>\s*</div>', page, re.S
        )
    }
    assert fields["next_run_at_display"] == "Next run at: 2030-01-01 03:50:50 UTC"
    assert fields["last_run_at_display"] == "Last run at: 2030-01-01 03:50:40 UTC"
    assert fields["next_runs"] == (
        "Next runs: 2030-01-01 03:50:50 UTC 2030-01-01 03:51:00 UTC 2030-01-01 03:51:10 UTC "
        "2030-01-01 03:51:20 UTC"
    )


def test_the_add_form_shows_no_state_before_anything_is_saved(client: Client) -> None:
    login_superuser(client)

    page = client.get("/admin/django_iq/cronjob/add/").content.decode()

    assert 'name="schedule"' in page
    for unsaved_state in ("invalid schedule", "icon-no.svg", "Next runs", "Next run at", "From"):
        assert unsaved_state not in page


def test_an_invalid_schedule_is_refused_with_the_reason(client: Client) -> None:
    QueueFactory(name="default")
    login_superuser(client)

    response = client.post("/admin/django_iq/cronjob/add/", form(schedule="every day"))

    assert response.status_code == 200
    (message,) = response.context["adminform"].form.errors["schedule"]
    assert message.startswith("'every day' is not a valid cron expression")
    assert not CronJob.objects.exists()


def test_an_unregistered_job_and_non_json_arguments_are_refused(client: Client) -> None:
    QueueFactory(name="default")
    login_superuser(client)

    response = client.post(
        "/admin/django_iq/cronjob/add/", form(job_name="tests.testapp.jobs.nope", args='{"a": 1}')
    )

    errors = response.context["adminform"].form.errors
    assert "'tests.testapp.jobs.nope' is not a registered job" in errors["job_name"][0]
    assert not CronJob.objects.exists()


def test_args_must_be_a_list(client: Client) -> None:
    QueueFactory(name="default")
    login_superuser(client)

    response = client.post("/admin/django_iq/cronjob/add/", form(args='{"a": 1}'))

    assert response.context["adminform"].form.non_field_errors() == [
        "Positional arguments must be a list or tuple, not dict."
    ]


def test_an_added_cron_job_gets_its_waiting_entry_at_once(client: Client) -> None:
    QueueFactory(name="default")
    login_superuser(client)

    response = client.post("/admin/django_iq/cronjob/add/", form())

    cron_job = CronJob.objects.get(name="nightly")
    entry = Entry.objects.get(cron_job=cron_job)
    assert response.status_code == 302
    assert (entry.state, entry.run_at) == ("initial", cron_job.next_run_at)
    assert (entry.run_at.hour, entry.run_at.minute) == (3, 0)


def test_editing_the_schedule_replaces_the_waiting_entry(client: Client) -> None:
    QueueFactory(name="default")
    login_superuser(client)
    client.post("/admin/django_iq/cronjob/add/", form())
    cron_job = CronJob.objects.get(name="nightly")

    response = client.post(change_url(cron_job), form(schedule="30 5 * * *"))

    entry = Entry.objects.get(cron_job=cron_job)
    cron_job.refresh_from_db()
    assert response.status_code == 302
    assert (entry.run_at.hour, entry.run_at.minute) == (5, 30)
    assert cron_job.next_run_at == entry.run_at


def test_declared_cron_jobs_are_read_only_but_can_be_disabled(client: Client) -> None:
    cron_job = CronJobFactory(is_declared=True)
    login_superuser(client)

    page = client.get(change_url(cron_job))
    client.post(change_url(cron_job), form(schedule="30 5 * * *"))
    response = run_action(client, CronJob, "disable_cron_jobs", [cron_job])

    cron_job.refresh_from_db()
    assert 'name="schedule"' not in page.content.decode()
    assert (cron_job.schedule, cron_job.is_enabled) == ("*/5 * * * *", False)
    assert messages_of(response)[-1] == f"Disabled 1 cron job: {cron_job.name}."


def test_deleting_a_cron_job_removes_its_waiting_entry(client: Client) -> None:
    cron_job = CronJobFactory()
    CronJob.objects.reschedule(cron_job, catalog)
    login_superuser(client)

    response = run_action(client, CronJob, "delete_selected", [cron_job], post="yes")

    assert response.status_code == 302
    assert not CronJob.objects.exists()
    assert not Entry.objects.exists()


def test_enable_reports_cron_jobs_already_enabled(client: Client) -> None:
    disabled = CronJobFactory(disabled=True)
    enabled = CronJobFactory()
    login_superuser(client)

    response = run_action(client, CronJob, "enable_cron_jobs", [disabled, enabled])

    assert set(CronJob.objects.values_list("is_enabled", flat=True)) == {True}
    assert messages_of(response) == [
        f"Enabled 1 cron job: {disabled.name}. Skipped 1, already enabled: {enabled.name}."
    ]
    assert [e.object_id for e in log_entries()] == [str(disabled.pk)]


def test_run_now_makes_the_entry_pending_and_refuses_disabled_cron_jobs(client: Client) -> None:
    enabled = CronJobFactory()
    CronJob.objects.reschedule(enabled, catalog)
    disabled = CronJobFactory(disabled=True)
    login_superuser(client)

    response = run_action(client, CronJob, "run_cron_jobs_now", [enabled, disabled])

    assert list(Entry.objects.values_list("cron_job", "state")) == [(enabled.pk, "pending")]
    assert messages_of(response) == [
        f"Made pending now 1 cron job: {enabled.name}. "
        f"Skipped 1, disabled, done, or already pending or running: {disabled.name}."
    ]
    assert [e.object_id for e in log_entries()] == [str(enabled.pk)]
