"""runworker --max-jobs-per-child and --max-memory-per-child: worker processes replaced after
N entries or past a memory limit, with nothing lost or run twice (real processes, PostgreSQL)."""

from __future__ import annotations

import pytest

from django_iq import enqueue_many
from django_iq.models import Entry, EntryError, GroupLock, Worker
from tests.processes import finish, start_command
from tests.testapp.jobs import record
from tests.testapp.models import JobRun

pytestmark = [pytest.mark.postgresql, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def run_burst(*args: str, timeout: float = 300.0) -> str:
    code, output = finish(start_command("runworker", "--burst", *args), timeout)
    assert code == 0, f"runworker exited {code}:\n{output[-3000:]}"
    return output


def assert_each_ran_once(tokens: set[str]) -> None:
    assert set(JobRun.objects.values_list("token", flat=True)) == tokens, (
        "every entry ran, and JobRun.token is unique: none ran twice"
    )
    assert not Entry.objects.exists() and not GroupLock.objects.exists()
    assert not EntryError.objects.exists()


def test_single_job_mode_runs_each_entry_in_a_process_of_its_own() -> None:
    tokens = {f"solo-{i}" for i in range(200)}
    enqueue_many(record, [((token,), {}) for token in sorted(tokens)])

    run_burst("--processes", "2", "--threads", "1", "--max-jobs-per-child", "1")

    assert_each_ran_once(tokens)
    assert JobRun.objects.values("pid").distinct().count() == 200
    assert Worker.objects.filter(role="worker").count() >= 200
    assert not Worker.objects.filter(died=True).exists(), "recycled, not crashed"


def test_a_child_is_replaced_after_its_max_jobs() -> None:
    tokens = {f"batch-{i}" for i in range(60)}
    enqueue_many(record, [((token,), {}) for token in sorted(tokens)])

    run_burst("--threads", "2", "--max-jobs-per-child", "10")

    assert_each_ran_once(tokens)
    per_pid = [
        JobRun.objects.filter(pid=pid).count()
        for pid in JobRun.objects.values_list("pid", flat=True).distinct()
    ]
    assert len(per_pid) >= 6 and max(per_pid) <= 10, per_pid


def test_a_child_past_its_memory_limit_finishes_its_jobs_and_is_replaced() -> None:
    tokens = {f"heavy-{i}" for i in range(12)}
    enqueue_many(record, [((token,), {}) for token in sorted(tokens)])

    # Every process is over 1 MiB: each runs what it claimed first, then is replaced.
    output = run_burst("--threads", "1", "--max-memory-per-child", "1")

    assert_each_ran_once(tokens)
    assert JobRun.objects.values("pid").distinct().count() >= 2
    assert "memory limit passed" in output
