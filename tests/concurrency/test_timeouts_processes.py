"""Timeouts with real worker processes on PostgreSQL: a job past its timeout fails with
``JobTimeout`` and is retried while other jobs flow; a job blocked in C past the grace period
has its process exit at once and replaced, its entry given up as timed out, and its claim
released once the process is gone. Judged by what the jobs recorded (start and end of each
run)."""

from __future__ import annotations

import pytest

from django_iq import enqueue_many
from django_iq.models import Entry, EntryError, GroupLock, Worker
from tests.conftest import wait_until
from tests.factories import attempt_errors
from tests.processes import command_env, finish, start_command
from tests.testapp.jobs import blocks_in_c, overruns, record
from tests.testapp.models import JobRun, RecordedRun

pytestmark = [pytest.mark.postgresql, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

TIMEOUT = "django_iq.exceptions.JobTimeout"
GRACE_SECONDS = 1.0


def errors(job_name: str) -> list[tuple[int, str, bool]]:
    return attempt_errors(job_name=job_name)


def test_timed_out_and_stuck_jobs_with_several_worker_processes() -> None:
    blocks_in_c.enqueue("blocked", 8)
    overruns.enqueue("overrun", 30)
    tokens = {f"flow-{i}" for i in range(80)}
    enqueue_many(record, [((token,), {"seconds": 0.05}) for token in sorted(tokens)])

    env = command_env(DJANGO_IQ_TIMEOUT_GRACE_SECONDS=str(GRACE_SECONDS))
    leader = start_command("runleader", env=env)
    command = start_command("runworker", "--processes", "2", "--threads", "2", env=env)
    wait_until(
        lambda: not Entry.objects.exists() and not GroupLock.objects.exists(),
        timeout=60,
        message="every entry done, the last stuck process's claim released",
    )
    for process in (command, leader):
        process.send_signal(2)
    code, output = finish(command, 60)
    assert code == 0, output[-3000:]
    assert finish(leader, 30)[0] == 0

    # Other jobs flowed: each ran once (JobRun.token is unique).
    assert set(JobRun.objects.values_list("token", flat=True)) == tokens
    # The Python-level overrun: cut at its deadline, retried, cut again.
    assert errors(overruns.name) == [(1, TIMEOUT, False), (2, TIMEOUT, True)]
    cut = RecordedRun.objects.filter(token="overrun")
    assert cut.count() == 2 and not cut.filter(finished_at__isnull=False).exists()
    # The job blocked in C: given up after timeout + grace, twice, each time in a process that
    # exited at once and was replaced; its retry started only once the first process was gone.
    assert errors(blocks_in_c.name) == [(1, TIMEOUT, False), (2, TIMEOUT, True)]
    assert all(
        "given up" in message
        for message in EntryError.objects.filter(job_name=blocks_in_c.name).values_list(
            "message", flat=True
        )
    )
    first, second = RecordedRun.objects.filter(token="blocked").order_by("started_at")
    assert first.pid != second.pid
    assert second.started_at - first.started_at >= 0.3 + GRACE_SECONDS - 0.05
    assert output.count("worker process replaced index=") == 2, output[-3000:]
    stuck_pids = {first.pid, second.pid}
    assert (
        set(Worker.objects.filter(pid__in=stuck_pids, died=True).values_list("pid", flat=True))
        == stuck_pids
    ), "the supervisor marked each stuck process dead once it had exited"
    assert Worker.objects.filter(role="worker").count() >= 4, "two replaced, two more started"
    assert not GroupLock.objects.exists(), "nothing left locked"
