"""runworker as a subprocess: signals, exit codes, output, option errors."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from django_iq.models import Entry, GroupLock, Queue, Worker
from django_iq.process import SAME_STOP_REQUEST_SECONDS
from tests.conftest import wait_until
from tests.processes import finish, manage, start_command
from tests.testapp.jobs import record, wait_for_file
from tests.testapp.models import JobRun

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def started(token: str) -> bool:
    return JobRun.objects.filter(token__startswith=f"{token}:started:").exists()


def test_sigterm_lets_the_running_job_finish_and_exits_zero(tmp_path: Path) -> None:
    release = tmp_path / "release"
    wait_for_file.enqueue("long", str(release))
    worker = start_command("runworker", "--threads", "2", "-v", "1")

    wait_until(lambda: started("long"), message="the job to start")
    worker.send_signal(signal.SIGTERM)
    wait_until(
        lambda: Worker.objects.filter(stopped_at__isnull=True).exists(), message="worker row"
    )
    assert worker.poll() is None, "the worker must wait for its running job"
    release.touch()
    code, output = finish(worker, 60)

    assert code == 0, output
    assert JobRun.objects.filter(token="long").exists()
    assert Entry.objects.count() == 0
    assert GroupLock.objects.count() == 0
    assert "stopping" in output and "worker stopped" in output
    assert Worker.objects.get().stopped_at is not None


def test_sigterm_releases_the_rest_of_a_group_claim_for_another_worker(tmp_path: Path) -> None:
    release = tmp_path / "release"
    for token in ("g-1", "g-2", "g-3"):
        wait_for_file.using(group_key="order-7").enqueue(token, str(release))
    worker = start_command("runworker", "--threads", "1")

    wait_until(lambda: started("g-1"), message="the first entry of the group to start")
    worker.send_signal(signal.SIGTERM)
    # The job ends only once the worker has taken the stop request in, whatever the load.
    wait_until(lambda: "stopping name=" in worker.output(), message="the stop to be logged")
    release.touch()
    code, output = finish(worker, 60)

    assert code == 0, output
    assert JobRun.objects.filter(token="g-1").exists()
    assert not JobRun.objects.filter(token__in=["g-2", "g-3"]).exists()
    assert sorted(Entry.objects.pending().values_list("args", flat=True)) == [
        ["g-2", str(release)],
        ["g-3", str(release)],
    ]
    assert GroupLock.objects.count() == 0, (
        "the group's lock is released so another worker can take it"
    )


def test_second_signal_stops_at_once_with_exit_code_one(tmp_path: Path) -> None:
    wait_for_file.enqueue("stuck", str(tmp_path / "never"), 120.0)
    worker = start_command("runworker", "--threads", "1", "--shutdown-grace-seconds", "60")

    wait_until(lambda: started("stuck"), message="the job to start")
    worker.send_signal(signal.SIGTERM)
    wait_until(
        lambda: "stopping name=" in worker.output(), message="the first signal to be handled"
    )
    # A signal within SAME_STOP_REQUEST_SECONDS of the first is the same request delivered twice
    # (parent and process group); an operator's second request comes later.
    time.sleep(SAME_STOP_REQUEST_SECONDS + 0.1)  # the wait is what is tested: nothing to poll
    worker.send_signal(signal.SIGINT)
    code, output = finish(worker, 30)

    assert code == 1, output
    assert not JobRun.objects.filter(token="stuck").exists()
    lock = GroupLock.objects.select_related("worker").get()
    # Its job was still running: the worker keeps the lock and is not marked stopped, so the
    # lock goes only once the worker is known gone and the sessions it names are ended.
    assert lock.worker is not None and lock.worker.stopped_at is None, output
    assert bool(lock.worker.sessions) == (connection.vendor != "sqlite"), lock.worker.sessions
    # Its entry is pending under a lock no live worker holds once the worker is silent.
    wait_until(lambda: Entry.objects.locked_by_dead_workers().count() == 1, message="silent")
    assert Entry.objects.computing().count() == 0


def test_burst_exits_zero_when_nothing_is_claimable() -> None:
    record.enqueue_many([((f"b-{i}",), {}) for i in range(25)])

    code, output = finish(start_command("runworker", "--burst", "--threads", "3", "-v", "1"), 60)

    assert code == 0, output
    assert JobRun.objects.count() == 25
    assert "burst done" in output


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (["--threads", "0"], "must be greater than zero, got 0"),
        (["--processes", "two"], "expected a whole number, got 'two'"),
        (["--queues", " , "], "--queues needs at least one queue name"),
        (["--shutdown-grace-seconds", "-1"], "must be at least zero, got -1"),
        (["--shutdown-grace-seconds", "nan"], "expected a finite number of seconds, got 'nan'"),
        (["--shutdown-grace-seconds", "inf"], "expected a finite number of seconds, got 'inf'"),
        (["--shutdown-grace-seconds", "1e9"], "must be at most 86400, got 1e9"),
        (["--threads", "100000"], "must be at most 512, got 100000"),
        (["--max-jobs-per-child", "0"], "must be greater than zero, got 0"),
        (["--max-memory-per-child", "lots"], "expected a whole number, got 'lots'"),
    ],
)
def test_bad_options_are_refused_with_a_clear_message(option: list[str], message: str) -> None:
    result = manage("runworker", "--burst", *option)
    assert result.returncode != 0
    assert message in result.stderr


def test_an_over_long_name_is_refused_before_anything_is_written() -> None:
    Queue.objects.all().delete()

    with pytest.raises(CommandError, match=r"^--name: The name is 300 characters long; at most"):
        call_command("runworker", "--burst", "--queues", "emails", "--name", "x" * 300)

    assert not Queue.objects.exists() and not Worker.objects.exists()


def test_worker_processes_use_their_own_pids() -> None:
    record.enqueue_many([((f"p-{i}",), {}) for i in range(10)])
    code, output = finish(
        start_command("runworker", "--burst", "--processes", "2", "--threads", "1"), 90
    )
    assert code == 0, output
    assert os.getpid() not in set(JobRun.objects.values_list("pid", flat=True))


def test_a_duplicate_of_the_first_signal_does_not_stop_at_once(tmp_path: Path) -> None:
    release = tmp_path / "release"
    wait_for_file.enqueue("dup", str(release))
    worker = start_command("runworker", "--threads", "1")
    wait_until(lambda: started("dup"), message="the job to start")

    worker.send_signal(signal.SIGTERM)
    worker.send_signal(signal.SIGTERM)  # e.g. systemd signalling the whole control group
    wait_until(lambda: "stopping name=" in worker.output(), message="the stop to begin")
    assert worker.poll() is None, "one stop request: the running job may finish"
    release.touch()
    code, output = finish(worker, 60)

    assert code == 0, output
    assert "stopping at once" not in output
    assert JobRun.objects.filter(token="dup").exists()


def test_a_stop_request_reaching_children_as_they_start_still_exits_zero() -> None:
    # systemd and a terminal signal the whole process group: a child that is still starting must
    # stop cleanly, not die inside the handler it inherited from its parent.
    import psutil

    worker = start_command("runworker", "--processes", "3", "--threads", "1")
    parent = psutil.Process(worker.pid)
    wait_until(lambda: len(parent.children()) == 3, timeout=30, interval=0.005, message="forks")
    os.killpg(worker.pid, signal.SIGTERM)
    code, output = finish(worker, 60)

    assert code == 0, output
    assert "Traceback" not in output
    assert not Worker.objects.filter(stopped_at__isnull=True).exists()


def test_a_worker_declared_dead_while_alive_registers_again_and_goes_on() -> None:
    # What the leader does when heartbeats stop reaching the database (an outage, a partition).
    worker = start_command("runworker", "--threads", "1")
    row = wait_until(
        lambda: Worker.objects.filter(pid=worker.pid, stopped_at__isnull=True).first(),
        message="the worker to register",
    )
    assert isinstance(row, Worker)
    Worker.objects.mark_stopped(Worker.objects.filter(pk=row.pk), died=True)

    wait_until(
        lambda: Worker.objects.filter(name=row.name, stopped_at__isnull=True).exists(),
        message="the worker to register again",
    )
    record.enqueue("after-rejoin")
    wait_until(lambda: JobRun.objects.filter(token="after-rejoin").exists(), message="the job")
    worker.send_signal(signal.SIGTERM)
    code, output = finish(worker, 60)

    assert code == 0, output
    assert "registered again" in output
    assert JobRun.objects.get(token="after-rejoin").pid == worker.pid
    assert Worker.objects.get(name=row.name).stopped_at is not None


def test_heartbeats_go_on_while_a_stopping_worker_finishes_its_job(tmp_path: Path) -> None:
    # Otherwise a job running through the grace period looks like a dead worker's, and recovery
    # hands it to another worker while it still runs.
    release = tmp_path / "release"
    wait_for_file.enqueue("graceful", str(release))
    worker = start_command("runworker", "--threads", "1")
    wait_until(lambda: started("graceful"), message="the job to start")
    worker.send_signal(signal.SIGTERM)
    wait_until(lambda: "stopping name=" in worker.output(), message="the stop to begin")
    row = Worker.objects.get(pid=worker.pid)
    beat = row.heartbeat_at

    wait_until(
        lambda: Worker.objects.get(pk=row.pk).heartbeat_at > beat,
        timeout=10,
        message="a heartbeat after the stop began",
    )
    assert worker.poll() is None and Worker.objects.get(pk=row.pk).stopped_at is None
    release.touch()
    code, output = finish(worker, 60)

    assert code == 0, output
    assert Worker.objects.get(pk=row.pk).stopped_at is not None
    assert not Entry.objects.exists() and not GroupLock.objects.exists()
