"""A job past its timeout and grace period, blocked in one database statement, with real worker
processes and a leader on PostgreSQL and MariaDB: its process exits at once, and its entry and
group start again only once that run can no longer act (its process gone, its statement ended
in the server). Judged by what the runs recorded: start and end in a file (the end once the
statement returned), and the row the statement itself writes as it ends (``JobRun``, stamped
with the server's clock)."""

from __future__ import annotations

import itertools
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from django.db import connection

from django_iq.models import Entry, EntryError, GroupLock, Worker
from django_iq.process import EXIT_ABANDONED, EXIT_STUCK, SAME_STOP_REQUEST_SECONDS
from tests.conftest import wait_until
from tests.processes import Command, command_env, finish, start_command
from tests.testapp.jobs import sleeps_in_one_statement
from tests.testapp.models import JobRun

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        connection.vendor == "sqlite", reason="SQLite has no statement that sleeps in the server"
    ),
]

TIMEOUT = 1.0  # sleeps_in_one_statement's
GRACE = 1.0
BLOCKED = 8.0  # how long the first run's statement sleeps in the server


@dataclass
class Run:
    token: str
    pid: int
    started: float
    ended: float | None = None  # the statement returned and the job went on

    def end(self, exited_at: float | None) -> float:
        """When the run could act no more: the latest of its own end, its statement's row (the
        statement ended in the server), and its process's exit."""
        committed = JobRun.objects.filter(token=f"{self.token}:{self.pid}").first()
        times = [self.ended or 0.0, committed.finished_at if committed else 0.0, exited_at or 0.0]
        return max(times)


def recorded_runs(path: Path) -> list[Run]:
    runs: dict[tuple[str, int], Run] = {}
    for line in path.read_text().splitlines():
        what, token, pid, at = line.split()
        if what == "start":
            runs[token, int(pid)] = Run(token, int(pid), float(at))
        else:
            runs[token, int(pid)].ended = float(at)
    return sorted(runs.values(), key=lambda run: run.started)


def exit_time(pid: int) -> float | None:
    """The time a process was seen gone (or a zombie waiting for its parent), else None."""
    try:
        if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
            return None
    except psutil.NoSuchProcess:
        pass
    return time.time()


def run_until_done(path: Path, watched: list[Command], pids: dict[int, float]) -> None:
    """Poll until both entries are done and the first run's statement would have ended, noting
    when each worker process (``watched``, or a recorded run's pid) is seen to exit."""
    deadline = time.monotonic() + 45
    while time.monotonic() < deadline:
        for command in watched:
            if command.pid not in pids and command.poll() is not None:
                pids[command.pid] = time.time()
        if path.exists():
            for run in recorded_runs(path):
                if run.pid not in pids and (gone := exit_time(run.pid)) is not None:
                    pids[run.pid] = gone
        runs = recorded_runs(path) if path.exists() else []
        if runs and time.time() > runs[0].started + BLOCKED + 1.0 and not Entry.objects.exists():
            return
        time.sleep(0.05)  # the test's own polling interval
    pytest.fail(f"the entries were not done in time: {path.read_text() if path.exists() else ''}")


def assert_in_turn(path: Path, exits: dict[int, float], lost_as: str) -> list[Run]:
    """The given-up run, then its retry and the group's next entry (in either order: order in
    a group is not kept across a retry) ran one after the other, each once the one before could
    no longer act; the given-up run's statement never returned; one attempt was counted for it,
    as ``lost_as``; nothing is left in the queue."""
    runs = recorded_runs(path)
    assert [run.token for run in runs] in (
        ["stuck", "stuck", "follower"],
        ["stuck", "follower", "stuck"],
    ), runs
    for previous, following in itertools.pairwise(runs):
        ended = previous.end(exits.get(previous.pid))
        assert following.started >= ended, (
            f"{following} started {ended - following.started:.2f}s before {previous} could no "
            "longer act"
        )
    stuck, retry = (run for run in runs if run.token == "stuck")
    assert stuck.ended is None, "the given-up run never went on after its statement"
    assert retry.pid != stuck.pid and retry.ended is not None, "the retry ran to its end"
    errors = list(
        EntryError.objects.filter(job_name=sleeps_in_one_statement.name)
        .order_by("pk")
        .values_list("attempt", "exception_class")
    )
    assert errors == [(1, lost_as)], "one attempt counted, once"
    assert not Entry.objects.exists() and not GroupLock.objects.exists()
    return runs


def assert_runs_never_overlap(path: Path, exits: dict[int, float]) -> list[Run]:
    runs = assert_in_turn(path, exits, "django_iq.exceptions.JobTimeout")
    stuck = runs[0]
    exited_after = exits[stuck.pid] - stuck.started
    # At once: its timeout, the grace period, and the few writes it makes before leaving.
    assert exited_after < TIMEOUT + GRACE + 1.5, f"the stuck process exited {exited_after:.2f}s in"
    return runs


