"""A worker process stuck on a job blocked in C, on whichever database the suite runs on: the
process exits at once with status 4, the entry's attempt counted as timed out; its claim's lock
stays until recovery finds the process dead, and is then released without counting another
attempt, so the claim's next entry runs (docs/howto/timeouts.md)."""

from __future__ import annotations

import time

import pytest
from django.utils import timezone

from django_iq.managers.jobstats import QUANTILE_RELATIVE_ERROR
from django_iq.models import Entry, EntryError, GroupLock, JobMinute, Worker
from django_iq.process import EXIT_STUCK
from tests.conftest import wait_until
from tests.processes import command_env, finish, start_command
from tests.testapp.jobs import blocks_in_c, record
from tests.testapp.models import JobRun, RecordedRun

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

GRACE_SECONDS = 0.5


def test_a_worker_process_stuck_on_a_job_exits_at_once_and_recovery_frees_its_claim() -> None:
    stuck = blocks_in_c.using(max_attempts=1, group_key="g").enqueue("stuck", 8)
    after = record.using(group_key="g").enqueue("after")
    env = command_env(DJANGO_IQ_TIMEOUT_GRACE_SECONDS=str(GRACE_SECONDS))

    started = time.monotonic()
    command = start_command("runworker", "--threads", "2", env=env)
    code, output = finish(command, 60)

    assert code == EXIT_STUCK, output[-3000:]
    # Import and start-up, then the 0.3 s timeout and the grace period: not the 8 s sleep.
    assert time.monotonic() - started < 6.0, output[-3000:]
    error = EntryError.objects.get(entry_id=stuck.pk)
    assert (error.exception_class, error.is_final) == ("django_iq.exceptions.JobTimeout", True)
    assert "given up" in error.message
    assert RecordedRun.objects.get(token="stuck").finished_at is None, "it left while blocked"
    # The given-up run counts as a failure that lasted its timeout and the grace period.
    (stats,) = [
        s for s in JobMinute.objects.last_hour(timezone.now()) if s.job_name == blocks_in_c.name
    ]
    assert (stats.runs, stats.failed) == (1, 1)
    assert stats.p50_seconds is not None
    assert stats.p50_seconds >= (0.3 + GRACE_SECONDS) * (1 - QUANTILE_RELATIVE_ERROR)
    # It did not mark itself stopped: the lock stays, pointing at no entry in flight, until
    # someone who knows the process is gone releases it.
    assert Worker.objects.get(pid=command.pid).stopped_at is None
    lock = GroupLock.objects.get()
    assert lock.entry_id is None
    assert Entry.objects.get(pk=after.pk).state == "pending"

    leader = start_command("runleader", env=env)
    worker = start_command("runworker", "--threads", "1", env=env)
    wait_until(
        lambda: not Entry.objects.exists() and not GroupLock.objects.exists(),
        message="the claim's next entry done",
    )

    assert JobRun.objects.filter(token="after").exists()
    assert Worker.objects.get(pid=command.pid).died, "recovery found the process silent"
    assert EntryError.objects.count() == 1, "the release counted no further attempt"
    for process in (worker, leader):
        process.send_signal(2)
        code, output = finish(process, 30)
        assert code == 0, output[-3000:]
