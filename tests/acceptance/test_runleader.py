"""runleader and runworker as subprocesses: failover, stale leaders, recovery after kill -9."""

from __future__ import annotations

import itertools
import signal
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from django_iq.models import CronJob, Entry, EntryError, GroupLock, LeaderLease, Worker
from tests.conftest import wait_until
from tests.processes import (
    command_env,
    elect_one_of_two_leaders,
    lease_holder,
    manage,
    pid_of,
    start_command,
)
from tests.testapp.jobs import kill_worker, wait_for_file
from tests.testapp.models import JobRun, RecordedRun

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

LEASE_SECONDS = 2.0  # LEADER_LEASE_SECONDS in tests/settings.py
CRON_ENV = {"DJANGO_IQ_TEST_CRON": "1"}


def test_two_leaders_one_acts_and_the_standby_takes_over_after_kill_9() -> None:
    active, standby, active_name = elect_one_of_two_leaders()
    assert "leader elected" in active.output() and "leader elected" not in standby.output()

    active.kill_hard()
    killed_at = time.monotonic()
    wait_until(
        lambda: lease_holder() and lease_holder() != active_name,
        timeout=15,
        message="the standby to take over",
    )
    took = time.monotonic() - killed_at

    assert pid_of(lease_holder()) == standby.pid
    assert took <= LEASE_SECONDS + 2.0, f"takeover took {took:.1f}s; bound is lease + poll + slack"
    assert LeaderLease.objects.current().epoch == 2
    standby.send_signal(signal.SIGTERM)
    code, output = standby.finish(30)
    assert code == 0, output
    assert "leadership released" in output
    assert lease_holder() == ""


@pytest.mark.skipif(
    connection.vendor == "sqlite",
    reason="a process paused inside a write transaction holds SQLite's database-wide write lock; "
    "failover needs a server database (covered in-process by test_leader.py on SQLite)",
)
def test_a_paused_leader_that_comes_back_does_not_act() -> None:
    first = start_command("runleader", env=command_env(**CRON_ENV))
    wait_until(lease_holder, message="a leader to be elected")
    wait_until(lambda: CronJob.objects.filter(name="tick").exists(), message="cron synced")
    stale_name = lease_holder()
    first.send_signal(signal.SIGSTOP)
    second = start_command("runleader", env=command_env(**CRON_ENV))
    wait_until(
        lambda: lease_holder() and lease_holder() != stale_name,
        timeout=15,
        message="the standby to take over",
    )

    first.send_signal(signal.SIGCONT)
    wait_until(
        lambda: "leadership lost" in first.output(),
        timeout=15,
        message="the stale leader to notice",
    )

    assert pid_of(lease_holder()) == second.pid
    assert Entry.objects.filter(cron_job__name="tick").count() == 1, (
        "never two entries for one cron job"
    )
    for command in (first, second):
        command.send_signal(signal.SIGTERM)
        assert command.finish(30)[0] == 0


def test_leader_recovers_the_entry_of_a_worker_killed_mid_job(tmp_path: Path) -> None:
    release = tmp_path / "release"
    wait_for_file.enqueue("survivor", str(release))
    leader = start_command("runleader")
    doomed = start_command("runworker", "--threads", "1")
    wait_until(
        lambda: JobRun.objects.filter(token__startswith="survivor:started:").exists(),
        message="start",
    )

    doomed.kill_hard()
    release.touch()
    rescuer = start_command("runworker", "--threads", "1")
    wait_until(
        lambda: JobRun.objects.filter(token="survivor").exists(),
        timeout=30,
        message="another worker to finish it",
    )

    runs = set(
        JobRun.objects.filter(token__startswith="survivor:started:").values_list("pid", flat=True)
    )
    assert runs == {doomed.pid, rescuer.pid}, "the entry ran in the killed worker, then in another"
    error = EntryError.objects.get()
    assert error.exception_class == "django_iq.exceptions.WorkerLost" and error.attempt == 1
    assert "found dead" in error.message
    wait_until(
        lambda: not Entry.objects.exists() and not GroupLock.objects.exists(), message="clean up"
    )
    for command in (leader, rescuer):
        command.send_signal(signal.SIGTERM)
        assert command.finish(30)[0] == 0
    assert "stuck lock=" in leader.output() and "recovered lock=" in leader.output()


