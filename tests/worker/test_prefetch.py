"""The prefetch: a worker of short jobs may claim ahead of its idle threads (per thread, and per
process while its threads would finish the prefetch within PREFETCH_BELOW_SECONDS), refilled once
half of it is taken; one of long jobs, or one that has run nothing yet, claims only what its
threads can start."""

from __future__ import annotations

from django_iq.worker import WorkerProcess
from tests.conftest import iq_settings_with


def worker(threads: int = 4) -> WorkerProcess:
    return WorkerProcess(processing_threads=threads, name="prefetch-test")


def test_before_any_job_has_finished_nothing_is_prefetched() -> None:
    w = worker()

    assert w.capacity.prefetch() == 0
    assert w.idle_threads() == 4


def test_very_short_jobs_let_a_process_hold_its_per_process_prefetch() -> None:
    w = worker()
    w.record_runs("default", [("tests.testapp.jobs.noop", 0.002, True)] * 5)

    assert w.capacity.prefetch() == 64  # PREFETCH_PER_PROCESS, over 4 threads x 4
    assert w.idle_threads() == 68


def test_one_thread_holds_as_much_as_it_finishes_within_the_window() -> None:
    one = worker(threads=1)
    one.record_runs("default", [("tests.testapp.jobs.noop", 0.0005, True)] * 5)
    assert one.capacity.prefetch() == 64  # PREFETCH_PER_PROCESS: a claim serves 65 jobs, not 5

    slower = worker(threads=1)
    slower.record_runs("default", [("tests.testapp.jobs.noop", 0.02, True)] * 5)
    assert slower.capacity.prefetch() == 5  # 0.1 s of work: 5 runs of 0.02 s

    short = worker(threads=1)
    short.record_runs("default", [("tests.testapp.jobs.noop", 0.08, True)] * 5)
    assert short.capacity.prefetch() == 4  # PREFETCH_PER_THREAD still applies


def test_the_prefetch_is_refilled_once_half_of_it_is_taken() -> None:
    w = worker(threads=1)
    w.record_runs("default", [("tests.testapp.jobs.noop", 0.0005, True)] * 5)
    room = w.capacity.room

    with iq_settings_with(PREFETCH_PER_PROCESS=32):
        assert room(in_hand=0, acks_pending=0) == 33
        assert room(in_hand=32, acks_pending=0) == 0  # 31 waiting: more than half of 32
        assert room(in_hand=18, acks_pending=0) == 0  # 17 waiting
        assert room(in_hand=17, acks_pending=0) == 16  # 16 waiting: filled up again
        assert room(in_hand=0, acks_pending=0, prefetch=False) == 1
        assert room(in_hand=17, acks_pending=0, prefetch=False) == 0


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
        assert w.capacity.prefetch() == 4  # the threads finish 4 runs of 0.05 s in 0.1 s
    with iq_settings_with(PREFETCH_PER_THREAD=0, PREFETCH_PER_PROCESS=3):
        assert w.capacity.prefetch() == 3
    with iq_settings_with(PREFETCH_PER_THREAD=0, PREFETCH_PER_PROCESS=0):
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
