"""A signal receiver that raises is logged and changes nothing: the enqueue stands, the job's
outcome is what the job did, and the rest of the claim runs."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from django.dispatch import Signal

from django_iq.models import Entry, EntryError
from django_iq.signals import entry_enqueued, entry_failed, entry_finished, entry_started
from django_iq.worker import WorkerProcess
from tests.testapp.jobs import always_fails, record

pytestmark = pytest.mark.django_db(transaction=True)


def broken_receiver(sender: Any, **kwargs: Any) -> None:
    raise RuntimeError("receiver bug")


@pytest.fixture
def broken() -> Iterator[list[Signal]]:
    """Connect ``broken_receiver`` to the signals the test appends, until the test ends."""
    signals: list[Signal] = []
    yield signals
    for signal in signals:
        signal.disconnect(broken_receiver)


def connect(broken: list[Signal], *signals: Signal) -> None:
    for signal in signals:
        signal.connect(broken_receiver, weak=False)
        broken.append(signal)


def receiver_failures(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.getMessage().startswith("signal receiver failed")]


def test_enqueue_returns_its_entries_when_an_entry_enqueued_receiver_raises(
    broken: list[Signal], caplog: pytest.LogCaptureFixture
) -> None:
    connect(broken, entry_enqueued)

    one = record.enqueue("kept")
    many = record.enqueue_many([(("a",), {}), (("b",), {})])

    assert Entry.objects.filter(pk__in=[one.pk, *(e.pk for e in many)]).count() == 3
    failures = receiver_failures(caplog)
    assert len(failures) == 3
    assert failures[0].exc_info is not None and "receiver bug" in str(failures[0].exc_info[1])


def test_a_claim_runs_to_its_end_when_start_and_finish_receivers_raise(
    broken: list[Signal], caplog: pytest.LogCaptureFixture
) -> None:
    record.using(group_key="one-claim").enqueue_many([((f"g{i}",), {}) for i in range(3)])
    connect(broken, entry_started, entry_finished)

    WorkerProcess(burst=True).run(install_signal_handlers=False)

    assert not Entry.objects.exists(), "every entry of the claim ran and succeeded"
    assert not EntryError.objects.exists(), "a receiver's error is not the job's failure"
    assert len(receiver_failures(caplog)) == 6


def test_a_failure_is_recorded_once_when_an_entry_failed_receiver_raises(
    broken: list[Signal], caplog: pytest.LogCaptureFixture
) -> None:
    always_fails.using(max_attempts=1).enqueue("no")
    connect(broken, entry_failed)

    WorkerProcess(burst=True).run(install_signal_handlers=False)

    error = EntryError.objects.get()
    assert error.is_final and error.exception_class == "builtins.ValueError"
    assert not Entry.objects.exists()
    assert len(receiver_failures(caplog)) == 1
