"""Outcome records with worker processes on PostgreSQL: every run several workers drained left
one record naming the process that ran it, and a worker killed mid-job leaves, once recovery
has failed its attempt, a failed record naming it. Judged by what the jobs recorded."""

from __future__ import annotations

from pathlib import Path

import pytest

from django_iq.duties import RecoveryDuty
from django_iq.leader import Leader
from django_iq.models import Entry, RunOutcome, Worker
from tests.conftest import wait_until
from tests.processes import finish, pid_of, start_command
from tests.testapp.jobs import record, wait_for_file
from tests.testapp.models import JobRun

pytestmark = [pytest.mark.postgresql, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_each_run_of_several_workers_leaves_one_record_naming_its_process() -> None:
    record.enqueue_many([((f"r{i}",), {}) for i in range(300)])

    workers = [start_command("runworker", "--burst", "--threads", "3") for _ in range(3)]
    for worker in workers:
        code, output = finish(worker, 180)
        assert code == 0, output[-3000:]

    ran_in = dict(JobRun.objects.values_list("token", "pid"))
    assert len(ran_in) == 300 and JobRun.objects.count() == 300, "each entry ran once"
    outcomes = list(RunOutcome.objects.values_list("return_value", "status", "worker_name"))
    assert len(outcomes) == 300
    for token, status, worker_name in outcomes:
        assert status == "succeeded"
        assert pid_of(worker_name) == ran_in[token], (token, worker_name)
    assert len(set(ran_in.values())) >= 2
    assert not Entry.objects.exists()


def test_a_run_lost_with_its_killed_worker_is_recorded_as_failed_by_recovery(
    tmp_path: Path,
) -> None:
    release = tmp_path / "release"
    entry = wait_for_file.enqueue("lost", str(release))
    worker = start_command("runworker", "--threads", "1")
    started = wait_until(
        lambda: JobRun.objects.filter(token__startswith="lost:started:").first(),
        timeout=60,
        message="the job to start",
    )
    worker.kill_hard()
    dead = Worker.objects.get(pid=started.pid, role="worker")
    assert not RunOutcome.objects.exists(), "a run still going leaves no record"

    leader = Leader(name="recovery", duties=[RecoveryDuty()], lease_seconds=30)

    def recovered() -> bool:
        leader.run_once()
        return RunOutcome.objects.exists()

    wait_until(recovered, timeout=60, interval=0.5, message="recovery to fail the lost run")

    lost = RunOutcome.objects.get()
    assert (lost.entry_id, lost.status, lost.attempt) == (entry.pk, "failed", 1)
    assert lost.exception_class == "django_iq.exceptions.WorkerLost"
    assert lost.worker_name == dead.name and pid_of(dead.name) == started.pid
    assert f"Worker {dead.name} was found dead" in lost.traceback
    assert lost.started_at is not None and lost.started_at <= lost.finished_at
    assert not JobRun.objects.filter(token="lost").exists(), "the killed run never finished"

    release.touch()
    again = start_command("runworker", "--burst", "--threads", "1")
    code, output = finish(again, 120)
    assert code == 0, output[-3000:]
    second = RunOutcome.objects.get(attempt=2)
    finished = JobRun.objects.get(token="lost")
    assert second.status == "succeeded" and pid_of(second.worker_name) == finished.pid
    assert second.worker_name != dead.name