def test_an_entry_that_keeps_killing_its_worker_decays_and_finally_fails() -> None:
    kill_worker.using(priority=30).enqueue()
    leader = start_command("runleader")
    workers = start_command("runworker", "--processes", "2", "--threads", "1")

    wait_until(
        lambda: EntryError.objects.filter(is_final=True).exists(),
        timeout=60,
        message="final failure",
    )

    errors = list(
        EntryError.objects.order_by("attempt").values_list(
            "attempt", "priority", "is_final", "exception_class"
        )
    )
    assert errors == [
        (1, 30, False, "django_iq.exceptions.WorkerLost"),
        (2, 20, False, "django_iq.exceptions.WorkerLost"),
        (3, 10, True, "django_iq.exceptions.WorkerLost"),
    ]
    assert JobRun.objects.filter(token__startswith="kill:").count() == 3
    assert not Entry.objects.exists()
    # The supervisor marked each crashed child dead by its name as it saw it exit, sooner than
    # recovery would have found it silent.
    killed = Worker.objects.filter(
        pid__in=JobRun.objects.filter(token__startswith="kill:").values("pid")
    )
    assert len(killed) == 3 and all(w.died for w in killed)
    assert all(w.stopped_at - w.heartbeat_at < timedelta(seconds=2) for w in killed)
    for command in (workers, leader):
        command.send_signal(signal.SIGTERM)
        assert command.finish(60)[0] == 0
    assert "worker process crashed" in workers.output()


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (["--lease-seconds", "nan"], "expected a finite number of seconds, got 'nan'"),
        (["--lease-seconds", "0.5"], "must be at least 1, got 0.5"),
        (["--poll-seconds", "inf"], "expected a finite number of seconds, got 'inf'"),
        (["--poll-seconds", "-1"], "must be at least 0.01, got -1"),
    ],
)
def test_bad_options_are_refused_with_a_clear_message(option: list[str], message: str) -> None:
    result = manage("runleader", *option)
    assert result.returncode != 0
    assert message in result.stderr


def test_an_over_long_name_is_refused_before_anything_is_written() -> None:
    with pytest.raises(CommandError, match=r"^--name: The name is 300 characters long; at most"):
        call_command("runleader", "--name", "x" * 300)

    assert not Worker.objects.exists() and not LeaderLease.objects.exists()


@pytest.mark.skipif(
    connection.vendor == "sqlite",
    reason="a leader and a worker writing every second contend for SQLite's single writer; "
    "the cadence is covered in-process by tests/leader/test_cron_schedules.py",
)
def test_an_interval_fires_every_second_and_a_one_off_once_under_runleader() -> None:
    at = datetime.now(UTC) + timedelta(seconds=3)
    env = command_env(DJANGO_IQ_TEST_SCHEDULES="1", DJANGO_IQ_TEST_SCHEDULES_AT=at.isoformat())
    leader = start_command("runleader", env=env)
    worker = start_command("runworker", "--threads", "2", env=env)

    def runs(token: str) -> list[float]:
        return list(
            RecordedRun.objects.filter(token=token)
            .order_by("started_at")
            .values_list("started_at", flat=True)
        )

    wait_until(lambda: len(runs("often")) >= 6, timeout=60, message="six interval runs")
    wait_until(lambda: runs("once"), timeout=30, message="the one-off to run")
    # Past its time, with the leader still passing every second, the one-off must stay at one.
    time.sleep(3)  # several leader passes after the one-off ran: none may fire it again
    often, once = runs("often"), runs("once")

    for command in (leader, worker):
        command.send_signal(signal.SIGTERM)
        assert command.finish(30)[0] == 0
    assert len(once) == 1, f"the one-off ran {len(once)} times"
    assert once[0] >= at.timestamp(), "not before its time"
    gaps = [later - earlier for earlier, later in itertools.pairwise(often)]
    assert min(gaps) >= 0.5, f"runs in a burst (a backlog, or a fire run twice): {gaps}"
    assert sum(gaps) / len(gaps) <= 1.5, f"about one run a second: {gaps}"
    cron_job = CronJob.objects.get(name="once")
    assert cron_job.fired_at is not None and cron_job.last_outcome == "succeeded"
