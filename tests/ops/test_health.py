"""Alarms for stuck work and the health verdict, through the snapshot, ``/iq/health/``,
``iq_status --check`` and the Prometheus gauges: each alarm fires on rows aged through the ORM
and clears, and what an anonymous caller is told."""

from __future__ import annotations

import io
import json
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import CommandError, call_command
from django.test import Client, modify_settings
from django.urls import reverse
from django.utils import timezone

from django_iq.alarms import Alarm
from django_iq.managers import QueueTally
from django_iq.managers.queue_metrics import minute_of
from django_iq.models import ApiToken, Entry, Queue, QueueMinute, Worker
from django_iq.prometheus import read_scrape
from django_iq.snapshot import read_snapshot
from tests.conftest import iq_settings_with
from tests.factories import (
    EntryErrorFactory,
    EntryFactory,
    LeaderLeaseFactory,
    QueueFactory,
    WorkerFactory,
)
from tests.processes import manage

pytestmark = pytest.mark.django_db

HEALTH = "/iq/health/"


def waiting(seconds: float, queue: str = "default", **fields: Any) -> Entry:
    """An entry awaiting compute, ready ``seconds`` ago (enqueued and due then)."""
    ago = timezone.now() - timedelta(seconds=seconds)
    entry: Entry = EntryFactory(queue=QueueFactory(name=queue), enqueued_at=ago, run_at=ago)
    return entry


def alarms() -> list[tuple[str | None, str]]:
    return [(alarm.queue, alarm.reason) for alarm in read_snapshot().alarms]


def finished_in(queue: str, minute: datetime) -> None:
    QueueMinute.objects.record({(queue, minute_of(minute)): QueueTally(done=1)})


@pytest.fixture
def leader() -> None:
    LeaderLeaseFactory()


# -- the alarms ------------------------------------------------------------------------------


@pytest.mark.usefixtures("leader")
def test_no_live_worker_raises_an_alarm_that_a_heartbeat_clears() -> None:
    worker = WorkerFactory(heartbeat_at=timezone.now() - timedelta(hours=1))
    waiting(600)
    finished_in("default", timezone.now())

    assert alarms() == [("default", "no_live_worker")]
    (alarm,) = read_snapshot().alarms
    assert alarm.waiting_seconds is not None and alarm.waiting_seconds >= 600
    assert alarm.threshold_seconds == 300

    Worker.objects.filter(pk=worker.pk).update(heartbeat_at=timezone.now())

    assert alarms() == []


@pytest.mark.usefixtures("leader")
def test_a_live_worker_of_other_queues_does_not_serve_the_queue() -> None:
    WorkerFactory(queues=["emails"])
    waiting(600)

    assert alarms() == [("default", "no_live_worker")]


@pytest.mark.usefixtures("leader")
def test_a_leader_process_is_not_a_worker_serving_the_queue() -> None:
    WorkerFactory(role=Worker.Role.LEADER, queues=[])
    waiting(600)

    assert alarms() == [("default", "no_live_worker")]


@pytest.mark.usefixtures("leader")
def test_nothing_started_raises_an_alarm_that_a_finished_job_clears() -> None:
    WorkerFactory(queues=[])
    waiting(600)
    finished_in("default", timezone.now() - timedelta(minutes=20))  # too long ago

    assert alarms() == [("default", "nothing_started")]

    finished_in("default", timezone.now())

    assert alarms() == []


@pytest.mark.usefixtures("leader")
def test_a_claim_running_in_the_queue_counts_as_started() -> None:
    live = WorkerFactory(queues=["default"])
    waiting(600)
    EntryFactory(locked=True, lock__worker=live)

    assert alarms() == []


@pytest.mark.usefixtures("leader")
def test_an_entry_waiting_less_than_the_threshold_raises_nothing() -> None:
    waiting(200)

    assert alarms() == []


@pytest.mark.usefixtures("leader")
def test_the_threshold_comes_from_the_queue_then_the_setting() -> None:
    waiting(200)
    QueueFactory(name="emails", alert_waiting_seconds=600)
    waiting(400, queue="emails")

    with iq_settings_with(ALERT_WAITING_SECONDS=100):
        assert alarms() == [("default", "no_live_worker")]

    Queue.objects.configure("default", alert_waiting_seconds=150)
    Queue.objects.configure("emails", alert_waiting_seconds=None)

    assert alarms() == [("default", "no_live_worker"), ("emails", "no_live_worker")]


@pytest.mark.usefixtures("leader")
def test_an_entry_retried_recently_waits_from_its_retry() -> None:
    ago = timezone.now() - timedelta(hours=1)
    EntryFactory(enqueued_at=ago, run_at=timezone.now() - timedelta(seconds=10))

    assert alarms() == []


