"""Several runworker processes on whichever database the suite runs on (SQLite included)."""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import time

import psutil
import pytest

from django_iq import enqueue_many
from django_iq.models import Entry, EntryError, GroupLock, RunOutcome, Worker
from tests.conftest import wait_until
from tests.processes import finish, start_command
from tests.testapp.jobs import record, whoami, whoami_async
from tests.testapp.models import JobRun

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_three_worker_processes_share_the_work_and_run_each_entry_once() -> None:
    enqueue_many(record, [((f"any-{i}",), {}) for i in range(300)])
    record.using(group_key="serial").enqueue_many(
        [((f"serial-{i}",), {"group_key": "serial", "seconds": 0.005}) for i in range(10)]
    )

    workers = [start_command("runworker", "--burst", "--threads", "3") for _ in range(3)]
    for worker in workers:
        code, output = finish(worker, 180)
        assert code == 0, output[-3000:]

    tokens = list(JobRun.objects.values_list("token", flat=True))
    assert len(tokens) == len(set(tokens)) == 310, "JobRun.token is unique: a second run would fail"
    assert JobRun.objects.values("pid").distinct().count() >= 2, "more than one process took part"
    serial = sorted(
        JobRun.objects.filter(group_key="serial").values_list("started_at", "finished_at")
    )
    assert all(nxt[0] >= prev[1] for prev, nxt in itertools.pairwise(serial))
    assert Entry.objects.count() == 0 and GroupLock.objects.count() == 0


def test_supervised_children_stop_gracefully_once_their_supervisor_is_killed() -> None:
    enqueue_many(record, [((f"orphan-{i}",), {"seconds": 0.5}) for i in range(6)])
    supervisor = start_command("runworker", "--processes", "2", "--threads", "1")
    children = wait_until(
        lambda: (
            [
                pid
                for pid in Worker.objects.filter(stopped_at__isnull=True).values_list(
                    "pid", flat=True
                )
                if psutil.Process(pid).ppid() == supervisor.pid
            ]
            if Worker.objects.filter(stopped_at__isnull=True).count() == 2
            else []
        ),
        message="two supervised children",
    )
    wait_until(lambda: JobRun.objects.exists(), message="the children at work")

    os.kill(supervisor.pid, signal.SIGKILL)  # the supervisor alone, not its process group
    killed_at = time.monotonic()
    supervisor.process.wait()

    try:
        wait_until(lambda: all(gone(pid) for pid in children), timeout=10, message="children exit")
    finally:  # children left running must not outlive the test
        with contextlib.suppress(ProcessLookupError):
            os.killpg(supervisor.pid, signal.SIGKILL)
    assert time.monotonic() - killed_at < 6.0, "each child saw its parent gone within seconds"
    stopped = Worker.objects.filter(pid__in=children)
    assert stopped.count() == 2
    assert all(w.stopped_at is not None and not w.died for w in stopped), "marked stopped"
    assert not GroupLock.objects.exists(), "the jobs running finished, the rest released"
    assert not EntryError.objects.exists(), "no run was cut"


def gone(pid: int) -> bool:
    """The process has exited (a zombie waits only for its new parent to reap it)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_job_in_a_worker_process_knows_its_entry_and_its_parents_results() -> None:
    """``django_iq.current()`` in a real worker: the worker's own name, the return value of a
    parent that ran in another run of that process (read from its outcome record), and the
    context of a coroutine job."""
    parent = whoami.enqueue()
    child = whoami.using(after=[parent]).enqueue()
    coroutine = whoami_async.enqueue()

    worker = start_command("runworker", "--burst", "--threads", "2")
    code, output = finish(worker, 120)
    assert code == 0, output[-3000:]

    seen = dict(RunOutcome.objects.values_list("entry_id", "return_value"))
    name = Worker.objects.get(role="worker").name
    assert seen[parent.pk]["worker"] == seen[child.pk]["worker"] == name
    assert seen[child.pk]["entry_id"] == child.pk and seen[child.pk]["attempt"] == 1
    assert seen[child.pk]["parents"] == {str(parent.pk): seen[parent.pk]}
    assert seen[coroutine.pk]["entry_id"] == coroutine.pk, "a coroutine job sees it too"
    assert seen[coroutine.pk]["worker"] == name
