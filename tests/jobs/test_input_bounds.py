"""Input at the edge of what the databases hold: refused with the library's own errors, before
anything is written, or stored and read back exactly."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from django.utils import timezone as dj_timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from django_iq.bounds import LATEST_RUN_AT, MAX_ARGUMENT_DEPTH
from django_iq.exceptions import InvalidJobArguments, InvalidJobOptions
from django_iq.models import Entry, EntryError, Queue
from django_iq.tasks_compat import InvalidTask
from django_iq.worker import WorkerProcess
from tests.conftest import iq_settings_with
from tests.testapp import tasks
from tests.testapp.jobs import always_fails, record, takes_anything

pytestmark = pytest.mark.django_db(transaction=True)


def nothing_written() -> bool:
    return not Entry.objects.exists() and not Queue.objects.exists()


def nested(depth: int) -> Any:
    value: Any = "leaf"
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


@pytest.mark.parametrize(
    "run_at",
    [
        datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=5))),
        datetime(9999, 12, 31, 23, tzinfo=timezone(timedelta(hours=-5))),
        datetime(1899, 12, 31, 23, tzinfo=UTC),
        datetime(9000, 1, 1, 1, tzinfo=UTC),
    ],
    ids=["year 1 at +05:00", "year 9999 at -05:00", "before 1900", "after 9000"],
)
def test_a_run_at_out_of_range_is_refused_and_writes_nothing(run_at: datetime) -> None:
    with pytest.raises(InvalidJobOptions, match="out of range; it must fall between 1900-01-01"):
        record.using(run_at=run_at).enqueue("x")
    assert nothing_written()


def test_a_huge_delay_is_refused_and_writes_nothing() -> None:
    with pytest.raises(InvalidJobOptions, match=r"run_at = now \+ .* is out of range"):
        record.using(run_at=timedelta(days=999_999_999)).enqueue("x")
    with pytest.raises(InvalidJobOptions, match="out of range"):
        record.using(run_at=timedelta(days=365 * 7000)).enqueue("x")
    assert nothing_written()


def test_run_at_is_stored_in_utc_and_read_back_at_the_bounds() -> None:
    far = LATEST_RUN_AT.astimezone(timezone(timedelta(hours=-5)))
    entry = record.using(run_at=far).enqueue("far")
    stored = Entry.objects.get(pk=entry.pk).run_at
    assert stored == LATEST_RUN_AT and stored.utcoffset() == timedelta(0)
    assert entry.state == "initial"


@pytest.mark.parametrize("name", ["bad\x00queue", "bad\udcffqueue"])
def test_queue_names_and_group_keys_must_be_storable_text(name: str) -> None:
    with pytest.raises(InvalidJobOptions, match="the database cannot store it"):
        record.using(queue=name).enqueue("x")
    with pytest.raises(InvalidJobOptions, match="the database cannot store it"):
        record.using(group_key=name).enqueue("x")
    assert nothing_written()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (2**63, "integer of 64 bits"),
        (-(2**63) - 1, "integer of 64 bits"),
        (10**5000, "integer of 16610 bits"),
        (1e20, "too large to read back exactly"),
        (nested(MAX_ARGUMENT_DEPTH + 1), "nested more than 30"),
        (nested(5000), "nested more than 30"),
    ],
    ids=["2**63", "-2**63-1", "10**5000", "1e20", "31 levels", "5000 levels"],
)
def test_arguments_no_database_reads_back_exactly_are_refused(value: Any, message: str) -> None:
    with pytest.raises(InvalidJobArguments, match=message):
        record.enqueue(value)
    with pytest.raises(InvalidJobArguments, match=message):
        tasks.add.enqueue(value, 1)
    assert nothing_written()


def test_arguments_at_the_limits_are_stored_and_read_back_exactly() -> None:
    values = [2**63 - 1, -(2**63), nested(MAX_ARGUMENT_DEPTH), 2.0**53 - 1, 5e-324]
    entry = takes_anything.enqueue(*values)
    assert Entry.objects.get(pk=entry.pk).args == values


def test_arguments_over_max_arguments_bytes_are_refused() -> None:
    with pytest.raises(InvalidJobArguments, match=r"take 10,485,\d+ bytes as JSON; the most is "):
        record.enqueue("x" * 10 * 1024 * 1024)
    with iq_settings_with(MAX_ARGUMENTS_BYTES=2048):
        record.enqueue("x" * 2000)
        with pytest.raises(InvalidJobArguments, match=r"the most is 2,048 .MAX_ARGUMENTS_BYTES"):
            record.enqueue("y" * 2100)
    assert Entry.objects.count() == 1


def test_a_task_run_after_out_of_range_is_an_invalid_task() -> None:
    with pytest.raises(InvalidTask, match="out of range"):
        tasks.add.using(run_after=datetime(1, 1, 1, tzinfo=UTC)).enqueue(1, 2)
    assert nothing_written()


def test_a_huge_exception_message_is_stored_and_logged_cut(
    caplog: pytest.LogCaptureFixture,
) -> None:
    always_fails.using(max_attempts=1).enqueue("m" * 1_000_000)
    with caplog.at_level(logging.INFO, logger="django_iq"):
        WorkerProcess(burst=True).run(install_signal_handlers=False)
    error = EntryError.objects.get()
    assert len(error.message) == 2000 and error.message.endswith(" ... (cut)")
    assert len(error.traceback) <= 20_000
    assert "in always_fails" in error.traceback, "the frames are kept, the message is cut"
    assert error.traceback.rstrip().endswith("ValueError: " + error.message)
    assert max(len(r.getMessage()) for r in caplog.records) < 25_000


def test_a_long_backoff_never_overflows_the_retry_time() -> None:
    year = 365 * 86_400
    with iq_settings_with(BACKOFF_BASE_SECONDS=year, BACKOFF_MAX_SECONDS=year, BACKOFF_JITTER=0.25):
        always_fails_entry = always_fails.using(max_attempts=100_000).enqueue("again")
        Entry.objects.filter(pk=always_fails_entry.pk).update(attempts=5000)
        WorkerProcess(burst=True).run(install_signal_handlers=False)
    error = EntryError.objects.get()
    assert error.exception_class == "builtins.ValueError" and error.message == "again"
    retry = Entry.objects.get(pk=always_fails_entry.pk)
    assert retry.state == "initial"
    # The cap, give or take the 25 % jitter: never an overflow, never a wrapped-around date.
    assert (
        timedelta(days=0.75 * 365 - 1)
        < retry.run_at - dj_timezone.now()
        <= timedelta(days=1.25 * 365)
    )


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(value=json_values)
def test_any_argument_is_refused_cleanly_or_read_back_exactly(value: Any) -> None:
    Entry.objects.all().delete()
    Queue.objects.all().delete()
    try:
        entry = takes_anything.enqueue(value, key=value)
    except InvalidJobArguments:
        assert nothing_written()
        return
    stored = Entry.objects.get(pk=entry.pk)
    assert stored.args == [value if not isinstance(value, tuple) else list(value)]
    assert stored.kwargs == {"key": value}
