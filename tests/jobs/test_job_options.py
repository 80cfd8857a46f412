"""registry.py: validation of ``@job(...)`` and ``using(...)`` options before anything is written."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from django_iq import job
from django_iq.exceptions import InvalidJobOptions
from django_iq.registry import JOB_OPTIONS, USING_OPTIONS, registered_jobs
from tests.testapp.jobs import record


def test_an_unknown_job_option_is_rejected_with_a_suggestion() -> None:
    with pytest.raises(
        InvalidJobOptions,
        match=re.escape(
            "Unknown option 'prority' for @job. Did you mean 'priority'? "
            f"Valid options: {', '.join(JOB_OPTIONS)}."
        ),
    ):
        job(prority=5)


def test_an_unknown_using_option_is_rejected_with_a_suggestion() -> None:
    with pytest.raises(
        InvalidJobOptions,
        match=re.escape(
            "Unknown option 'run_att' for using(). Did you mean 'run_at'? "
            f"Valid options: {', '.join(USING_OPTIONS)}."
        ),
    ):
        record.using(run_att=timedelta(seconds=1))


def test_an_unknown_option_without_a_close_match_lists_the_valid_ones() -> None:
    with pytest.raises(InvalidJobOptions) as raised:
        record.using(zzz=1)

    assert "Did you mean" not in str(raised.value)
    assert str(raised.value).endswith(f"Valid options: {', '.join(USING_OPTIONS)}.")


def test_run_at_is_accepted_by_using_but_not_by_the_decorator() -> None:
    with pytest.raises(InvalidJobOptions, match="Unknown option 'run_at' for @job"):
        job(run_at=timedelta(seconds=1))


@pytest.mark.parametrize("priority", [-100, 0, 100])
def test_priorities_from_minus_100_to_100_are_accepted(priority: int) -> None:
    assert record.using(priority=priority).options.priority == priority


@pytest.mark.parametrize("priority", [-101, 101, 10_000])
def test_priorities_outside_minus_100_to_100_are_rejected(priority: int) -> None:
    with pytest.raises(
        InvalidJobOptions, match=f"^priority must be from -100 to 100, got {priority}\\.$"
    ):
        record.using(priority=priority)


@pytest.mark.parametrize("priority", [True, False, 1.0, "5"])
def test_priorities_that_are_not_integers_are_rejected(priority: Any) -> None:
    with pytest.raises(
        InvalidJobOptions,
        match=re.escape(f"priority must be an integer from -100 to 100, got {priority!r}."),
    ):
        record.using(priority=priority)


def test_a_priority_of_none_means_the_default() -> None:
    assert record.using(priority=None).options.effective_priority == 0


def test_the_decorator_validates_priority_too() -> None:
    with pytest.raises(InvalidJobOptions, match="priority must be from -100 to 100, got 200"):
        job(priority=200)


@pytest.mark.parametrize("max_attempts", [0, -1, True, 2.0, "3", 2**40, 100_001])
def test_max_attempts_must_be_an_integer_from_one_to_the_limit(max_attempts: Any) -> None:
    with pytest.raises(
        InvalidJobOptions,
        match=re.escape(
            f"max_attempts must be an integer from 1 to 100,000, got {max_attempts!r}."
        ),
    ):
        record.using(max_attempts=max_attempts)


def test_max_attempts_of_one_means_no_retry_and_is_accepted() -> None:
    assert record.using(max_attempts=1).options.effective_max_attempts == 1


@pytest.mark.parametrize("group_key", ["", "x" * 199, 5])
def test_group_keys_must_be_strings_of_1_to_198_characters(group_key: Any) -> None:
    # The lock key "g:<group key>" must fit the 200-character lock columns.
    with pytest.raises(
        InvalidJobOptions,
        match=re.escape(
            f"group_key must be a string of 1 to 198 characters, got {group_key!r:.80}."
        ),
    ):
        record.using(group_key=group_key)


def test_a_group_key_of_198_characters_is_accepted() -> None:
    assert record.using(group_key="k" * 198).options.group_key == "k" * 198


@pytest.mark.parametrize("queue", ["", "   ", 7])
def test_queue_names_must_be_non_empty_strings(queue: Any) -> None:
    with pytest.raises(
        InvalidJobOptions, match=re.escape(f"queue must be a non-empty string, got {queue!r}.")
    ):
        record.using(queue=queue)


def test_queue_names_longer_than_100_characters_are_rejected() -> None:
    with pytest.raises(InvalidJobOptions, match="queue names are at most 100 characters, got 101"):
        record.using(queue="q" * 101)


@pytest.mark.parametrize("option", ["backoff_base_seconds", "backoff_max_seconds"])
@pytest.mark.parametrize("value", [-1, True, "1", 1e12, float("inf"), float("nan")])
def test_backoff_options_must_be_seconds_up_to_a_year(option: str, value: Any) -> None:
    with pytest.raises(
        InvalidJobOptions,
        match=re.escape(
            f"{option} must be a number of seconds from 0 to 31,536,000 (a year), got {value!r}."
        ),
    ):
        job(**{option: value})


@pytest.mark.parametrize("option", ["backoff_base_seconds", "backoff_max_seconds"])
def test_backoff_belongs_to_the_job_and_cannot_be_changed_by_using(option: str) -> None:
    # Workers read backoff from the registered job, so a per-enqueue value would be ignored.
    with pytest.raises(
        InvalidJobOptions,
        match=re.escape(
            f"Unknown option {option!r} for using(). Valid options: {', '.join(USING_OPTIONS)}."
        ),
    ):
        record.using(**{option: 1})


def test_a_naive_run_at_is_rejected() -> None:
    with pytest.raises(
        InvalidJobOptions,
        match=re.escape("run_at 2030-01-01T09:00:00 has no timezone; pass an aware datetime"),
    ):
        record.using(run_at=datetime(2030, 1, 1, 9, 0))


def test_an_aware_run_at_is_kept() -> None:
    when = datetime(2030, 1, 1, 9, 0, tzinfo=UTC)

    assert record.using(run_at=when).options.run_at == when


def test_a_timedelta_run_at_is_kept_to_count_from_each_enqueue() -> None:
    assert record.using(run_at=timedelta(minutes=5)).options.run_at == timedelta(minutes=5)


@pytest.mark.parametrize("run_at", ["2030-01-01T09:00:00Z", 60, 1.5])
def test_a_run_at_that_is_neither_datetime_nor_timedelta_is_rejected(run_at: Any) -> None:
    with pytest.raises(
        InvalidJobOptions,
        match=re.escape(
            f"run_at must be a datetime or a timedelta, got {type(run_at).__name__} {run_at!r}."
        ),
    ):
        record.using(run_at=run_at)


def test_using_calls_chain_and_the_later_one_wins() -> None:
    bound = record.using(priority=5, queue="reports").using(priority=9)

    assert (bound.options.priority, bound.options.queue) == (9, "reports")
    assert record.options.priority is None, "using() must not change the job itself"


def test_a_job_defined_inside_a_function_is_rejected() -> None:
    def inner() -> None:
        return None

    with pytest.raises(
        InvalidJobOptions,
        match=re.escape(
            "test_a_job_defined_inside_a_function_is_rejected.<locals>.inner is defined inside "
            "a function; workers could not find it. Define jobs at module level."
        ),
    ):
        job(inner)
    assert not any("<locals>" in name for name in registered_jobs())


def not_a_job() -> None:
    """A module-level function the tests try to register under bad names."""


def test_a_job_name_longer_than_200_characters_is_rejected() -> None:
    with pytest.raises(
        InvalidJobOptions,
        match=re.escape(
            f"Job name {'n' * 80}... has 201 characters; the most is 200. "
            "Pass a shorter one with @job(name=...)."
        ),
    ):
        job(name="n" * 201)(not_a_job)
    assert "n" * 201 not in registered_jobs()
