"""Wake-ups on PostgreSQL: an enqueue notifies once per transaction and queue, an idle
runworker starts the entry long before its next poll, and a dropped listening connection
falls back to polling and then listens again. Judged by the start times the jobs record."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, connections, transaction
from django.utils import timezone

from django_iq import enqueue_many
from django_iq.models import DisabledJob, Entry, EntryError, GroupLock
from django_iq.queries import NOTIFY_CHANNEL
from django_iq.wakeup import Listener
from tests.conftest import iq_settings_with, wait_until
from tests.factories import EntryErrorFactory, EntryFactory, GroupLockFactory, QueueFactory
from tests.processes import Command, command_env, finish, start_command
from tests.testapp.jobs import noop, record
from tests.testapp.models import JobRun

pytestmark = [pytest.mark.postgresql, pytest.mark.django_db(transaction=True)]

# Far longer than any wake-up by notification may take: a start within this time after the
# enqueue was woken by the notification, not by a poll.
POLL_SECONDS = 30


@pytest.fixture
def listening() -> Iterator[Any]:
    """A raw connection of the test's own in LISTEN on the workers' channel."""
    wrapper = connections.create_connection("default")
    wrapper.ensure_connection()
    raw = wrapper.connection
    raw.autocommit = True
    raw.execute(f"LISTEN {NOTIFY_CHANNEL}")
    yield raw
    wrapper.close()


def heard(raw: Any) -> list[str]:
    return [n.payload for n in raw.notifies(timeout=0.5)]


def test_a_single_enqueue_notifies_its_queue(listening: Any) -> None:
    record.enqueue("one")

    assert heard(listening) == ["default"]


def test_a_bulk_enqueue_notifies_once_per_transaction_and_queue(listening: Any) -> None:
    # 2,500 entries are three statements in one transaction: one notification.
    enqueue_many(record, [((f"bulk-{i}",), {}) for i in range(2500)])
    assert heard(listening) == ["default"]

    with transaction.atomic():
        record.enqueue("a")
        record.using(queue="emails").enqueue("b")
        record.enqueue("c")
    assert sorted(heard(listening)) == ["default", "emails"]


def test_deferred_and_disabled_entries_notify_nobody(listening: Any) -> None:
    record.using(run_at=timezone.now() + timedelta(hours=1)).enqueue("later")
    DisabledJob.objects.create(job_name=noop.name)
    noop.enqueue()

    assert heard(listening) == []


def test_a_rolled_back_enqueue_notifies_nobody(listening: Any) -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        record.enqueue("rolled back")
        raise RuntimeError("the view failed after enqueueing")

    assert heard(listening) == []


def test_with_notifications_off_nothing_is_sent(listening: Any) -> None:
    with iq_settings_with(LISTEN_NOTIFY=False):
        record.enqueue("quiet")

    assert heard(listening) == []


def test_every_way_an_entry_becomes_ready_notifies_its_queue(listening: Any) -> None:
    QueueFactory(name="default")
    QueueFactory(name="emails")
    due = EntryFactory(deferred=True, queue=QueueFactory(name="reports"))
    Entry.objects.filter(pk=due.pk).update(run_at=timezone.now() - timedelta(seconds=1))
    assert Entry.objects.promote_due() == 1
    assert heard(listening) == ["reports"]

    later = EntryFactory(deferred=True)
    assert Entry.objects.run_now([later.pk]) == 1
    assert heard(listening) == ["default"]

    DisabledJob.objects.create(job_name=noop.name)
    noop.using(queue="emails").enqueue()
    assert heard(listening) == []
    assert Entry.objects.enable(noop.name) == 1
    assert heard(listening) == ["emails"]

    failure = EntryErrorFactory(is_final=True)
    assert len(EntryError.objects.requeue([failure])) == 1
    assert heard(listening) == ["default"]

    lock = GroupLockFactory(entry_for_key=EntryFactory(queue=QueueFactory(name="reports")))
    assert GroupLock.objects.release([lock.pk]) == 1
    assert heard(listening) == ["reports"]


def listener_pids() -> list[int]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND query = %s AND pid <> pg_backend_pid()",
            [f"LISTEN {NOTIFY_CHANNEL}"],
        )
        return [row[0] for row in cursor.fetchall()]


def start_idle_worker(poll_seconds: float = POLL_SECONDS) -> Command:
    worker = start_command(
        "runworker",
        "--threads",
        "2",
        env=command_env(DJANGO_IQ_POLL_INTERVAL_SECONDS=str(poll_seconds)),
    )
    wait_until(listener_pids, timeout=30, message="the worker to LISTEN")
    time.sleep(0.5)  # its first passes are done: it sleeps until woken or polled
    return worker


def start_delay(token: str) -> float:
    """Enqueue ``record(token)`` and return seconds until the job recorded its start."""
    enqueued = time.time()
    record.enqueue(token)
    run = wait_until(
        lambda: JobRun.objects.filter(token=token).first(),
        timeout=POLL_SECONDS + 10,
        message=f"{token} to run",
    )
    return float(run.started_at) - enqueued


def stop(worker: Command) -> str:
    worker.send_signal(15)
    code, output = finish(worker, timeout=60)
    assert code == 0, output[-3000:]
    return output


@pytest.mark.slow
def test_an_idle_worker_starts_a_new_entry_without_waiting_for_its_poll() -> None:
    worker = start_idle_worker()
    try:
        delays = []
        for index in range(5):
            delays.append(start_delay(f"woken-{index}"))
            time.sleep(0.3)  # the worker is idle again before the next enqueue
    finally:
        stop(worker)

    assert max(delays) < POLL_SECONDS / 10, f"start delays {delays}: not woken by NOTIFY"


@pytest.mark.slow
def test_a_dropped_listening_connection_is_replaced_and_nothing_waits_for_a_poll() -> None:
    worker = start_idle_worker()
    try:
        (first,) = listener_pids()
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", [first])
        # Enqueued while nobody listens: the listener wakes the schedulers once it is back.
        missed = start_delay("while-reconnecting")
        wait_until(
            lambda: listener_pids() and first not in listener_pids(),
            timeout=30,
            message="a new listening connection",
        )
        time.sleep(0.3)  # its reconnect wake-up pass is over: the next start is woken by NOTIFY
        after = start_delay("after-reconnecting")
    finally:
        output = stop(worker)

    assert missed < POLL_SECONDS / 3, f"the entry enqueued while reconnecting waited {missed}s"
    assert after < POLL_SECONDS / 10, f"after reconnecting the start took {after}s"
    assert "listening connection lost" in output


@pytest.mark.slow
def test_entries_whose_notification_never_came_start_at_the_next_poll() -> None:
    worker = start_idle_worker(poll_seconds=0.5)
    try:
        with iq_settings_with(LISTEN_NOTIFY=False):
            delay = start_delay("polled")
    finally:
        stop(worker)

    assert delay < 10, f"polling every 0.5 s, the entry waited {delay}s"


def test_a_listener_hears_its_own_probe_and_wakes_no_queue_for_it() -> None:
    woken: list[str | None] = []
    stopping = threading.Event()
    listener = Listener(None, woken.append, stopping)
    thread = threading.Thread(target=listener.run)
    thread.start()
    try:
        wait_until(lambda: listener.delivers, timeout=15, message="the probe to come back")
    finally:
        stopping.set()
        thread.join(10)

    assert listener.delivers is True and listener.received == 0
    assert woken == [None], "one wake-up on connecting, none for the probe"
