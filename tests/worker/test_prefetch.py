"""The prefetch: a worker of short jobs may claim ahead of its idle threads; one of long jobs,
or one that has run nothing yet, claims only what its threads can start."""

from __future__ import annotations

from django_iq.worker import WorkerProcess
from tests.conftest import iq_settings_with


def worker(threads: int = 4) -> WorkerProcess:
    return WorkerProcess(processing_threads=threads, name="prefetch-test")


def test_before_any_job_has_finished_nothing_is_prefetched() -> None:
    w = worker()

    assert w.capacity.prefetch() == 0
    assert w.idle_threads() == 4


def test_short_jobs_let_four_claims_per_thread_wait() -> None:
    w = worker()
    w.record_runs("default", [("tests.testapp.jobs.noop", 0.002, True)] * 5)

    assert w.capacity.prefetch() == 16
    assert w.idle_threads() == 20


def test_long_jobs_stop_the_prefetch_once_the_average_rises() -> None:
    w = worker()
    w.record_runs("default", [("tests.testapp.jobs.noop", 0.002, True)] * 5)
    w.record_runs("default", [("tests.testapp.jobs.noop", 5.0, True)] * 3)

    assert w.capacity.prefetch() == 0
    assert w.idle_threads() == 4


def test_the_settings_set_the_depth_and_the_threshold() -> None:
    w = worker(threads=2)
    w.record_runs("default", [("tests.testapp.jobs.noop", 0.05, False)])

    with iq_settings_with(PREFETCH_PER_THREAD=3):
        assert w.capacity.prefetch() == 6
    with iq_settings_with(PREFETCH_PER_THREAD=0):
        assert w.capacity.prefetch() == 0
    with iq_settings_with(PREFETCH_BELOW_SECONDS=0.01):
        assert w.capacity.prefetch() == 0


def test_successes_waiting_to_be_written_stop_the_claims_past_the_backlog_limit() -> None:
    capacity = worker(threads=2).capacity

    assert capacity.room(in_hand=0, acks_pending=capacity.ack_backlog_limit - 1) == 2
    assert capacity.room(in_hand=0, acks_pending=capacity.ack_backlog_limit) == 0


def test_the_recycling_budget_bounds_the_room() -> None:
    w = WorkerProcess(processing_threads=4, name="prefetch-test", max_jobs=3)
    w.budget.took(2)

    assert w.capacity.room(in_hand=0, acks_pending=0) == 1
    assert w.capacity.room(in_hand=4, acks_pending=0) == 0
