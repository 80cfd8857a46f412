"""``django_iq.set_progress()`` in a real ``runworker`` process, read with ``progress()`` by the
test, on whichever database the suite runs on: progress advances as the job runs, a report held
back inside the interval is written by a later heartbeat, and the report still held as the run
ends is written before its outcome."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

import django_iq
from django_iq.models import EntryError, Worker
from django_iq.progress_reports import Progress
from django_iq.wait_listener import Hub
from tests.conftest import wait_until
from tests.processes import command_env, start_command
from tests.testapp.jobs import progress_steps, progress_then_retry
from tests.testapp.models import Export

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@contextmanager
def worker(interval_seconds: float, heartbeat_seconds: float = 0.2) -> Iterator[None]:
    """A worker with these progress and heartbeat intervals, stopped gracefully at the end."""
    env = command_env(
        DJANGO_IQ_PROGRESS_INTERVAL_SECONDS=str(interval_seconds),
        DJANGO_IQ_HEARTBEAT_INTERVAL_SECONDS=str(heartbeat_seconds),
    )
    command = start_command("runworker", "--queues", "default", "--threads", "2", env=env)
    try:
        wait_until(
            lambda: Worker.objects.filter(stopped_at__isnull=True).exists(),
            message="the worker up",
        )
        yield
    finally:
        Hub.stop_for_process()  # its connection would keep the test database from being dropped
        command.send_signal(signal.SIGTERM)
        code, output = command.finish(30)
    assert code == 0, output[-3000:]


def reached(entry_id: int, done: float) -> Progress | None:
    report = django_iq.progress(entry_id)
    return report if report is not None and report.done == done else None


def test_a_poller_sees_progress_advance_step_by_step(tmp_path: Path) -> None:
    with worker(interval_seconds=0.05):
        entry = progress_steps.enqueue(str(tmp_path), 3)

        for step in (1, 2, 3):
            report = wait_until(lambda step=step: reached(entry.pk, step), message=f"step {step}")
            assert isinstance(report, Progress)
            assert (report.total, report.note) == (3.0, f"step {step}")
            (tmp_path / str(step)).touch()  # releases the job to its next step

        assert django_iq.wait(entry, timeout=30) == 3
    assert django_iq.progress(entry) is None, "an entry that ended has no progress"


def test_a_report_held_inside_the_interval_is_written_by_a_later_heartbeat(
    tmp_path: Path,
) -> None:
    """With a 3 s interval and heartbeats every 0.2 s: step 1, reported as the run starts, is
    held and shows up once 3 s have passed since the start (the interval counts from there);
    step 2, reported right after the job is let on, is held in turn, and shows up only once
    3 s have passed since step 1 was written: each written by a heartbeat while the job
    waits."""
    with worker(interval_seconds=3.0):
        entry = progress_steps.enqueue(str(tmp_path), 3)
        first = wait_until(lambda: reached(entry.pk, 1), message="step 1")
        first_seen = timezone.now()
        assert isinstance(first, Progress)
        assert (first_seen - first.reported_at).total_seconds() >= 2.9, (
            "step 1 was held until the interval since the run's start had passed"
        )
        assert not (tmp_path / "1").exists(), "the job was still waiting: a heartbeat wrote it"
        (tmp_path / "1").touch()

        second = wait_until(lambda: reached(entry.pk, 2), message="step 2")
        seen_at = timezone.now()

        assert isinstance(second, Progress)
        assert (second.reported_at - first_seen).total_seconds() < 2.0, (
            "step 2 was reported soon after step 1 was seen"
        )
        # Step 1 was written at most one poll (50 ms) before it was seen.
        assert (seen_at - first_seen).total_seconds() >= 2.9, (
            "and held until the interval since step 1's write had passed"
        )
        assert not (tmp_path / "2").exists(), "the job was still waiting: a heartbeat wrote it"
        (tmp_path / "2").touch()
        (tmp_path / "3").touch()
        assert django_iq.wait(entry, timeout=30) == 3


def test_the_report_held_as_the_run_ends_is_written_before_its_outcome() -> None:
    """Three reports in a row, then a failed attempt: all are held (a 30 s interval, counted
    from the run's start: no heartbeat writes them), and step 3 is written as the run ends,
    before the failure is recorded."""
    with worker(interval_seconds=30.0):
        entry = progress_then_retry.enqueue(3)
        wait_until(
            lambda: EntryError.objects.filter(entry_id=entry.pk).exists(),
            message="the attempt failed",
        )

        report = django_iq.progress(entry)

    assert report is not None
    assert (report.done, report.total, report.note) == (3.0, 3.0, "step 3")


def test_the_recipes_view_shows_a_running_export_to_its_owner(tmp_path: Path) -> None:
    """docs/howto/progress.md's view, while a worker runs the entry it names."""
    owner = User.objects.create_user("ada", password="-")
    client = Client()
    client.force_login(owner)
    with worker(interval_seconds=0.05):
        entry = progress_steps.enqueue(str(tmp_path), 2)
        export = Export.objects.create(owner=owner, entry_id=entry.pk)
        wait_until(lambda: reached(entry.pk, 1), message="step 1")

        body = client.get(reverse("export-progress", args=[export.pk])).json()

        assert body["state"] == "running"
        assert (body["progress"]["done"], body["progress"]["total"]) == (1.0, 2.0)
        (tmp_path / "1").touch()
        (tmp_path / "2").touch()
        assert django_iq.wait(entry, timeout=30) == 2
    try:
        body = client.get(reverse("export-progress", args=[export.pk])).json()
    finally:
        Hub.stop_for_process()
    assert body == {"state": "succeeded", "progress": None}
