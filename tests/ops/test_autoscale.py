"""The autoscaling signal (django_iq/autoscale.py, docs/howto/autoscaling.md): the processing
threads a known backlog needs at the durations a real worker measured, the same number on every
surface (Prometheus, the HTTP API, iq_status), a job's cap as the ceiling of its share, and the
durations assumed for jobs with no run in the last hour."""

from __future__ import annotations

import io
import json
import math
from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import call_command
from django.test import Client
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from django_iq.autoscale import UNMEASURED_RUN_SECONDS, read_demand
from django_iq.models import JobMinute
from django_iq.worker import WorkerProcess
from tests.conftest import iq_settings_with
from tests.factories import WorkerFactory
from tests.testapp.jobs import capped, noop, sleeps

pytestmark = pytest.mark.django_db(transaction=True)

TARGET = 30.0


def measure(seconds: float, runs: int) -> float:
    """Run ``sleeps(seconds)`` ``runs`` times in a real worker; the job's mean duration as the
    last hour's statistics give it."""
    for _ in range(runs):
        sleeps.enqueue(seconds)
    assert WorkerProcess(burst=True, processing_threads=2).run(install_signal_handlers=False) == 0
    [stats] = [s for s in JobMinute.objects.last_hour(timezone.now()) if s.job_name == sleeps.name]
    assert stats.mean_seconds is not None
    return stats.mean_seconds


def staff_client() -> Client:
    user = User.objects.create_user("ops", password="unused", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_queue"))
    client = Client()
    client.force_login(user)
    return client


@iq_settings_with(AUTOSCALE_TARGET_SECONDS=TARGET)
def test_a_known_backlog_needs_its_run_time_over_the_target_on_every_surface() -> None:
    mean = measure(0.2, runs=4)
    # Measured, as the statistics' buckets round it (within 11.1 %, plus the run's overhead).
    assert 0.2 * 0.88 <= mean <= 0.2 * 1.25
    for _ in range(300):
        sleeps.enqueue(0.2)
    for _ in range(4):
        noop.using(queue="emails").enqueue()
    WorkerFactory(processing_threads=4)  # live, with 4 threads

    demand = read_demand(timezone.now())

    by_queue = {queue.queue: queue for queue in demand.queues}
    assert by_queue["default"].pending == 300
    assert by_queue["default"].backlog_seconds == pytest.approx(300 * mean)
    assert by_queue["default"].threads_needed == math.ceil(300 * mean / TARGET)
    # noop has no run in the last hour, nor has any job of its queue: 1 s a run, and at least
    # one thread for a queue with anything pending.
    assert by_queue["emails"].backlog_seconds == 4 * UNMEASURED_RUN_SECONDS
    assert by_queue["emails"].threads_needed == 1
    assert demand.threads_needed == math.ceil(300 * mean / TARGET) + 1
    assert demand.threads_live == 4

    # The same numbers in the HTTP API, the metrics and iq_status.
    client = staff_client()
    answer = client.get("/iq/api/autoscale/")
    assert answer.status_code == 200, answer.content
    shown = answer.json()
    assert shown["threads_needed"] == demand.threads_needed
    assert shown["target_seconds"] == TARGET
    assert [(q["queue"], q["threads_needed"]) for q in shown["queues"]] == [
        ("default", by_queue["default"].threads_needed),
        ("emails", 1),
    ]
    metrics = {
        (sample.name, sample.labels.get("queue", "")): sample.value
        for family in text_string_to_metric_families(client.get("/iq/metrics/").content.decode())
        for sample in family.samples
    }
    assert metrics[("django_iq_threads_needed", "default")] == by_queue["default"].threads_needed
    assert metrics[("django_iq_threads_needed", "emails")] == 1
    assert metrics[("django_iq_backlog_seconds", "default")] == pytest.approx(300 * mean)
    assert metrics[("django_iq_autoscale_target_seconds", "")] == TARGET
    out = io.StringIO()
    call_command("iq_status", "--json", stdout=out)
    assert json.loads(out.getvalue())["autoscale"]["threads_needed"] == demand.threads_needed
    out = io.StringIO()
    call_command("iq_status", stdout=out)
    assert (
        f"Autoscaling: {demand.threads_needed} processing threads needed to run the pending "
        f"entries within {TARGET:g} s (4 live)"
    ) in out.getvalue()


@iq_settings_with(AUTOSCALE_TARGET_SECONDS=1)
def test_a_capped_jobs_share_is_at_most_its_cap_and_an_unmeasured_job_counts_at_its_queues_mean() -> (
    None
):
    mean = measure(0.05, runs=2)
    for _ in range(200):
        capped.enqueue("c")  # max_concurrency=3 in the cluster; no run measured
    for _ in range(40):
        sleeps.enqueue(0.05)

    [default] = read_demand(timezone.now()).queues

    # capped runs at the queue's measured mean (sleeps'): 200 x mean seconds, more than
    # 3 threads' worth within 1 s, so its share is its cap.
    assert default.backlog_seconds == pytest.approx(240 * mean)
    assert default.threads_needed == 3 + math.ceil(40 * mean)


def test_nothing_pending_needs_no_thread() -> None:
    sleeps.using(run_at=timezone.now() + timedelta(hours=1)).enqueue(1)  # deferred

    demand = read_demand(timezone.now())

    assert demand.queues == () and demand.threads_needed == 0
