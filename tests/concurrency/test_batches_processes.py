"""Batches with several worker processes on PostgreSQL: a batch of 1,000 members, one in seven
failing for good, calls its ``on_complete`` exactly once, after every member ended, with the
right counts, also while workers are killed with SIGKILL mid-run and the leader recovers their
entries. Judged by what the jobs recorded (RecordedRun rows written by the jobs themselves)."""

from __future__ import annotations

import signal

import pytest

import django_iq
from django_iq.models import Batch, Entry, EntryDependency, EntryError, GroupLock, Worker
from tests.conftest import wait_until
from tests.processes import Command, finish, start_command
from tests.testapp.jobs import batch_done, batch_member
from tests.testapp.models import RecordedRun

pytestmark = [pytest.mark.postgresql, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

MEMBERS = 1000
FAILING = {i for i in range(MEMBERS) if i % 7 == 0}


def enqueue_batch(seconds: float) -> int:
    """The batch: members one by one and in bulk, one in seven raising ``Fail``."""
    with django_iq.batch(on_complete=batch_done, label=":done") as b:
        for i in range(100):
            batch_member.enqueue(f"m{i}", seconds=seconds, fail=i in FAILING)
        django_iq.enqueue_many(
            batch_member,
            [((f"m{i}",), {"seconds": seconds, "fail": i in FAILING}) for i in range(100, MEMBERS)],
        )
    return b.id


def stop(commands: list[Command]) -> None:
    for command in commands:
        if command.poll() is None:
            command.send_signal(signal.SIGTERM)
    for command in commands:
        code, output = finish(command, 120)
        assert code == 0, output[-3000:]


def assert_called_back_once_after_every_member(batch_id: int) -> None:
    """The callback ran once, with 857 successes and 143 failures, after the last recorded end
    of any member's run; every member finished a run; nothing is left behind."""
    (callback,) = RecordedRun.objects.filter(token=f"batch:{batch_id}").values_list(
        "group_key", "started_at"
    )
    assert callback[0] == f"{MEMBERS - len(FAILING)}/{len(FAILING)}:done"
    members = RecordedRun.objects.filter(token__startswith="m")
    finished = set(members.filter(finished_at__isnull=False).values_list("token", flat=True))
    assert finished == {f"m{i}" for i in range(MEMBERS)}, "every member finished a run"
    last_end = max(members.exclude(finished_at=None).values_list("finished_at", flat=True))
    assert callback[1] >= last_end, "the callback started before a member's run ended"
    failed = EntryError.objects.filter(is_final=True, job_name=batch_member.name)
    assert failed.count() == len(FAILING)
    assert set(failed.values_list("exception_class", flat=True)) == {"django_iq.exceptions.Fail"}
    batch = Batch.objects.get(pk=batch_id)
    assert (batch.total, batch.failed) == (MEMBERS, len(FAILING))
    assert not Entry.objects.exists() and not EntryDependency.objects.exists()


def test_a_batch_of_a_thousand_calls_back_once_across_worker_processes() -> None:
    batch_id = enqueue_batch(seconds=0.0)
    workers = [start_command("runworker", "--threads", "3") for _ in range(3)]
    wait_until(
        lambda: RecordedRun.objects.filter(token=f"batch:{batch_id}").exists(),
        timeout=240,
        message="the batch's callback to run",
    )
    wait_until(lambda: not Entry.objects.exists() and not GroupLock.objects.exists(), timeout=60)
    stop(workers)

    assert_called_back_once_after_every_member(batch_id)
    assert RecordedRun.objects.values("pid").distinct().count() >= 2


def test_a_batch_calls_back_once_while_workers_are_killed_and_recovered() -> None:
    batch_id = enqueue_batch(seconds=0.05)
    leader = start_command("runleader")
    workers = [start_command("runworker", "--threads", "3") for _ in range(3)]
    killed: list[int] = []
    for victim in (0, 1, 0):
        wait_until(
            lambda victim=victim: RecordedRun.objects.filter(
                pid=workers[victim].pid, finished_at__isnull=True
            ).exists(),
            timeout=60,
            message="the worker to be running a member",
        )
        killed.append(workers[victim].pid)
        workers[victim].kill_hard()  # SIGKILL of the process group, mid-run
        workers[victim] = start_command("runworker", "--threads", "3")
        # The replacement registered (and claims) before the next kill.
        wait_until(
            lambda victim=victim: Worker.objects.filter(
                pid=workers[victim].pid, stopped_at__isnull=True
            ).exists(),
            timeout=60,
            message="the replacement worker to register",
        )
    wait_until(
        lambda: RecordedRun.objects.filter(token=f"batch:{batch_id}").exists(),
        timeout=240,
        message="the batch's callback to run",
    )
    wait_until(lambda: not Entry.objects.exists() and not GroupLock.objects.exists(), timeout=60)
    stop([*workers, leader])

    assert_called_back_once_after_every_member(batch_id)
    # The kills hit members mid-run: runs that never ended, entries recovered and run again.
    interrupted = RecordedRun.objects.filter(pid__in=killed, finished_at__isnull=True)
    assert interrupted.exists()
    assert EntryError.objects.filter(exception_class="django_iq.exceptions.WorkerLost").exists()