def test_two_worker_processes_a_given_up_run_and_its_retry_never_overlap(tmp_path: Path) -> None:
    path = tmp_path / "runs.log"
    sleeps_in_one_statement.using(group_key="g").enqueue("stuck", BLOCKED, str(path))
    sleeps_in_one_statement.using(group_key="g").enqueue("follower", 0.1, str(path))
    env = command_env(DJANGO_IQ_TIMEOUT_GRACE_SECONDS=str(GRACE))
    leader = start_command("runleader", env=env)
    workers = [start_command("runworker", "--threads", "2", env=env) for _ in range(2)]

    exits: dict[int, float] = {}
    run_until_done(path, workers, exits)

    runs = assert_runs_never_overlap(path, exits)
    stuck = next(worker for worker in workers if worker.pid == runs[0].pid)
    code, output = finish(stuck, 5)
    assert code == EXIT_STUCK, output[-3000:]
    assert Worker.objects.get(pid=stuck.pid).died, "recovery found the stuck process dead"
    for command in [*workers, leader]:
        if command is not stuck:
            command.send_signal(2)
            code, output = finish(command, 30)
            assert code == 0, output[-3000:]


def test_supervised_worker_processes_a_given_up_run_and_its_retry_never_overlap(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.log"
    sleeps_in_one_statement.using(group_key="g").enqueue("stuck", BLOCKED, str(path))
    sleeps_in_one_statement.using(group_key="g").enqueue("follower", 0.1, str(path))
    env = command_env(DJANGO_IQ_TIMEOUT_GRACE_SECONDS=str(GRACE))
    leader = start_command("runleader", env=env)
    supervisor = start_command("runworker", "--processes", "2", "--threads", "2", env=env)

    exits: dict[int, float] = {}
    run_until_done(path, [], exits)

    try:
        runs = assert_runs_never_overlap(path, exits)
    except AssertionError as failed:
        raise AssertionError(f"{failed}\n{supervisor.output()[-4000:]}") from None
    dead = Worker.objects.get(pid=runs[0].pid)
    assert dead.died, "the supervisor saw the stuck process exit and marked it dead"
    wait_until(
        lambda: "worker process replaced index=" in supervisor.output(), message="a fresh child"
    )
    for command in (supervisor, leader):
        command.send_signal(2)
        code, output = finish(command, 30)
        assert code == 0, output[-3000:]


def test_a_run_going_on_when_its_worker_is_killed_and_its_retry_never_overlap(
    tmp_path: Path,
) -> None:
    """A worker is killed (SIGKILL, as an out-of-memory kill would) while a job of it is
    blocked in one database statement: the sessions it named with its heartbeats are ended in
    the server before recovery releases its lock, so the statement cannot commit after the
    entry and its group start again."""
    path = tmp_path / "runs.log"
    long = sleeps_in_one_statement.using(group_key="g", timeout=60)
    long.enqueue("stuck", BLOCKED, str(path))
    long.enqueue("follower", 0.1, str(path))
    leader = start_command("runleader")
    killed = start_command("runworker", "--threads", "2")
    wait_until(lambda: path.exists() and "start stuck" in path.read_text(), message="a run")
    other = start_command("runworker", "--threads", "2")
    time.sleep(1.2)  # two heartbeats (0.5 s in the tests): the run's session is named
    killed.kill_hard()

    exits = {killed.pid: time.time()}
    run_until_done(path, [other], exits)

    assert_in_turn(path, exits, "django_iq.exceptions.WorkerLost")
    for command in (other, leader):
        command.send_signal(signal.SIGINT)
        code, output = finish(command, 30)
        assert code == 0, output[-3000:]


@pytest.mark.parametrize("second_signal", [False, True], ids=["grace-ends", "second-signal"])
def test_a_run_going_on_when_its_worker_stops_and_its_retry_never_overlap(
    tmp_path: Path, second_signal: bool
) -> None:
    """A worker is stopped (SIGTERM) while a job of it is blocked in one database statement,
    and the job is still running when its grace period ends, or when a second signal comes:
    the worker exits at once (status 1) keeping the run's lock, and the entry and its group
    start again only once that process is gone and its statement is ended in the server."""
    path = tmp_path / "runs.log"
    long = sleeps_in_one_statement.using(group_key="g", timeout=60)
    long.enqueue("stuck", BLOCKED, str(path))
    long.enqueue("follower", 0.1, str(path))
    grace = 30.0 if second_signal else 1.0
    env = command_env(DJANGO_IQ_SHUTDOWN_GRACE_SECONDS=str(grace))
    leader = start_command("runleader", env=env)
    stopped = start_command("runworker", "--threads", "2", env=env)
    wait_until(lambda: path.exists() and "start stuck" in path.read_text(), message="a run")
    other = start_command("runworker", "--threads", "2", env=env)
    stopped.send_signal(signal.SIGTERM)
    signalled = time.time()
    if second_signal:
        time.sleep(SAME_STOP_REQUEST_SECONDS + 0.2)  # a second request, not the first twice
        stopped.send_signal(signal.SIGTERM)

    exits: dict[int, float] = {}
    run_until_done(path, [stopped, other], exits)

    try:
        assert_in_turn(path, exits, "django_iq.exceptions.WorkerLost")
    except AssertionError as failed:
        raise AssertionError(f"{failed}\n{stopped.output()[-4000:]}") from None
    code, output = finish(stopped, 5)
    assert code == EXIT_ABANDONED, output[-3000:]
    at_once = SAME_STOP_REQUEST_SECONDS + 0.2 if second_signal else grace
    assert exits[stopped.pid] - signalled < at_once + 2.5, "it exited at once"
    for command in (other, leader):
        command.send_signal(signal.SIGINT)
        code, output = finish(command, 30)
        assert code == 0, output[-3000:]
