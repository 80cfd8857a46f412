"""prometheus.py: the metrics read from the database in the text format, who may scrape them,
and the answer when prometheus-client is missing."""

from __future__ import annotations

import sys
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.test import Client
from django.utils import timezone
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from django_iq.managers.queue_metrics import DURATION_BUCKETS_SECONDS
from django_iq.models import ApiToken, Worker
from django_iq.prometheus import CONTENT_TYPE, IQCollector, read_scrape
from django_iq.worker import WorkerProcess
from tests.conftest import iq_settings_with
from tests.factories import EntryErrorFactory, EntryFactory, QueueFactory, WorkerFactory
from tests.testapp.jobs import always_fails, flaky, record

pytestmark = pytest.mark.urls("tests.urls_dashboard")

URL = "/iq/metrics/"
TOKEN = "scrape-token-0123456789-abcdefghijklmnop"
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(text: str) -> Samples:
    """Every sample of the exposition, by name and sorted labels."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(found: Samples, name: str, **labels: str) -> float:
    return found[(name, tuple(sorted(labels.items())))]


def staff_user(username: str = "ops", *codenames: str) -> User:
    user = User.objects.create_user(username, password="unused", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="django_iq", codename__in=codenames)
    )
    return user


@pytest.fixture
def staff_client(client: Client) -> Client:
    """Signed in as staff with the view permission the metrics need (permissions.METRICS)."""
    client.force_login(staff_user("ops", "view_queue"))
    return client


def scrape(client: Client, **headers: str) -> Samples:
    response = client.get(URL, headers=headers)
    assert response.status_code == 200, response.content
    return samples(response.content.decode())


# -- values --------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_job_counters_and_duration_histogram_match_the_jobs_a_worker_ran(
    staff_client: Client,
) -> None:
    for token in ("a", "b", "c"):
        record.enqueue(token)
    always_fails.enqueue("boom")  # default queue, max_attempts=2: two failed attempts
    flaky.enqueue("f", 1)  # emails queue: one failed attempt, then done
    assert WorkerProcess(burst=True, processing_threads=2).run(install_signal_handlers=False) == 0

    found = scrape(staff_client)

    assert value(found, "django_iq_jobs_done_total", queue="default") == 3
    assert value(found, "django_iq_jobs_failed_total", queue="default") == 2
    assert value(found, "django_iq_jobs_done_total", queue="emails") == 1
    assert value(found, "django_iq_jobs_failed_total", queue="emails") == 1
    assert value(found, "django_iq_job_duration_seconds_count", queue="default") == 5
    assert value(found, "django_iq_job_duration_seconds_bucket", queue="default", le="+Inf") == 5
    buckets = [
        value(found, "django_iq_job_duration_seconds_bucket", queue="default", le=str(bound))
        for bound in DURATION_BUCKETS_SECONDS
    ]
    assert buckets == sorted(buckets), "histogram buckets must be cumulative"
    assert buckets[-1] == 5  # every test job takes well under 600 s
    assert 0 < value(found, "django_iq_job_duration_seconds_sum", queue="default") < 60
    assert value(found, "django_iq_queue_entries", queue="default", state="failed") == 1
    # The burst worker stopped cleanly.
    assert value(found, "django_iq_workers", role="worker", state="stopped") == 1
    assert value(found, "django_iq_workers", role="worker", state="dead") == 0
    assert value(found, "django_iq_workers", role="worker", state="live") == 0


@pytest.mark.django_db
def test_queue_entries_gauge_has_all_eight_states_per_queue(staff_client: Client) -> None:
    EntryFactory.create_batch(2)
    EntryFactory(locked=True)
    EntryFactory(deferred=True)
    EntryFactory(disabled=True)
    EntryErrorFactory()
    QueueFactory(name="reports")

    found = scrape(staff_client)

    assert {
        state: value(found, "django_iq_queue_entries", queue="default", state=state)
        for state in (
            "initial",
            "pending",
            "disabled",
            "blocked",
            "computing",
            "running",
            "awaiting_compute",
            "failed",
        )
    } == {
        "initial": 1,
        "pending": 3,
        "disabled": 1,
        "blocked": 0,
        "computing": 1,
        "running": 0,
        "awaiting_compute": 2,
        "failed": 1,
    }
    reports = [
        key
        for key in found
        if key[0] == "django_iq_queue_entries" and ("queue", "reports") in key[1]
    ]
    assert len(reports) == 8
    assert all(found[key] == 0 for key in reports)


@pytest.mark.django_db
def test_oldest_waiting_seconds_per_queue(staff_client: Client) -> None:
    now = timezone.now()
    EntryFactory(enqueued_at=now - timedelta(seconds=300), locked=True)
    EntryFactory(enqueued_at=now - timedelta(seconds=120))
    QueueFactory(name="emails")

    found = scrape(staff_client)

    assert value(found, "django_iq_oldest_waiting_seconds", queue="default") == pytest.approx(
        120, abs=10
    )
    assert value(found, "django_iq_oldest_waiting_seconds", queue="emails") == 0


@pytest.mark.django_db
def test_workers_gauge_counts_live_stopped_and_dead_per_role_and_throttled_live_workers(
    staff_client: Client,
) -> None:
    long_ago = timezone.now() - timedelta(hours=1)
    WorkerFactory.create_batch(2)
    WorkerFactory(is_throttled=True)
    WorkerFactory(is_throttled=True, heartbeat_at=long_ago)  # dead: not counted as throttled
    WorkerFactory(role=Worker.Role.LEADER, processing_threads=0)
    stopped = WorkerFactory(role=Worker.Role.LEADER, processing_threads=0)
    Worker.objects.stop(stopped)

    found = scrape(staff_client)

    assert {
        (role, state): value(found, "django_iq_workers", role=role, state=state)
        for role in ("worker", "leader")
        for state in ("live", "stopped", "dead")
    } == {
        ("worker", "live"): 3,
        ("worker", "stopped"): 0,
        ("worker", "dead"): 1,
        ("leader", "live"): 1,
        ("leader", "stopped"): 1,
        ("leader", "dead"): 0,
    }
    assert value(found, "django_iq_worker_throttled") == 1


@pytest.mark.django_db
def test_an_empty_installation_still_exposes_the_worker_gauges(staff_client: Client) -> None:
    found = scrape(staff_client)

    assert value(found, "django_iq_workers", role="worker", state="live") == 0
    assert value(found, "django_iq_worker_throttled") == 0
    assert not [key for key in found if key[0] == "django_iq_queue_entries"]


@pytest.mark.django_db
def test_response_is_the_text_format_and_never_cached(staff_client: Client) -> None:
    response = staff_client.get(URL)

    assert response["Content-Type"] == CONTENT_TYPE == "text/plain; version=0.0.4; charset=utf-8"
    assert "max-age=0" in response["Cache-Control"]
    families = {
        family.name: family.type
        for family in text_string_to_metric_families(response.content.decode())
    }
    assert families == {
        "django_iq_queue_entries": "gauge",
        "django_iq_locked_by_dead_workers": "gauge",
        "django_iq_locks_without_entries": "gauge",
        "django_iq_invariant_holds": "gauge",
        "django_iq_alarm": "gauge",
        "django_iq_leader_live": "gauge",
        "django_iq_jobs_done": "counter",
        "django_iq_jobs_failed": "counter",
        "django_iq_entries_merged": "counter",
        "django_iq_job_duration_seconds": "histogram",
        "django_iq_oldest_waiting_seconds": "gauge",
        "django_iq_workers": "gauge",
        "django_iq_worker_throttled": "gauge",
        "django_iq_unserved_job_waiting_entries": "gauge",
        "django_iq_unserved_job_oldest_waiting_seconds": "gauge",
        "django_iq_job_runs_last_hour": "gauge",
        "django_iq_job_failures_last_hour": "gauge",
        "django_iq_job_duration_last_hour_seconds": "gauge",
        "django_iq_threads_needed": "gauge",
        "django_iq_backlog_seconds": "gauge",
        "django_iq_autoscale_target_seconds": "gauge",
        # A database server's sessions against its limit (SQLite has none).
        **(
            {"django_iq_database_max_connections": "gauge", "django_iq_database_sessions": "gauge"}
            if connection.vendor != "sqlite"
            else {}
        ),
    }


# -- access --------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_anonymous_scrape_is_unauthorized_with_a_bearer_challenge(client: Client) -> None:
    response = client.get(URL)

    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Bearer realm="django_iq"'
    assert b"METRICS_TOKEN" in response.content


@pytest.mark.django_db
def test_logged_in_user_without_staff_status_is_forbidden(client: Client) -> None:
    user = User.objects.create_user("visitor", password="unused")
    user.user_permissions.add(Permission.objects.get(codename="view_queue"))
    client.force_login(user)

    assert client.get(URL).status_code == 403


@pytest.mark.django_db
def test_staff_without_the_view_permission_is_forbidden(client: Client) -> None:
    client.force_login(staff_user("ops", "view_entry", "view_worker"))

    response = client.get(URL)

    assert response.status_code == 403
    assert b"django_iq.view_queue" in response.content


@pytest.mark.django_db
def test_an_api_token_of_staff_with_the_view_permission_may_scrape(client: Client) -> None:
    EntryFactory()
    _row, token = ApiToken.objects.issue(staff_user("prometheus", "view_queue"), "scraper")

    found = scrape(client, authorization=f"Bearer {token}")

    assert value(found, "django_iq_queue_entries", queue="default", state="pending") == 1


@pytest.mark.django_db
def test_an_api_token_without_the_permission_is_forbidden_and_a_revoked_one_unauthorized(
    client: Client,
) -> None:
    _row, weak = ApiToken.objects.issue(staff_user("weak"), "scraper")
    row, strong = ApiToken.objects.issue(staff_user("strong", "view_queue"), "scraper")
    ApiToken.objects.revoke([row.pk])

    assert client.get(URL, headers={"authorization": f"Bearer {weak}"}).status_code == 403
    revoked = client.get(URL, headers={"authorization": f"Bearer {strong}"})
    assert revoked.status_code == 401
    assert revoked["WWW-Authenticate"] == 'Bearer realm="django_iq", error="invalid_token"'


@pytest.mark.django_db
def test_bearer_token_from_settings_lets_prometheus_scrape_without_a_session(
    client: Client,
) -> None:
    EntryFactory()

    with iq_settings_with(METRICS_TOKEN=TOKEN):
        found = scrape(client, authorization=f"Bearer {TOKEN}")

    assert value(found, "django_iq_queue_entries", queue="default", state="pending") == 1


@pytest.mark.django_db
@pytest.mark.parametrize(
    "header",
    [f"Bearer {TOKEN}x", f"Bearer {TOKEN[:-1]}", f"Basic {TOKEN}", TOKEN, "Bearer "],
)
def test_a_wrong_token_is_unauthorized(client: Client, header: str) -> None:
    with iq_settings_with(METRICS_TOKEN=TOKEN):
        response = client.get(URL, headers={"authorization": header})

    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert TOKEN.encode() not in response.content


@pytest.mark.django_db
@pytest.mark.parametrize("token", [None, ""])
def test_no_token_is_accepted_when_none_is_configured(client: Client, token: str | None) -> None:
    with iq_settings_with(METRICS_TOKEN=token):
        assert client.get(URL, headers={"authorization": "Bearer "}).status_code == 401
        assert client.get(URL, headers={"authorization": f"Bearer {TOKEN}"}).status_code == 401


@pytest.mark.django_db
def test_without_prometheus_client_the_view_answers_501_saying_what_to_install(
    staff_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    # None in sys.modules makes "import prometheus_client" raise ImportError.
    monkeypatch.setitem(sys.modules, "prometheus_client", None)

    response = staff_client.get(URL)

    assert response.status_code == 501
    assert "pip install django-iq[prometheus]" in response.content.decode()


@pytest.mark.django_db
def test_without_prometheus_client_anonymous_scrape_is_still_refused(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)

    assert client.get(URL).status_code == 401


@pytest.mark.django_db
def test_jobs_no_live_worker_serves_are_gauges_with_their_oldest_wait() -> None:
    registry = CollectorRegistry()
    registry.register(IQCollector())
    EntryFactory(job_name="billing.jobs.invoice", enqueued_at=timezone.now() - timedelta(hours=1))
    EntryFactory(job_name="billing.jobs.invoice")
    WorkerFactory(job_names=["tests.testapp.jobs.record"])

    labels = {"job": "billing.jobs.invoice"}
    waiting = registry.get_sample_value("django_iq_unserved_job_waiting_entries", labels)
    oldest = registry.get_sample_value("django_iq_unserved_job_oldest_waiting_seconds", labels)

    assert waiting == 2
    assert oldest is not None and 3500 <= oldest <= 3700


# -- collector and queries -------------------------------------------------------------------------


@pytest.mark.django_db
def test_collector_registers_in_another_registry_without_querying(
    django_assert_num_queries: Any,
) -> None:
    registry = CollectorRegistry()

    with django_assert_num_queries(0):
        registry.register(IQCollector())

    EntryFactory()
    assert (
        registry.get_sample_value(
            "django_iq_queue_entries", {"queue": "default", "state": "pending"}
        )
        == 1
    )


# The server's sessions, and those the live processes report; none on SQLite.
SERVER_SESSION_QUERIES = {"sqlite": 0, "postgresql": 2, "mysql": 2}


@pytest.mark.django_db
def test_a_scrape_takes_eighteen_queries_whatever_the_data(
    django_assert_num_queries: Any,
) -> None:
    for index in range(5):
        queue = QueueFactory(name=f"bulk-{index}")
        EntryFactory.create_batch(3, queue=queue)
        EntryFactory(queue=queue, locked=True)
        EntryErrorFactory(queue=queue)
    WorkerFactory.create_batch(4)

    # The operator snapshot's twelve, the jobs no live worker serves (two), the lifetime
    # totals, the last hour per job, and the autoscaling signal's pending entries and live
    # threads; on a database server, its sessions and those the live processes report.
    with django_assert_num_queries(18 + SERVER_SESSION_QUERIES[connection.vendor]):
        scrape = read_scrape(timezone.now())

    assert len(scrape.snapshot.queues) == 5