@pytest.mark.usefixtures("leader")
def test_a_paused_queue_raises_no_alarm() -> None:
    waiting(600)
    Queue.objects.pause("default")

    assert alarms() == []


def test_a_missing_or_expired_lease_is_an_alarm_of_the_cluster() -> None:
    assert alarms() == [(None, "no_leader")]

    lease = LeaderLeaseFactory(expires_at=timezone.now() - timedelta(seconds=1))
    assert alarms() == [(None, "no_leader")]

    lease.expires_at = timezone.now() + timedelta(seconds=15)
    lease.save()
    assert alarms() == []


def test_a_queue_declared_in_settings_takes_its_threshold() -> None:
    with iq_settings_with(QUEUES={"slow": {"alert_waiting_seconds": 3600}}):
        queue = Queue.objects.ensure("slow")

    assert queue.alert_waiting_seconds == 3600


def test_configure_refuses_a_threshold_below_one_second() -> None:
    QueueFactory(name="default")

    with pytest.raises(ValueError, match="alert_waiting_seconds must be None or an integer >= 1"):
        Queue.objects.configure("default", alert_waiting_seconds=0)


# -- /iq/health/ -----------------------------------------------------------------------------


def test_health_is_503_without_a_lease(client: Client) -> None:
    response = client.get(HEALTH)

    assert response.status_code == 503
    assert response.json() == {
        "status": "failing",
        "reasons": [{"reason": "no_leader", "queue": None}],
    }


def test_health_is_503_with_an_expired_lease(client: Client) -> None:
    LeaderLeaseFactory(expires_at=timezone.now() - timedelta(seconds=1))
    WorkerFactory()

    response = client.get(HEALTH)

    assert response.status_code == 503
    assert response.json()["reasons"] == [{"reason": "no_leader", "queue": None}]


@pytest.mark.usefixtures("leader")
def test_health_is_200_with_a_live_leader_and_live_workers(client: Client) -> None:
    WorkerFactory()
    waiting(600)
    finished_in("default", timezone.now())

    response = client.get(HEALTH)

    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


@pytest.mark.usefixtures("leader")
def test_health_names_queues_and_reasons_and_nothing_about_entries(client: Client) -> None:
    secret = waiting(600)
    Entry.objects.filter(pk=secret.pk).update(args=["s3cr3t-argument"])
    EntryErrorFactory(message="s3cr3t-message", traceback="s3cr3t-traceback")
    stopped = WorkerFactory()
    Worker.objects.stop(stopped)
    EntryFactory(queue=QueueFactory(name="emails"), locked=True, lock__worker=stopped)

    response = client.get(HEALTH)

    assert response.status_code == 503
    assert response.json() == {
        "status": "failing",
        "reasons": [
            {"reason": "no_live_worker", "queue": "default"},
            {"reason": "invariant_broken", "queue": "emails"},
        ],
    }
    body = response.content.decode()
    assert "s3cr3t" not in body and "tests.testapp" not in body


def test_health_is_never_cached_and_needs_no_session(client: Client) -> None:
    response = client.get(HEALTH)

    assert "no-cache" in response["Cache-Control"] and "no-store" in response["Cache-Control"]
    assert "Set-Cookie" not in response.headers
    assert client.post(HEALTH).status_code == 405


@modify_settings(MIDDLEWARE={"append": "django.contrib.auth.middleware.LoginRequiredMiddleware"})
def test_health_answers_under_login_required_middleware(client: Client) -> None:
    LeaderLeaseFactory()

    response = client.get(HEALTH)

    assert (response.status_code, response.json()) == (200, {"status": "ok"})
    # The rest still needs a login: the admin redirects to it; the API and the metrics, which
    # take API tokens too, answer 401 themselves instead of redirecting a script to a form.
    assert client.get(reverse("admin:django_iq_entry_changelist")).status_code == 302
    assert client.get("/iq/api/queues/").status_code == 401
    assert client.get("/iq/metrics/").status_code == 401


