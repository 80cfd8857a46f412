"""Cron schedules with no next fire time, under real ``runleader`` and ``runworker`` processes: a
schedule whose fire times run out runs its last fire once and ends; a stored schedule with no
fire time at all ends at the leader's next pass; neither stops recovery of a killed worker's
entry, nor the other cron jobs."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.db import transaction

from django_iq.models import CronJob, Entry, EntryError, GroupLock, Queue, Worker
from tests.conftest import wait_until
from tests.processes import Command, command_env, start_command, stop_cleanly
from tests.testapp.jobs import wait_for_file
from tests.testapp.models import JobRun, RecordedRun

NOOP = "tests.testapp.jobs.noop"

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

# The test settings' one declared cron job, with a schedule that has no fire time: 30 February.
NO_FIRE_ENV = {
    "DJANGO_IQ_TEST_CRON": "1",
    "DJANGO_IQ_TEST_CRON_SCHEDULE": "0 0 30 2 *",
    "DJANGO_IQ_LOG_LEVEL": "INFO",
}


def stored_cron_job(name: str, schedule: str, **fields: object) -> CronJob:
    """A cron job stored with ``schedule`` as it was written before schedules were checked for
    five fields and a next fire time (or by hand): the row is updated past ``save()``, in the
    same transaction, so a running leader never sees the placeholder schedule (it would give
    the cron job an entry for the next minute)."""
    Queue.objects.get_or_create(name="default")
    with transaction.atomic():
        cron_job = CronJob.objects.create(
            name=name,
            schedule="* * * * *",
            job_name="tests.testapp.jobs.recorded",
            args=[name],
            queue_id="default",
            **fields,
        )
        CronJob.objects.filter(pk=cron_job.pk).update(schedule=schedule)
    return cron_job


def runs(token: str) -> int:
    return RecordedRun.objects.filter(token=token).count()


def ended(name: str) -> CronJob | None:
    return CronJob.objects.filter(name=name, ended_at__isnull=False).first()


def kill_a_worker_mid_job_and_recover(tmp_path: Path, env: dict[str, str]) -> Command:
    """Enqueue a job that waits for a file, SIGKILL the worker running it, and let another
    worker finish it once the leader recovered its entry; return the second worker."""
    release = tmp_path / "release"
    wait_for_file.enqueue("survivor", str(release))
    doomed = start_command("runworker", "--threads", "1", env=env)
    wait_until(
        lambda: JobRun.objects.filter(token__startswith="survivor:started:").exists(),
        message="the job to start",
    )
    doomed.kill_hard()
    release.touch()
    rescuer = start_command("runworker", "--threads", "1", env=env)
    wait_until(
        lambda: JobRun.objects.filter(token="survivor").exists(),
        timeout=20,
        message="the killed worker's entry to be recovered and run again",
    )
    assert EntryError.objects.filter(exception_class="django_iq.exceptions.WorkerLost").exists()
    wait_until(
        lambda: (
            not Entry.objects.filter(cron_job__isnull=True).exists()
            and not GroupLock.objects.filter(key__startswith="survivor").exists()
        ),
        message="the recovered entry to be done",
    )
    return rescuer


def test_a_schedule_whose_fire_times_run_out_runs_its_last_fire_once_and_ends() -> None:
    env = command_env(DJANGO_IQ_LOG_LEVEL="INFO")
    leader = start_command("runleader", env=env)
    worker = start_command("runworker", "--threads", "1", env=env)
    wait_until(
        lambda: Worker.objects.filter(stopped_at__isnull=True).count() == 2,
        message="the leader and the worker to start",
    )
    # croniter's seven-field form (second, year last), as it was stored before it was refused:
    # its only fire time is a few seconds from now (the leader's first look must come before it).
    last = (datetime.now(UTC) + timedelta(seconds=4)).replace(microsecond=0)
    schedule = f"{last.minute} {last.hour} {last.day} {last.month} * {last.second} {last.year}"
    stored_cron_job("runs-out", schedule)

    wait_until(lambda: runs("runs-out"), timeout=20, message="the last fire to run")
    wait_until(lambda: ended("runs-out"), timeout=10, message="the cron job to end")
    stop_cleanly(worker, leader)

    assert runs("runs-out") == 1, "the last fire runs once, not again and again"
    cron_job = CronJob.objects.get(name="runs-out")
    assert cron_job.is_done and cron_job.last_outcome == "succeeded"
    assert cron_job.end_reason.startswith(f"{schedule!r} has no fire time after ")
    assert cron_job.next_run_at is None
    assert not Entry.objects.filter(cron_job=cron_job).exists()
    assert not EntryError.objects.exists(), "the run's success was written, once"
    assert "cron job ended name=runs-out" in worker.output()
    assert "leader pass failed" not in leader.output()


def test_a_stored_schedule_with_no_fire_time_ends_and_recovery_goes_on(tmp_path: Path) -> None:
    # As after an operator cancelled the waiting entry of a schedule whose years ran out: no
    # entry, no fire time; and a schedule with none at all (30 February).
    stored_cron_job("ran-out", "0 9 * * 1-5 0 2020")
    stored_cron_job("never", "0 0 30 2 *")
    env = command_env(DJANGO_IQ_LOG_LEVEL="INFO")
    leader = start_command("runleader", env=env)

    wait_until(
        lambda: ended("ran-out") and ended("never"), timeout=10, message="both cron jobs to end"
    )
    rescuer = kill_a_worker_mid_job_and_recover(tmp_path, env)
    stop_cleanly(rescuer, leader)

    assert "'0 9 * * 1-5 0 2020' has no fire time after" in ended("ran-out").end_reason  # type: ignore[union-attr]
    assert "'0 0 30 2 *' has no fire time after" in ended("never").end_reason  # type: ignore[union-attr]
    assert not Entry.objects.filter(cron_job__isnull=False).exists()
    assert RecordedRun.objects.count() == 0, "neither cron job ran"
    output = leader.output()
    assert "leader pass failed" not in output and "duty failed" not in output
    assert "recovered lock=" in output
    assert output.count("cron job ended name=never") == 1, "ended once, not on every pass"
    listed = start_command("iq_cron", "list", "--json", env=env)
    code, text = listed.finish(30)
    assert code == 0, text
    rows = {row["name"]: row for row in json.loads(text[text.index("{") :])["cron_jobs"]}
    assert rows["never"]["is_done"] and "has no fire time" in rows["never"]["end_reason"]


def test_a_declared_schedule_with_no_fire_time_is_refused_and_stops_no_other_duty(
    tmp_path: Path,
) -> None:
    env = command_env(**NO_FIRE_ENV)
    check = start_command("check", env=env)
    code, output = check.finish(60)
    assert code != 0 and "django_iq.E015" in output, output[-3000:]
    assert "'0 0 30 2 *' has no fire time" in output, output[-3000:]

    # Started past the check: the declaration is refused (the row stored while it was valid
    # ends, saying why), and recovery and the other cron jobs go on.
    Queue.objects.get_or_create(name="default")
    CronJob.objects.create(
        name="tick", schedule="* * * * *", job_name=NOOP, queue_id="default", is_declared=True
    )
    CronJob.objects.create(
        name="often",
        every_seconds=1,
        job_name="tests.testapp.jobs.recorded",
        args=["often"],
        queue_id="default",
    )
    leader = start_command("runleader", "--skip-checks", env=env)
    rescuer = kill_a_worker_mid_job_and_recover(tmp_path, command_env())
    wait_until(lambda: runs("often") >= 2, timeout=20, message="the interval to keep firing")
    stop_cleanly(rescuer, leader)

    tick = CronJob.objects.get(name="tick")
    assert tick.is_done and tick.end_reason.startswith("DJANGO_IQ['CRON'] declares it with a")
    assert "'0 0 30 2 *' has no fire time after" in tick.end_reason
    assert not Entry.objects.filter(cron_job=tick).exists()
    output = leader.output()
    assert "leader pass failed" not in output and "duty failed" not in output
    assert "recovered lock=" in output
    refusals = [line for line in output.splitlines() if "cron job refused name=tick" in line]
    assert len(refusals) == 1, "refused once, not on every pass"
    assert "'0 0 30 2 *' has no fire time after" in refusals[0]
