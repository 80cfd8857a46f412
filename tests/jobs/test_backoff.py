"""JobOptions.retry_delay_seconds: exponential backoff, capped, spread by jitter."""

from __future__ import annotations

import random

import pytest

from django_iq.options import JobOptions
from django_iq.registry import Job
from tests.conftest import iq_settings_with
from tests.testapp.jobs import record


class EdgeRandom(random.Random):
    """A random source whose ``uniform`` returns one end of the range."""

    def __init__(self, high: bool) -> None:
        super().__init__(0)
        self.high = high

    def uniform(self, a: float, b: float) -> float:
        return b if self.high else a


def unregistered_job(**options: float) -> Job[[], None]:
    # Built directly, not with @job, so nothing is added to the registry.
    return Job(lambda: None, "tests.jobs.backoff_job", JobOptions(**options))


@iq_settings_with(BACKOFF_BASE_SECONDS=2, BACKOFF_MAX_SECONDS=60, BACKOFF_JITTER=0)
@pytest.mark.parametrize(
    ("attempt", "delay"), [(1, 2), (2, 4), (3, 8), (4, 16), (5, 32), (6, 60), (30, 60)]
)
def test_delay_doubles_with_each_attempt_up_to_the_cap(attempt: int, delay: float) -> None:
    assert record.options.retry_delay_seconds(attempt) == delay
    assert JobOptions().retry_delay_seconds(attempt) == delay


@iq_settings_with(BACKOFF_BASE_SECONDS=2, BACKOFF_MAX_SECONDS=60, BACKOFF_JITTER=0)
def test_a_jobs_own_backoff_options_win_over_the_settings() -> None:
    job = unregistered_job(backoff_base_seconds=10, backoff_max_seconds=25)

    assert [job.options.retry_delay_seconds(attempt) for attempt in (1, 2, 3, 4)] == [
        10,
        20,
        25,
        25,
    ]


@iq_settings_with(BACKOFF_BASE_SECONDS=3, BACKOFF_MAX_SECONDS=100, BACKOFF_JITTER=0)
def test_a_job_without_backoff_options_uses_the_settings() -> None:
    assert unregistered_job().options.retry_delay_seconds(2) == 6


@iq_settings_with(BACKOFF_BASE_SECONDS=0, BACKOFF_MAX_SECONDS=100, BACKOFF_JITTER=0.5)
def test_a_zero_base_retries_at_once() -> None:
    assert record.options.retry_delay_seconds(5, random.Random(1)) == 0


@iq_settings_with(BACKOFF_BASE_SECONDS=4, BACKOFF_MAX_SECONDS=100, BACKOFF_JITTER=0.25)
@pytest.mark.parametrize(("high", "delay"), [(False, 6.0), (True, 10.0)])
def test_jitter_spreads_the_delay_by_the_jitter_fraction_either_way(
    high: bool, delay: float
) -> None:
    assert record.options.retry_delay_seconds(2, EdgeRandom(high)) == pytest.approx(delay)


@iq_settings_with(BACKOFF_BASE_SECONDS=4, BACKOFF_MAX_SECONDS=100, BACKOFF_JITTER=0.25)
def test_jittered_delays_stay_within_the_bounds_and_differ() -> None:
    rng = random.Random(42)

    delays = [record.options.retry_delay_seconds(2, rng) for _ in range(500)]

    assert all(6.0 <= d <= 10.0 for d in delays), (min(delays), max(delays))
    assert len(set(delays)) > 400, "jitter should spread retries of a burst of failures"


@iq_settings_with(BACKOFF_BASE_SECONDS=10, BACKOFF_MAX_SECONDS=10, BACKOFF_JITTER=1)
def test_full_jitter_never_gives_a_negative_delay() -> None:
    assert record.options.retry_delay_seconds(1, EdgeRandom(high=False)) == 0.0
