"""Several runworker processes on whichever database the suite runs on (SQLite included)."""

from __future__ import annotations

import itertools

import pytest

from django_iq import enqueue_many
from django_iq.models import Entry, GroupLock
from tests.processes import finish, start_command
from tests.testapp.jobs import record
from tests.testapp.models import JobRun

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_three_worker_processes_share_the_work_and_run_each_entry_once() -> None:
    enqueue_many(record, [((f"any-{i}",), {}) for i in range(300)])
    record.using(group_key="serial").enqueue_many(
        [((f"serial-{i}",), {"group_key": "serial", "seconds": 0.005}) for i in range(10)]
    )

    workers = [start_command("runworker", "--burst", "--threads", "3") for _ in range(3)]
    for worker in workers:
        code, output = finish(worker, 180)
        assert code == 0, output[-3000:]

    tokens = list(JobRun.objects.values_list("token", flat=True))
    assert len(tokens) == len(set(tokens)) == 310, "JobRun.token is unique: a second run would fail"
    assert JobRun.objects.values("pid").distinct().count() >= 2, "more than one process took part"
    serial = sorted(
        JobRun.objects.filter(group_key="serial").values_list("started_at", "finished_at")
    )
    assert all(nxt[0] >= prev[1] for prev, nxt in itertools.pairwise(serial))
    assert Entry.objects.count() == 0 and GroupLock.objects.count() == 0
