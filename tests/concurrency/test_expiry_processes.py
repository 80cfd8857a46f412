"""Expiry against real processes, on whichever database the suite runs on: a busy worker ends
the entries that expired while they waited without handing them to their job, and a leader
ends those of a queue no worker serves. Judged by the runs the jobs recorded."""

from __future__ import annotations

import signal
from datetime import timedelta

import pytest

import django_iq
from django_iq.models import Entry, RunOutcome, Worker
from tests.conftest import wait_until
from tests.processes import finish, start_command
from tests.testapp.jobs import record, step
from tests.testapp.models import JobRun, RecordedRun

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_a_busy_worker_ends_the_entries_that_expired_while_they_waited() -> None:
    worker = start_command("runworker", "--queues", "default", "--threads", "1")
    try:
        wait_until(
            lambda: Worker.objects.filter(stopped_at__isnull=True).exists(),
            message="the worker up",
        )
        blocker = step.enqueue("blocker", seconds=2.0)
        wait_until(
            lambda: RecordedRun.objects.filter(token="blocker").exists(),
            message="the worker's one thread busy",
        )
        stale = [
            record.using(expires=timedelta(seconds=0.5)).enqueue(f"stale-{i}") for i in range(5)
        ]
        fresh = [record.using(expires=timedelta(minutes=5)).enqueue(f"fresh-{i}") for i in range(3)]

        outcomes = {
            o.entry_id: o.status
            for o in django_iq.as_completed([blocker, *stale, *fresh], timeout=60)
        }
    finally:
        worker.send_signal(signal.SIGTERM)
        code, output = finish(worker, 30)
    assert code == 0, output[-3000:]

    assert [outcomes[e.pk] for e in stale] == ["expired"] * 5
    assert [outcomes[e.pk] for e in [blocker, *fresh]] == ["succeeded"] * 4
    ran = set(JobRun.objects.values_list("token", flat=True))
    assert ran == {"fresh-0", "fresh-1", "fresh-2"}, "no expired entry ran"
    assert list(RecordedRun.objects.values_list("token", flat=True)) == ["blocker"]
    assert not Entry.objects.exists()
    with pytest.raises(django_iq.JobExpired):
        django_iq.wait(stale[0], timeout=0)


def test_a_leader_ends_expired_entries_of_a_queue_no_worker_serves() -> None:
    stale = [
        record.using(queue="emails", expires=timedelta(seconds=0.3)).enqueue(f"s{i}")
        for i in range(4)
    ]
    kept = record.using(queue="emails", expires=timedelta(hours=1)).enqueue("kept")
    leader = start_command("runleader")
    try:
        statuses = [o.status for o in django_iq.as_completed(stale, timeout=60)]
    finally:
        leader.send_signal(signal.SIGTERM)
        code, output = finish(leader, 30)
    assert code == 0, output[-3000:]

    assert statuses == ["expired"] * 4
    assert list(Entry.objects.values_list("pk", flat=True)) == [kept.pk]
    assert RunOutcome.objects.filter(status="expired").count() == 4
    assert not JobRun.objects.exists()