@modify_settings(MIDDLEWARE={"append": "django.contrib.auth.middleware.LoginRequiredMiddleware"})
def test_api_tokens_work_under_login_required_middleware(client: Client) -> None:
    user = User.objects.create_user("robot", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_queue"))
    _row, token = ApiToken.objects.issue(user, "ci")

    response = client.get("/iq/api/queues/", headers={"Authorization": f"Bearer {token}"})

    assert response.status_code == 200


def test_health_takes_thirteen_queries_whatever_the_data(
    client: Client, django_assert_num_queries: Any
) -> None:
    LeaderLeaseFactory()
    for index in range(3):
        queue = QueueFactory(name=f"bulk-{index}")
        EntryFactory.create_batch(3, queue=queue)
        EntryFactory(queue=queue, locked=True)
    WorkerFactory.create_batch(3)

    # The operator snapshot's eleven, less the worker list, and the jobs no live worker serves
    # (two).
    with django_assert_num_queries(13):
        assert client.get(HEALTH).status_code == 200


# -- iq_status --check -----------------------------------------------------------------------


def test_check_exits_0_when_healthy_and_prints_the_report() -> None:
    LeaderLeaseFactory()
    out = io.StringIO()

    call_command("iq_status", "--check", stdout=out)

    assert "Alarms (0)\nNone: healthy." in out.getvalue()


def test_check_fails_with_status_1_naming_each_problem() -> None:
    waiting(600)
    out = io.StringIO()

    with pytest.raises(CommandError, match=r"^2 problems: no leader holds the lease") as raised:
        call_command("iq_status", "--check", "--json", stdout=out)

    assert raised.value.returncode == 1
    assert "queue default: no live worker serves the queue" in str(raised.value)
    document = json.loads(out.getvalue())
    assert document["healthy"] is False
    assert [(a["queue"], a["reason"]) for a in document["alarms"]] == [
        (None, "no_leader"),
        ("default", "no_live_worker"),
    ]


def test_check_with_watch_is_refused() -> None:
    with pytest.raises(CommandError, match="--check reports once: leave out --watch"):
        call_command("iq_status", "--check", "--watch", "1", stdout=io.StringIO())


def test_text_report_lists_the_alarms_and_broken_counts() -> None:
    waiting(600)
    EntryFactory(locked=True, lock__worker=None)
    out = io.StringIO()

    call_command("iq_status", stdout=out)

    text = out.getvalue()
    assert "Alarms (3)" in text
    assert "  no leader holds the lease: start manage.py runleader" in text
    assert "  queue default: no live worker serves the queue while an entry has waited" in text
    assert "  queue default: counts contradict each other (locked_by_dead_workers=1)" in text


@pytest.mark.django_db(transaction=True)
def test_check_exit_status_of_the_process() -> None:
    QueueFactory(name="default")

    failing = manage("iq_status", "--check")
    LeaderLeaseFactory(expires_at=timezone.now() + timedelta(minutes=5))
    passing = manage("iq_status", "--check")

    assert failing.returncode == 1, failing.stderr
    assert "no leader holds the lease" in failing.stderr
    assert passing.returncode == 0, passing.stderr


# -- Prometheus ------------------------------------------------------------------------------


def test_gauges_report_alarms_the_leader_and_broken_counts() -> None:
    pytest.importorskip("prometheus_client")
    from prometheus_client import CollectorRegistry

    from django_iq.prometheus import IQCollector

    waiting(600)
    QueueFactory(name="emails")
    stopped = WorkerFactory()
    Worker.objects.stop(stopped)
    EntryFactory(queue=QueueFactory(name="emails"), locked=True, lock__worker=stopped)
    orphan = EntryFactory(queue=QueueFactory(name="emails"), locked=True, lock__worker=stopped)
    Entry.objects.filter(pk=orphan.pk).delete()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(IQCollector())

    def sample(name: str, **labels: str) -> float | None:
        value: float | None = registry.get_sample_value(name, labels)
        return value

    assert sample("django_iq_alarm", queue="default", reason="no_live_worker") == 1
    assert sample("django_iq_alarm", queue="default", reason="nothing_started") == 0
    assert sample("django_iq_alarm", queue="emails", reason="no_live_worker") == 0
    assert sample("django_iq_alarm", queue="", reason="no_leader") == 1
    assert sample("django_iq_leader_live") == 0
    assert sample("django_iq_locked_by_dead_workers", queue="emails") == 1
    assert sample("django_iq_locks_without_entries", queue="emails") == 1
    assert sample("django_iq_invariant_holds", queue="emails") == 0
    assert sample("django_iq_invariant_holds", queue="default") == 1

    LeaderLeaseFactory()
    assert sample("django_iq_leader_live") == 1
    assert sample("django_iq_alarm", queue="", reason="no_leader") == 0


def test_the_scrape_and_the_snapshot_agree_on_the_alarms() -> None:
    waiting(600)

    scrape = read_scrape(timezone.now())

    assert scrape.snapshot.alarms == [
        Alarm("no_leader"),
        scrape.snapshot.queues[0].alarm,
    ]
