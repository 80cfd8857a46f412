"""The ``unserved_job`` alarm: entries of a job no live worker has registered, waiting past
their queue's threshold, make the cluster unhealthy on ``/iq/health/``, ``iq_status --check``,
the dashboard and the ``django_iq_alarm`` gauge; the alarm clears when a worker serving the job
starts or the entries go."""

from __future__ import annotations

import io
import json
import re
from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from django_iq.alarms import UNSERVED_JOB
from django_iq.managers import QueueTally
from django_iq.managers.queue_metrics import minute_of
from django_iq.models import Entry, Queue, QueueMinute, Worker
from django_iq.snapshot import read_snapshot
from django_iq.worker import WorkerProcess
from tests.factories import EntryFactory, LeaderLeaseFactory, QueueFactory, WorkerFactory
from tests.testapp.jobs import noop, record

pytestmark = pytest.mark.django_db

HEALTH = "/iq/health/"
UNSERVED = "shop.jobs.send_invoice"  # deployed where no worker runs


def waiting(seconds: float, job_name: str = UNSERVED, queue: str = "default") -> Entry:
    """A pending entry of ``job_name``, ready ``seconds`` ago, in a queue where other jobs
    finished just now (so that the queue raises no alarm of its own)."""
    ago = timezone.now() - timedelta(seconds=seconds)
    QueueMinute.objects.record({(queue, minute_of(timezone.now())): QueueTally(done=1)})
    entry: Entry = EntryFactory(
        queue=QueueFactory(name=queue), job_name=job_name, enqueued_at=ago, run_at=ago
    )
    return entry


def job_alarms() -> list[tuple[str | None, str | None]]:
    snapshot = read_snapshot(unserved_jobs=True)
    return [(a.job, a.queue) for a in snapshot.alarms if a.reason == UNSERVED_JOB]


@pytest.fixture(autouse=True)
def cluster() -> Worker:
    """A live leader, and a live worker that serves every queue and registered other jobs."""
    LeaderLeaseFactory()
    worker: Worker = WorkerFactory(job_names=[noop.name, record.name])
    return worker


def test_the_alarm_names_the_job_its_queue_and_its_wait_everywhere(client: Client) -> None:
    waiting(600)
    waiting(900, queue="emails")
    waiting(600, job_name=record.name)  # served: its worker is merely busy elsewhere

    (alarm, other) = read_snapshot(unserved_jobs=True).alarms
    assert (alarm.reason, alarm.job, alarm.queue, alarm.threshold_seconds) == (
        UNSERVED_JOB,
        UNSERVED,
        "default",
        300,
    )
    assert alarm.waiting_seconds is not None and alarm.waiting_seconds >= 600
    assert (other.job, other.queue) == (UNSERVED, "emails")

    health = client.get(HEALTH)
    assert health.status_code == 503
    assert health.json()["reasons"] == [
        {"reason": "unserved_job", "queue": "default"},
        {"reason": "unserved_job", "queue": "emails"},
    ]

    out = io.StringIO()
    with pytest.raises(CommandError) as raised:
        call_command("iq_status", "--check", "--json", stdout=out)
    assert raised.value.returncode == 1
    assert re.search(
        rf"job {UNSERVED} in queue default: no live worker has registered the job while an "
        r"entry has waited 6\d\d s \(alarm after 300 s\)",
        str(raised.value),
    )
    listed = json.loads(out.getvalue())["alarms"]
    assert [(a["reason"], a["job"], a["queue"]) for a in listed] == [
        (UNSERVED_JOB, UNSERVED, "default"),
        (UNSERVED_JOB, UNSERVED, "emails"),
    ]

    user = User.objects.create_user("operator", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(codename__in=("view_queue", "view_worker"))
    )
    client.force_login(user)
    page = client.get(reverse("admin:django_iq_dashboard")).content.decode()
    assert 'data-alarm-reason="unserved_job" data-alarm-queue="default"' in page
    assert f"job {UNSERVED} in queue default" in page

    pytest.importorskip("prometheus_client")
    metrics = client.get("/iq/metrics/").content.decode()
    assert 'django_iq_alarm{queue="default",reason="unserved_job"} 1.0' in metrics
    assert 'django_iq_alarm{queue="emails",reason="unserved_job"} 1.0' in metrics


def test_no_alarm_until_the_queues_threshold_passes(client: Client) -> None:
    waiting(200)
    assert job_alarms() == []
    assert client.get(HEALTH).status_code == 200

    Queue.objects.configure("default", alert_waiting_seconds=100)

    assert job_alarms() == [(UNSERVED, "default")]
    assert client.get(HEALTH).status_code == 503


def test_the_alarm_clears_when_a_worker_serving_the_job_starts(client: Client) -> None:
    waiting(600)
    assert client.get(HEALTH).status_code == 503

    WorkerFactory(job_names=[UNSERVED, noop.name])  # a worker of the new deploy, registered

    assert job_alarms() == []
    assert client.get(HEALTH).json() == {"status": "ok"}


def test_the_alarm_clears_when_the_entries_go(client: Client) -> None:
    entry = waiting(600)
    assert client.get(HEALTH).status_code == 503

    Entry.objects.cancel([entry.pk])

    assert job_alarms() == []
    assert client.get(HEALTH).status_code == 200


def test_a_paused_queue_or_one_no_worker_serves_raises_no_job_alarm(cluster: Worker) -> None:
    waiting(600, queue="paused")
    Queue.objects.pause("paused")
    assert job_alarms() == []

    Worker.objects.filter(pk=cluster.pk).update(heartbeat_at=timezone.now() - timedelta(hours=1))
    waiting(600)

    snapshot = read_snapshot(unserved_jobs=True)
    assert [(a.queue, a.reason) for a in snapshot.alarms] == [("default", "no_live_worker")]


@pytest.mark.django_db(transaction=True)
def test_a_real_worker_that_registers_the_job_runs_its_entries_and_the_alarm_clears(
    client: Client, cluster: Worker
) -> None:
    Worker.objects.filter(pk=cluster.pk).update(job_names=[noop.name])
    entry = waiting(600, job_name=record.name)
    Entry.objects.filter(pk=entry.pk).update(args=["served-at-last"])
    assert job_alarms() == [(record.name, "default")]

    worker = WorkerProcess(burst=True, processing_threads=1)
    assert worker.run(install_signal_handlers=False) == 0

    assert not Entry.objects.filter(pk=entry.pk).exists()
    assert job_alarms() == []
    assert client.get(HEALTH).status_code == 200


def test_a_snapshot_of_some_queues_has_the_job_alarms_of_those_queues() -> None:
    waiting(600)
    waiting(600, queue="emails")

    snapshot = read_snapshot(queues=["emails"], unserved_jobs=True)

    assert [(a.job, a.queue) for a in snapshot.alarms] == [(UNSERVED, "emails")]
    assert [job.waiting for job in snapshot.unserved_jobs or []] == [2], "the list is for all"
