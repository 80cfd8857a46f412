"""Several real runworker processes on PostgreSQL: exactly once, group exclusivity, caps."""

from __future__ import annotations

import itertools

import pytest

from django_iq import enqueue_many
from django_iq.models import Entry, EntryError, GroupLock, Queue, Worker
from tests.processes import command_env, finish, start_command
from tests.testapp.jobs import record
from tests.testapp.models import JobRun

pytestmark = [pytest.mark.postgresql, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def run_workers(
    count: int, *args: str, timeout: float = 240.0, env: dict[str, str] | None = None
) -> list[str]:
    processes = [start_command("runworker", "--burst", *args, env=env) for _ in range(count)]
    outputs = []
    for process in processes:
        code, output = finish(process, timeout)
        assert code == 0, f"worker exited {code}:\n{output[-3000:]}"
        outputs.append(output)
    return outputs


def test_three_worker_processes_run_two_thousand_entries_exactly_once() -> None:
    enqueue_many(record, [((f"once-{i}",), {}) for i in range(2000)])

    run_workers(3, "--threads", "4")

    tokens = set(JobRun.objects.values_list("token", flat=True))
    assert tokens == {f"once-{i}" for i in range(2000)}, (
        "every entry must run, and JobRun.token is unique"
    )
    assert JobRun.objects.values("pid").distinct().count() == 3, "all three processes took part"
    assert Entry.objects.count() == 0
    assert GroupLock.objects.count() == 0
    assert EntryError.objects.count() == 0


def test_entries_sharing_a_group_key_never_overlap_in_time() -> None:
    for group in range(6):
        record.using(group_key=f"customer-{group}").enqueue_many(
            [
                ((f"g{group}-{i}",), {"group_key": f"customer-{group}", "seconds": 0.02})
                for i in range(15)
            ]
        )
    record.enqueue_many([((f"free-{i}",), {"seconds": 0.1}) for i in range(30)])

    # Without prefetch a process holds at most one claim per thread, so the first process up
    # cannot take every free entry before the others have started.
    run_workers(
        3,
        "--threads",
        "4",
        env=command_env(DJANGO_IQ_PREFETCH_PER_THREAD="0", DJANGO_IQ_PREFETCH_PER_PROCESS="0"),
    )

    assert JobRun.objects.count() == 6 * 15 + 30
    for group in range(6):
        runs = sorted(
            JobRun.objects.filter(group_key=f"customer-{group}").values_list(
                "started_at", "finished_at"
            )
        )
        assert len(runs) == 15
        for (_, previous_end), (next_start, _) in itertools.pairwise(runs):
            assert next_start >= previous_end, f"customer-{group}: runs overlap {runs}"
    free_pids = set(JobRun.objects.filter(token__startswith="free-").values_list("pid", flat=True))
    assert len(free_pids) >= 2, "ungrouped entries spread over processes"


def test_queue_max_concurrency_holds_across_processes() -> None:
    Queue.objects.ensure("reports")
    Queue.objects.filter(name="reports").update(max_concurrency=2)
    record.using(queue="reports").enqueue_many(
        [((f"cap-{i}",), {"seconds": 0.05}) for i in range(24)]
    )

    run_workers(3, "--threads", "4", "--queues", "reports")

    runs = list(JobRun.objects.values_list("started_at", "finished_at"))
    assert len(runs) == 24
    events = sorted(
        [(start, 1) for start, _ in runs] + [(end, -1) for _, end in runs],
        key=lambda e: (e[0], e[1]),
    )
    running = peak = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    assert peak <= 2, f"at most 2 reports entries may run at once, saw {peak}"
    assert Worker.objects.filter(stopped_at__isnull=True).count() == 0, (
        "burst workers mark themselves stopped"
    )


def test_supervised_processes_option_runs_all_entries_once() -> None:
    enqueue_many(record, [((f"sup-{i}",), {}) for i in range(300)])

    (output,) = run_workers(1, "--processes", "3", "--threads", "2", "-v", "1")

    assert JobRun.objects.count() == 300
    assert JobRun.objects.values("pid").distinct().count() >= 2, output[-2000:]
    assert Entry.objects.count() == 0


def test_only_a_worker_process_that_registered_a_job_runs_its_entries() -> None:
    Queue.objects.ensure("default")
    name = "tests.testapp.late_jobs.arrives_later"
    Entry.objects.create(queue_id="default", job_name=name, args=["late"], lock_key="e:late")
    record.enqueue_many([((f"now-{i}",), {}) for i in range(20)])

    run_workers(2, "--threads", "2")  # the test settings: they do not know the job

    assert JobRun.objects.filter(token__startswith="now-").count() == 20
    left = Entry.objects.get(job_name=name)
    assert (left.state, left.attempts) == ("pending", 0) and not EntryError.objects.exists()

    later = command_env(DJANGO_SETTINGS_MODULE="tests.settings_late_jobs")
    run_workers(1, "--threads", "1", env=later)

    assert JobRun.objects.filter(token="late").exists() and not Entry.objects.exists()
    assert not EntryError.objects.exists()
