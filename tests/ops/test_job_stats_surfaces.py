"""Per-job statistics over the last hour, from a real worker run to what operators read: the
JSON API, the admin page, the dashboard and the Prometheus endpoint; and who may read them."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from django_iq.managers.jobstats import QUANTILE_RELATIVE_ERROR, JobStats
from django_iq.models import EntryError, JobMinute
from django_iq.worker import WorkerProcess
from tests.ops.test_prometheus import samples, value
from tests.testapp.jobs import overruns, sleeps, sleeps_too

API_URL = "/iq/api/jobs/stats/"
METRICS_URL = "/iq/metrics/"
FAST, SLOW = 0.02, 0.2


def staff(client: Client, *codenames: str) -> Client:
    user = User.objects.create_user("ops", password="unused", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="django_iq", codename__in=codenames)
    )
    client.force_login(user)
    return client


def about(seconds: float | None, expected: float) -> bool:
    """Within the stated bound below ``expected`` (a run lasts at least what it sleeps), and
    above it by at most what a loaded machine adds to a run (its queries, the scheduling): in
    a full CI run on two cores, one of twelve 20 ms runs took 188 ms, and p95 of twelve runs is
    the slowest of them."""
    assert seconds is not None
    return expected * (1 - QUANTILE_RELATIVE_ERROR) <= seconds <= expected * 2 + 0.5


@pytest.mark.django_db(transaction=True)
def test_a_worker_run_shows_in_the_api_admin_dashboard_and_metrics(client: Client) -> None:
    sleeps.enqueue_many([((FAST,), {}) for _ in range(12)])
    sleeps_too.enqueue_many([((SLOW, i < 2), {}) for i in range(6)])
    overruns.enqueue("times-out", 30)  # timeout 0.3 s, two attempts: both time out

    worker = WorkerProcess(burst=True, processing_threads=4)
    assert worker.run(install_signal_handlers=False) == 0
    assert EntryError.objects.filter(job_name=overruns.name).count() == 2

    staff(client, "view_queue", "view_worker")
    api = client.get(API_URL)
    assert api.status_code == 200
    jobs = {row["job_name"]: row for row in api.json()["jobs"]}
    assert set(jobs) == {sleeps.name, sleeps_too.name, overruns.name}
    assert (jobs[sleeps.name]["runs"], jobs[sleeps.name]["failed"]) == (12, 0)
    assert (jobs[sleeps_too.name]["runs"], jobs[sleeps_too.name]["failed"]) == (6, 2)
    assert (jobs[overruns.name]["runs"], jobs[overruns.name]["failed"]) == (2, 2)
    for name, seconds in ((sleeps.name, FAST), (sleeps_too.name, SLOW), (overruns.name, 0.3)):
        assert about(jobs[name]["p50_seconds"], seconds), (name, jobs[name])
        assert about(jobs[name]["p95_seconds"], seconds), (name, jobs[name])

    page = client.get(reverse("admin:django_iq_job_stats"))
    assert page.status_code == 200
    assert [s.as_dict() for s in page.context["job_stats"]] == api.json()["jobs"]
    html = page.content.decode()
    assert f'data-job-stats="{sleeps_too.name}"' in html
    assert 'data-failed="2"' in html

    dashboard = client.get(reverse("admin:django_iq_dashboard"))
    assert dashboard.status_code == 200
    shown: list[JobStats] = dashboard.context["data"].job_stats
    assert [s.as_dict() for s in shown] == api.json()["jobs"]
    assert f'data-job-stats="{sleeps.name}"' in dashboard.content.decode()

    found = samples(client.get(METRICS_URL).content.decode())
    assert value(found, "django_iq_job_runs_last_hour", job=sleeps_too.name) == 6
    assert value(found, "django_iq_job_failures_last_hour", job=sleeps_too.name) == 2
    assert value(found, "django_iq_job_failures_last_hour", job=overruns.name) == 2
    for q, key in (("0.5", "p50_seconds"), ("0.95", "p95_seconds")):
        sample = value(
            found, "django_iq_job_duration_last_hour_seconds", job=sleeps.name, quantile=q
        )
        assert sample == pytest.approx(jobs[sleeps.name][key])


@pytest.mark.django_db
def test_each_surface_says_when_no_run_ended_in_the_last_hour(client: Client) -> None:
    JobMinute.objects.create(
        job_name=sleeps.name,
        minute=timezone.now().replace(second=0) - timedelta(hours=2),
        bucket=3,
        runs=5,
    )
    staff(client, "view_queue", "view_worker")

    assert client.get(API_URL).json()["jobs"] == []
    page = client.get(reverse("admin:django_iq_job_stats")).content.decode()
    assert "No runs ended in the last hour." in page
    assert "django_iq_job_runs_last_hour{" not in client.get(METRICS_URL).content.decode()


# -- who may read them --------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_admin_page_sends_anonymous_users_to_the_login(client: Client) -> None:
    response = client.get(reverse("admin:django_iq_job_stats"))

    assert response.status_code == 302
    assert response["Location"].startswith(reverse("admin:login"))


@pytest.mark.django_db
def test_the_admin_page_needs_the_dashboards_permission(client: Client) -> None:
    staff(client, "view_entry")

    refused = client.get(reverse("admin:django_iq_job_stats"))
    index = client.get(reverse("admin:app_list", args=["django_iq"])).content.decode()

    assert refused.status_code == 403
    assert reverse("admin:django_iq_job_stats") not in index


@pytest.mark.django_db
def test_the_app_index_links_to_the_admin_page(client: Client) -> None:
    staff(client, "view_queue", "view_worker")

    index = client.get(reverse("admin:app_list", args=["django_iq"])).content.decode()

    assert f'href="{reverse("admin:django_iq_job_stats")}"' in index


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("user", "status"),
    [
        (None, 401),
        ({"is_staff": False}, 403),
        ({"is_staff": True}, 403),
        ({"is_staff": True, "view_queue": True}, 200),
    ],
    ids=["anonymous", "not staff", "staff without view_queue", "staff with view_queue"],
)
def test_the_api_endpoint_needs_what_the_job_statistics_page_needs(
    client: Client, user: dict[str, Any] | None, status: int
) -> None:
    if user is not None:
        someone = User.objects.create_user("someone", is_staff=user["is_staff"])
        if user.get("view_queue"):
            someone.user_permissions.add(Permission.objects.get(codename="view_queue"))
        client.force_login(someone)

    response = client.get(API_URL)

    assert response.status_code == status
    assert response["Content-Type"] == "application/json"
    # Methods are checked before permissions: active staff learn the method is wrong.
    assert client.post(API_URL).status_code == (405 if user and user["is_staff"] else status)
