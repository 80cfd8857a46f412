"""Per-job caps and rate limits with several worker processes on whichever database the suite
runs on: the running count, recorded from inside the jobs, never passes the cluster cap nor
the per-node cap (two host names, two processes each), rate-limited starts never pass the
limit in any window, and jobs without limits keep flowing meanwhile."""

from __future__ import annotations

import pytest

from django_iq import enqueue_many
from django_iq.models import Entry, GroupLock, JobStart
from tests.factories import most_at_once, most_starts_within
from tests.processes import Command, command_env, finish, start_command
from tests.testapp.jobs import capped, rate_limited, record
from tests.testapp.models import JobRun, RecordedRun

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

# A claim counts as a start, and its entry starts as soon as the worker hands it over: allow
# that hand-over when judging starts by the times the jobs recorded.
HAND_OVER_SECONDS = 0.05


def start_workers(per_node: int = 2) -> list[Command]:
    return [
        start_command(
            "runworker",
            "--burst",
            "--threads",
            "3",
            # No leader runs here: a long silence limit, so that a heartbeat waiting seconds
            # for SQLite's one write lock under load does not fence a worker (status 5).
            env=command_env(DJANGO_IQ_HOST_NAME=node, DJANGO_IQ_WORKER_SILENT_AFTER_SECONDS="20"),
        )
        for node in ("node-a", "node-b")
        for _ in range(per_node)
    ]


def finish_all(workers: list[Command]) -> None:
    for worker in workers:
        code, output = finish(worker, 180)
        assert code == 0, output[-3000:]


def test_caps_hold_cluster_wide_and_per_node_while_other_jobs_flow() -> None:
    enqueue_many(capped, [((f"capped-{i}",), {"seconds": 0.15}) for i in range(30)])
    enqueue_many(record, [((f"free-{i}",), {"seconds": 0.02}) for i in range(120)])

    finish_all(start_workers())

    runs = list(RecordedRun.objects.values_list("host", "started_at", "finished_at"))
    assert len(runs) == 30 and all(finished for _, _, finished in runs)
    assert most_at_once((s, f) for _, s, f in runs) <= 3, "max_concurrency=3"
    for node in ("node-a", "node-b"):
        on_node = [(s, f) for host, s, f in runs if host == node]
        assert on_node, f"{node} ran some"
        assert most_at_once(on_node) <= 2, f"max_concurrency_per_node=2 on {node}"
    assert most_at_once((s, f) for _, s, f in runs) >= 2, "the cap was used, not one at a time"
    free = list(JobRun.objects.values_list("started_at", flat=True))
    assert len(free) == 120, "each free job ran once (JobRun.token is unique)"
    last_capped_start = max(s for _, s, _ in runs)
    assert min(free) < last_capped_start, "free jobs ran while capped ones waited"
    assert not Entry.objects.exists() and not GroupLock.objects.exists()


def test_a_rate_limit_holds_across_worker_processes() -> None:
    enqueue_many(rate_limited, [((f"rated-{i}",), {}) for i in range(16)])
    enqueue_many(record, [((f"beside-{i}",), {}) for i in range(60)])

    finish_all(start_workers(per_node=1))

    starts = list(RecordedRun.objects.values_list("started_at", flat=True))
    assert len(starts) == 16
    assert most_starts_within(starts, 1.0 - HAND_OVER_SECONDS) <= 5, "rate_limit='5/s'"
    assert max(starts) - min(starts) >= 2.0, "16 starts at 5 per second take 3 windows"
    assert JobRun.objects.count() == 60
    assert JobStart.objects.count() <= 5 * 2, "starts older than the window are deleted"
