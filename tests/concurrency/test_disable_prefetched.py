"""A job disabled while a worker holds claims of it that no thread has started yet (prefetched
into its hand-over queue): those claims are handed back, not run. Judged by what the jobs
recorded: no run of the job starts after ``disable()`` returned."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from django_iq import enqueue, enqueue_many, operations
from django_iq.models import Entry, GroupLock
from django_iq.states import EntryState
from tests.processes import command_env, finish, start_command
from tests.testapp.jobs import record, wait_for_file
from tests.testapp.models import JobRun

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def wait_until(condition: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_claims_prefetched_before_a_disable_are_handed_back_not_run(tmp_path: Path) -> None:
    release = tmp_path / "release"
    # Short runs first, so the worker prefetches; then a run that blocks its one thread while
    # claims of the short job wait behind it in the hand-over queue.
    enqueue_many(record, [((f"warm-{i}",), {}) for i in range(40)])
    enqueue(wait_for_file, "blocker", str(release), 60.0)
    enqueue_many(record, [((f"after-{i}",), {}) for i in range(30)])
    worker = start_command("runworker", "--threads", "1", env=command_env())
    try:
        wait_until(
            lambda: JobRun.objects.filter(token__startswith="blocker:started").exists(),
            90,
            "the blocking run to start",
        )
        # The worker fills its hand-over queue meanwhile.
        wait_until(
            lambda: Entry.objects.filter(
                job_name=record.name, lock_key__in=GroupLock.objects.values("key")
            ).exists(),
            10,
            "claims of the short job prefetched behind the blocking run",
        )

        operations.disable([record.name], operations.Actor.of_command("test"))
        disabled_at = time.time()
        time.sleep(0.5)  # the window in which a prefetched claim used to start
        release.touch()
        wait_until(
            lambda: JobRun.objects.filter(token="blocker").exists(), 30, "the blocker to end"
        )
        wait_until(lambda: not GroupLock.objects.exists(), 10, "the claims to be handed back")
        time.sleep(2.0)  # the observation window: a late run would start here

        late = JobRun.objects.filter(token__startswith="after-", started_at__gt=disabled_at)
        assert list(late.values_list("token", flat=True)) == [], "runs after disable() returned"
        left = Entry.objects.filter(job_name=record.name)
        assert left.count() == 30 - JobRun.objects.filter(token__startswith="after-").count()
        assert set(left.values_list("state", "attempts")) == {(EntryState.DISABLED, 0)}
        assert not GroupLock.objects.exists()
    finally:
        release.touch()
        worker.send_signal(signal.SIGTERM)
        code, output = finish(worker, 60)
    assert code == 0, output[-3000:]
