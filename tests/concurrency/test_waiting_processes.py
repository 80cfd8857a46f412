"""``django_iq.wait()``, ``as_completed()`` and ``await_()`` against a real ``runworker`` process,
on whichever database the suite runs on; on PostgreSQL, a waiter woken by the notification the
outcome's write sends, within 50 ms of the outcome becoming visible."""

from __future__ import annotations

import asyncio
import signal
import statistics
import threading
import time
from collections.abc import Iterator

import pytest
from django.db import connection

import django_iq
from django_iq.models import Entry, RunOutcome, Worker
from django_iq.wait_listener import Hub
from tests.conftest import run_async, wait_until
from tests.processes import Command, start_command
from tests.testapp.jobs import returns_after, returns_after_async

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def worker() -> Iterator[Command]:
    """A worker serving the default queue only, with four processing threads."""
    command = start_command("runworker", "--queues", "default", "--threads", "4")
    try:
        wait_until(
            lambda: Worker.objects.filter(stopped_at__isnull=True).exists(),
            message="the worker up",
        )
        yield command
    finally:
        Hub.stop_for_process()  # its connection would keep the test database from being dropped
        command.send_signal(signal.SIGTERM)
        code, output = command.finish(30)
    assert code == 0, output[-3000:]


def test_wait_returns_what_the_job_returned_in_the_worker(worker: Command) -> None:
    entry = returns_after.enqueue({"rows": 12}, seconds=0.3)

    assert django_iq.wait(entry, timeout=60) == {"rows": 12}
    assert not Entry.objects.filter(pk=entry.pk).exists()


def test_wait_raises_the_final_failure_of_a_run_in_the_worker(worker: Command) -> None:
    entry = returns_after.enqueue(None, seconds=0.2, fail="card declined")

    with pytest.raises(django_iq.JobFailed) as caught:
        django_iq.wait(entry, timeout=60)

    assert (caught.value.exception_class, caught.value.message) == (
        "builtins.ValueError",
        "card declined",
    )


def test_a_wait_on_a_queue_nobody_serves_times_out_and_leaves_the_entry(worker: Command) -> None:
    entry = returns_after.using(queue="emails").enqueue("never")
    started = time.monotonic()

    with pytest.raises(django_iq.WaitTimeout):
        django_iq.wait(entry, timeout=0.5)

    assert 0.5 <= time.monotonic() - started < 5
    assert Entry.objects.filter(pk=entry.pk).exists()


def test_as_completed_yields_the_worker_s_runs_in_the_order_they_ended(worker: Command) -> None:
    # Four threads run these at once; each ends after its own sleep.
    entries = {
        seconds: returns_after.enqueue(seconds, seconds=seconds) for seconds in (1.2, 0.2, 0.7)
    }
    failing = returns_after.enqueue(None, seconds=0.45, fail="boom")

    seen = [
        (outcome.entry_id, outcome.status, outcome.return_value)
        for outcome in django_iq.as_completed([*entries.values(), failing], timeout=60)
    ]

    assert seen == [
        (entries[0.2].pk, "succeeded", 0.2),
        (failing.pk, "failed", None),
        (entries[0.7].pk, "succeeded", 0.7),
        (entries[1.2].pk, "succeeded", 1.2),
    ]


def test_await_returns_a_coroutine_job_s_value_without_blocking_the_loop(worker: Command) -> None:
    entry = returns_after_async.enqueue("async value", seconds=0.3)
    ticks = 0

    async def waiting_while_ticking() -> object:
        nonlocal ticks

        async def tick() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.01)

        ticker = asyncio.create_task(tick())
        try:
            return await django_iq.await_(entry, timeout=60)
        finally:
            ticker.cancel()

    assert run_async(waiting_while_ticking) == "async value"
    assert ticks >= 10, "the event loop ran other work while it waited"


@pytest.mark.postgresql
def test_on_postgresql_the_waiter_is_woken_by_the_outcome_s_notification(worker: Command) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("notifications are PostgreSQL's")
    lags = []
    for index in range(10):
        entry = returns_after.enqueue(index, seconds=0.25)
        visible: list[float] = []
        watcher = threading.Thread(target=_watch, args=(entry.pk, visible), daemon=True)
        watcher.start()
        assert django_iq.wait(entry, timeout=60) == index
        returned = time.monotonic()
        watcher.join(10)
        assert visible, "the watcher saw the outcome record"
        lags.append(returned - visible[0])

    hub = Hub.for_process()
    assert hub is not None and hub.listener.delivers
    assert hub.listener.received >= 10, "each wait was woken by its notification"
    assert statistics.median(lags) < 0.05, lags
    assert max(lags) < 0.5, lags


def _watch(entry_id: int, visible: list[float]) -> None:
    """Look for the entry's outcome record every 2 ms, on a connection of this thread's own;
    note when it is first seen."""
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if RunOutcome.objects.filter(entry_id=entry_id).exists():
                visible.append(time.monotonic())
                return
            time.sleep(0.002)  # the poll's own interval: the resolution of the measurement
    finally:
        connection.close()
