"""Enqueueing through the public API: what is stored, what is refused, and when it is visible."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, TypeVar

import pytest
from django.db import connections, transaction
from django.utils import timezone

from django_iq import enqueue, enqueue_many
from django_iq.exceptions import (
    InvalidJobArguments,
    InvalidJobOptions,
    JobNotRegistered,
    QueueNotFound,
)
from django_iq.models import DisabledJob, Entry, Queue
from django_iq.signals import entry_enqueued
from tests.conftest import SignalRecorder
from tests.factories import QueueFactory
from tests.testapp.jobs import flaky, record, takes_anything

T = TypeVar("T")


def nothing_written() -> bool:
    return not Entry.objects.exists() and not Queue.objects.exists()


def from_another_connection(query: Callable[[], T]) -> T:
    """Run ``query`` in a thread, so on its own database connection, and return its result."""
    result: dict[str, Any] = {}

    def target() -> None:
        try:
            result["value"] = query()
        except Exception as exc:  # handed back to the test thread below
            result["error"] = exc
        finally:
            connections.close_all()

    thread = threading.Thread(target=target)
    thread.start()
    thread.join(timeout=30)
    assert not thread.is_alive(), "the query on the second connection did not finish in 30 s"
    if "error" in result:
        raise result["error"]
    return result["value"]  # type: ignore[no-any-return]


@pytest.mark.django_db
def test_enqueue_stores_the_call_with_the_defaults() -> None:
    entry = record.enqueue("a-token", seconds=0.5)

    stored = Entry.objects.get(pk=entry.pk)
    assert (stored.queue_id, stored.job_name) == ("default", "tests.testapp.jobs.record")
    assert (stored.args, stored.kwargs) == (["a-token"], {"seconds": 0.5})
    assert (stored.state, stored.priority, stored.attempts, stored.max_attempts) == (
        "pending",
        0,
        0,
        3,
    )
    assert stored.group_key is None
    assert stored.lock_key.startswith("e:") and stored.lock_key != "e:"
    assert stored.run_at == stored.enqueued_at == entry.enqueued_at


@pytest.mark.django_db
def test_ungrouped_entries_each_get_their_own_lock_key() -> None:
    first, second = record.enqueue("one"), record.enqueue("two")

    assert first.lock_key != second.lock_key


@pytest.mark.django_db
def test_enqueue_uses_the_options_of_the_job_declaration() -> None:
    entry = flaky.enqueue("t", 1)

    assert (entry.queue_id, entry.max_attempts) == ("emails", 3)


@pytest.mark.django_db
def test_using_overrides_queue_priority_attempts_and_group() -> None:
    entry = record.using(queue="reports", priority=42, max_attempts=7, group_key="acct-1").enqueue(
        "x"
    )

    stored = Entry.objects.get(pk=entry.pk)
    assert (stored.queue_id, stored.priority, stored.max_attempts) == ("reports", 42, 7)
    assert (stored.group_key, stored.lock_key) == ("acct-1", "g:acct-1")


@pytest.mark.django_db
def test_enqueue_by_dotted_name_stores_the_same_call() -> None:
    entry = enqueue("tests.testapp.jobs.record", "by-name", group_key="g")

    assert Entry.objects.filter(
        pk=entry.pk,
        job_name="tests.testapp.jobs.record",
        args=["by-name"],
        kwargs={"group_key": "g"},
    ).exists()


@pytest.mark.django_db
def test_enqueue_accepts_a_job_bound_with_using() -> None:
    entry = enqueue(record.using(priority=-5), "bound")

    assert Entry.objects.get(pk=entry.pk).priority == -5


@pytest.mark.django_db
def test_tuples_are_stored_as_lists() -> None:
    entry = record.enqueue(("a", ("b",)))

    assert Entry.objects.get(pk=entry.pk).args == [["a", ["b"]]]


@pytest.mark.django_db
def test_enqueue_many_inserts_every_call_in_one_statement(
    django_assert_max_num_queries: Any,
) -> None:
    Queue.objects.ensure("default")
    # As many as one statement's parameters take on every database (SQLite: 999, one per
    # column of each entry).
    count = 999 // len(Entry._meta.concrete_fields)
    calls = [((f"bulk-{n}",), {"seconds": n / 10}) for n in range(count)]

    # Queue and disabled-job look-ups, a savepoint around the insert and the insert itself.
    with django_assert_max_num_queries(5) as captured:
        entries = record.enqueue_many(calls)

    inserts = [q["sql"] for q in captured.captured_queries if "INSERT INTO" in q["sql"]]
    assert len(inserts) == 1, inserts
    assert count >= 30
    assert [e.args for e in entries] == [[f"bulk-{n}"] for n in range(count)]
    assert [e.pk for e in entries] == sorted(e.pk for e in entries), "ids in call order"
    assert all(e.pk is not None for e in entries), "entries come back with their ids"
    assert Entry.objects.filter(job_name=record.name).count() == count


@pytest.mark.django_db
def test_on_postgresql_a_single_enqueue_is_one_round_trip(
    django_assert_num_queries: Any, vendor: str
) -> None:
    if vendor != "postgresql":
        pytest.skip("the one-statement enqueue is PostgreSQL's")
    Queue.objects.ensure("default")

    # The queue check, the disabled-job check, the insert and the notification: one statement,
    # and no BEGIN or COMMIT of its own.
    with django_assert_num_queries(1):
        entry = record.enqueue("single")

    assert Entry.objects.get(pk=entry.pk).state == "pending"


@pytest.mark.django_db
def test_enqueue_many_by_name_applies_the_jobs_options() -> None:
    entries = enqueue_many("tests.testapp.jobs.flaky", [(("a", 0), {}), (("b", 0), {})])

    assert {e.queue_id for e in entries} == {"emails"}
    assert Entry.objects.filter(queue_id="emails").count() == 2


@pytest.mark.django_db
def test_enqueue_many_of_nothing_inserts_nothing() -> None:
    assert record.enqueue_many([]) == []
    assert not Entry.objects.exists()


@pytest.mark.django_db
def test_a_non_json_argument_is_refused_naming_it_and_nothing_is_written() -> None:
    with pytest.raises(
        InvalidJobArguments,
        match=re.escape(
            "Unsupported type: <class 'decimal.Decimal'>: job argument kwargs['amount']"
        ),
    ):
        takes_anything.using(queue="reports").enqueue("t", amount=Decimal("9.99"))

    assert nothing_written(), "validation must happen before the queue row or the entry is written"


@pytest.mark.django_db
def test_callers_catching_type_error_catch_bad_arguments() -> None:
    with pytest.raises(
        TypeError, match=r"^Unsupported type: <class 'object'>: job argument args\[0\]"
    ):
        record.enqueue(object())


@pytest.mark.django_db
def test_one_bad_call_in_enqueue_many_writes_nothing() -> None:
    calls: list[tuple[Any, dict[str, Any]]] = [(("ok",), {}), ((datetime(2030, 1, 1),), {})]

    with pytest.raises(
        InvalidJobArguments, match=r"<class 'datetime\.datetime'>: job argument args\[0\]"
    ):
        record.enqueue_many(calls)

    assert nothing_written()


@pytest.mark.django_db
def test_a_call_that_is_not_an_args_kwargs_pair_is_refused() -> None:
    with pytest.raises(
        InvalidJobArguments, match=r"Call 1 must be an \(args, kwargs\) pair, got 'oops'"
    ):
        record.enqueue_many([(("ok",), {}), "oops"])

    assert nothing_written()


@pytest.mark.django_db
def test_an_unregistered_dotted_name_is_refused_with_a_suggestion() -> None:
    with pytest.raises(
        JobNotRegistered,
        match=re.escape(
            "'tests.testapp.jobs.recrd' is not a registered job. "
            "Did you mean 'tests.testapp.jobs.record'? Decorate the function with @django_iq.job"
        ),
    ):
        enqueue("tests.testapp.jobs.recrd", "x")

    assert nothing_written()


@pytest.mark.django_db
def test_an_importable_function_that_is_not_a_job_is_refused() -> None:
    with pytest.raises(JobNotRegistered, match=re.escape("'os.getcwd' is not a registered job.")):
        enqueue("os.getcwd")

    assert nothing_written()


def test_a_plain_callable_is_refused() -> None:
    with pytest.raises(
        JobNotRegistered, match="Expected a @job function or its dotted name, got function"
    ):
        enqueue(nothing_written)  # type: ignore[arg-type]


def test_callers_catching_lookup_error_catch_unregistered_names() -> None:
    with pytest.raises(LookupError, match=r"^'nowhere\.job' is not a registered job\."):
        enqueue("nowhere.job")


@pytest.mark.django_db
def test_an_unknown_option_is_refused_before_enqueueing() -> None:
    with pytest.raises(
        InvalidJobOptions,
        match=re.escape("Unknown option 'queu' for using(). Did you mean 'queue'?"),
    ):
        record.using(queu="reports").enqueue("x")

    assert nothing_written()


@pytest.mark.django_db
def test_an_unknown_queue_is_refused_listing_the_known_ones() -> None:
    QueueFactory(name="made-in-admin")

    with pytest.raises(
        QueueNotFound,
        match=re.escape(
            "Queue 'nope' does not exist. Create it in the admin, declare it in "
            'DJANGO_IQ["QUEUES"] or in @job(queue=...). '
            "Known queues: default, emails, made-in-admin, reports."
        ),
    ):
        record.using(queue="nope").enqueue("x")

    assert not Entry.objects.exists()
    assert not Queue.objects.filter(name="nope").exists()


@pytest.mark.django_db
def test_a_declared_queue_is_created_on_first_use_with_its_settings() -> None:
    assert not Queue.objects.exists()

    flaky.enqueue("t", 0)

    queue = Queue.objects.get(name="emails")
    assert (queue.weight, queue.is_paused, queue.max_concurrency) == (2, False, None)


@pytest.mark.django_db
def test_a_queue_created_in_the_database_accepts_entries() -> None:
    QueueFactory(name="made-in-admin")

    entry = record.using(queue="made-in-admin").enqueue("x")

    assert Entry.objects.get(pk=entry.pk).queue_id == "made-in-admin"


@pytest.mark.django_db
def test_an_entry_to_run_later_is_initial() -> None:
    entry = record.using(run_at=timedelta(hours=1)).enqueue("later")

    stored = Entry.objects.get(pk=entry.pk)
    assert stored.state == "initial"
    assert stored.run_at > timezone.now() + timedelta(minutes=59)


@pytest.mark.django_db
def test_a_timedelta_run_at_counts_from_each_enqueue_of_a_bound_job() -> None:
    later = record.using(run_at=timedelta(minutes=10))

    entries = [later.enqueue("first"), later.enqueue("second")]

    for entry in entries:
        stored = Entry.objects.get(pk=entry.pk)
        assert stored.run_at == stored.enqueued_at + timedelta(minutes=10)
    assert entries[0].enqueued_at <= entries[1].enqueued_at


@pytest.mark.django_db
def test_an_entry_whose_run_at_has_passed_is_pending() -> None:
    entry = record.using(run_at=timezone.now() - timedelta(minutes=1)).enqueue("overdue")

    assert Entry.objects.get(pk=entry.pk).state == "pending"


@pytest.mark.django_db
def test_entry_enqueued_is_sent_once_per_entry(
    record_signal: Callable[[Any], SignalRecorder],
) -> None:
    received = record_signal(entry_enqueued)

    one = record.enqueue("one")
    many = record.enqueue_many([(("two",), {}), (("three",), {})])

    assert [c["entry"].pk for c in received.calls] == [one.pk] + [e.pk for e in many]
    assert {c["sender"] for c in received.calls} == {Entry}


@pytest.mark.django_db
def test_nothing_is_sent_when_enqueue_is_refused(
    record_signal: Callable[[Any], SignalRecorder],
) -> None:
    received = record_signal(entry_enqueued)

    with pytest.raises(InvalidJobArguments):
        record.enqueue(object())

    assert received.calls == []


@pytest.mark.django_db(transaction=True)
def test_an_entry_enqueued_in_a_rolled_back_transaction_is_not_stored() -> None:
    with pytest.raises(RuntimeError, match="roll back"):
        with transaction.atomic():
            record.enqueue("rolled-back")
            raise RuntimeError("roll back")

    assert not Entry.objects.filter(args=["rolled-back"]).exists()


@pytest.mark.django_db(transaction=True)
def test_an_entry_enqueued_in_a_transaction_is_invisible_to_workers_until_commit() -> None:
    Queue.objects.ensure("default")

    def count_entries() -> int:
        return Entry.objects.filter(args=["in-transaction"]).count()

    with transaction.atomic():
        record.enqueue("in-transaction")
        assert count_entries() == 1, "the enqueueing connection sees its own entry"
        assert from_another_connection(count_entries) == 0

    assert from_another_connection(count_entries) == 1


@pytest.mark.django_db
@pytest.mark.parametrize("text", ["nul\x00byte", "lone \ud800 surrogate"])
def test_text_no_database_can_store_is_refused_before_the_insert(text: str) -> None:
    # Without the check PostgreSQL (both) and MariaDB (the surrogate) fail the insert itself.
    with pytest.raises(InvalidJobArguments, match=r"^Job argument args\[0\] has a"):
        record.enqueue(text)

    assert nothing_written()


@pytest.mark.django_db
def test_the_longest_group_key_is_stored_and_claimed() -> None:
    # Its lock key ("g:" + 198 characters) fills the 200-character lock columns exactly.
    entry = record.using(group_key="k" * 198).enqueue("long-group")

    (claim,) = Entry.objects.claim(None, 10, "default")

    assert claim.lock_key == Entry.objects.get(pk=entry.pk).lock_key == "g:" + "k" * 198


@pytest.mark.django_db
def test_a_large_bulk_enqueue_keeps_call_order_states_and_a_new_queue() -> None:
    # 2,500 calls: PostgreSQL streams them with COPY, the others insert them in batches.
    calls = [((f"big-{n}",), {"n": n} if n % 2 else {}) for n in range(2500)]

    entries = takes_anything.using(queue="reports", priority=7).enqueue_many(calls)

    assert [e.args for e in entries] == [[f"big-{n}"] for n in range(2500)]
    assert [e.pk for e in entries] == sorted(e.pk for e in entries)
    columns = ("pk", "args", "kwargs", "lock_key", "priority", "max_attempts", "enqueued_at")
    stored = {row[0]: row for row in Entry.objects.filter(queue_id="reports").values_list(*columns)}
    assert stored == {e.pk: tuple(getattr(e, c) for c in columns) for e in entries}
    assert len({e.lock_key for e in entries}) == 2500 and {e.priority for e in entries} == {7}
    assert {e.state for e in entries} == {"pending"}
    assert Queue.objects.filter(name="reports").exists(), "the declared queue was created"


@pytest.mark.django_db
def test_a_large_bulk_enqueue_of_a_disabled_job_is_stored_disabled() -> None:
    DisabledJob.objects.create(job_name=record.name)

    entries = record.enqueue_many([((f"off-{n}",), {}) for n in range(2500)])

    assert {e.state for e in entries} == {"disabled"}
    assert Entry.objects.disabled().count() == 2500
    assert not Entry.objects.pending().exists()
