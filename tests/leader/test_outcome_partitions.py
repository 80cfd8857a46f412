"""Outcome records partitioned by time on PostgreSQL (django_iq/partitions.py): a real leader,
its clock moved across partition boundaries, creates partitions ahead and drops whole expired
ones; rows no partition covered are moved into the one created for them; a partition whose
lock is not granted waits for a later pass instead of holding the workers up; and the
migration keeps the records already written."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest
from django.core.management import call_command
from django.db import connection, connections
from django.utils import timezone

from django_iq import partitions
from django_iq.duties import PruningDuty
from django_iq.leader import Leader
from django_iq.models import RunOutcome
from django_iq.worker import WorkerProcess
from tests.conftest import held_in_another_session, iq_settings_with, wait_until
from tests.testapp.jobs import record

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        connection.vendor != "postgresql", reason="outcome records are partitioned on PostgreSQL"
    ),
]

HOUR = timedelta(hours=1)
PARTITION_OF_ROW = "SELECT tableoid::regclass::text FROM {table} WHERE id = %s"
COUNT = "SELECT COUNT(*) FROM {table}"
COPIES = "INSERT INTO {table} ({names}) SELECT {picked} FROM {table}, generate_series(1, %s) WHERE id = %s"


def drop_range_partitions() -> None:
    quote = connection.ops.quote_name
    with connection.cursor() as cursor:
        for partition in partitions.partitions():
            if not partition.is_default:
                cursor.execute(f"DROP TABLE {quote(partition.name)}")


@pytest.fixture(autouse=True)
def only_the_default_partition() -> Iterator[None]:
    """Each test starts, and leaves the table, with the default partition alone (partitions
    are tables: a flush empties them but leaves them there)."""
    drop_range_partitions()
    _leaders.clear()
    yield
    _leaders.clear()
    drop_range_partitions()


_leaders: dict[str, Leader] = {}
_tokens = itertools.count()


def leader_pass(now: datetime) -> partitions.PartitionPass:
    """The pruning duty's pass at ``now``, under the fence of a leader holding the lease."""
    leader = _leaders.setdefault("pruner", Leader(name="pruner", duties=[], lease_seconds=30))
    assert leader.run_once().is_leader
    result = PruningDuty().run_once(now, leader.fence)
    assert result.skipped == {}
    assert result.outcome_partitions is not None
    return result.outcome_partitions


def ranges() -> list[tuple[datetime | None, datetime | None]]:
    return [(p.lower, p.upper) for p in partitions.partitions() if not p.is_default]


def records_finished_at(*moments: datetime) -> list[int]:
    """One outcome record per moment, written by real runs, then dated; their ids."""
    before = max(RunOutcome.objects.values_list("pk", flat=True), default=0)
    for _ in moments:
        record.enqueue(f"r{next(_tokens)}")
    assert WorkerProcess(burst=True, processing_threads=1).run(install_signal_handlers=False) == 0
    ids = list(RunOutcome.objects.filter(pk__gt=before).order_by("pk").values_list("pk", flat=True))
    assert len(ids) == len(moments)
    for pk, moment in zip(ids, moments, strict=True):
        RunOutcome.objects.filter(pk=pk).update(finished_at=moment)
    return ids


def where(pk: int) -> str:
    with connection.cursor() as cursor:
        cursor.execute(PARTITION_OF_ROW.format(table=partitions.table()), [pk])
        row = cursor.fetchone()
    return str(row[0]) if row else ""


def test_the_table_is_partitioned_with_a_default_partition() -> None:
    assert partitions.is_partitioned()
    assert [(p.name, p.is_default) for p in partitions.partitions()] == [
        (partitions.default_partition(), True)
    ]


@iq_settings_with(OUTCOME_RETENTION_SECONDS=2 * 3600, OUTCOME_PARTITION_SECONDS=3600)
def test_the_leader_creates_partitions_ahead_and_drops_whole_expired_ones() -> None:
    hour = partitions.aligned(timezone.now(), 3600)
    t0 = hour + timedelta(minutes=10)

    first = leader_pass(t0)

    # Ahead of the clock by three partitions' width: the hour now and the three after it.
    assert ranges() == [(hour + i * HOUR, hour + (i + 1) * HOUR) for i in range(4)]
    assert first.created == [partitions.partition_name(hour + i * HOUR) for i in range(4)]
    assert first.dropped == []
    early, late, later = records_finished_at(
        t0, hour + HOUR + timedelta(minutes=5), hour + 2 * HOUR + timedelta(minutes=1)
    )
    assert where(early) == partitions.partition_name(hour)
    assert where(late) == partitions.partition_name(hour + HOUR)

    # At 2 h 59 min past the hour, the first hour's partition is not all past the retention.
    second = leader_pass(hour + 2 * HOUR + timedelta(minutes=59))
    assert second.dropped == [] and RunOutcome.objects.count() == 3
    assert ranges()[-1][1] == hour + 6 * HOUR, "created ahead as the clock moved"

    # Past hour + 3h, all of the first hour is older than the two-hour retention: dropped whole.
    third = leader_pass(hour + 3 * HOUR + timedelta(seconds=1))
    assert third.dropped == [partitions.partition_name(hour)]
    assert set(RunOutcome.objects.values_list("pk", flat=True)) == {late, later}
    assert ranges()[0] == (hour + HOUR, hour + 2 * HOUR)
    lowers = [lower for lower, _ in ranges()]
    uppers = [upper for _, upper in ranges()]
    assert lowers[1:] == uppers[:-1], "contiguous"


@iq_settings_with(OUTCOME_RETENTION_SECONDS=3600, OUTCOME_PARTITION_SECONDS=3600)
def test_rows_no_partition_covered_move_into_the_one_created_for_them() -> None:
    hour = partitions.aligned(timezone.now(), 3600)
    leader_pass(hour)  # partitions up to hour + 3h
    (far,) = records_finished_at(hour + 5 * HOUR + timedelta(minutes=30))
    assert where(far) == partitions.default_partition(), "no partition covers it yet"

    result = leader_pass(hour + 3 * HOUR)

    assert partitions.partition_name(hour + 5 * HOUR) in result.created
    assert result.moved == 1
    assert where(far) == partitions.partition_name(hour + 5 * HOUR)


def copies_in_default(pk: int, count: int, finished_at: datetime) -> None:
    """``count`` copies of the record ``pk``, finished at ``finished_at``, written straight to
    the parent table (no range partition covers them: they land in the default one)."""
    quote = connection.ops.quote_name
    fields = [f.column for f in RunOutcome._meta.concrete_fields if f.column != "id"]
    names = ", ".join(quote(name) for name in fields)
    picked = ", ".join("%s" if name == "finished_at" else quote(name) for name in fields)
    with connection.cursor() as cursor:
        cursor.execute(
            COPIES.format(table=quote(partitions.table()), names=names, picked=picked),
            [finished_at, count, pk],
        )


def count_rows(seen: list[int], started: threading.Event, stop: threading.Event) -> None:
    """Count the outcome table's rows, statement after statement, until ``stop``."""
    try:
        with connections["default"].cursor() as cursor:
            started.set()
            while not stop.is_set():
                cursor.execute(COUNT.format(table=connection.ops.quote_name(partitions.table())))
                seen.append(cursor.fetchone()[0])
    finally:
        connections.close_all()


@iq_settings_with(OUTCOME_RETENTION_SECONDS=7 * 86_400, OUTCOME_PARTITION_SECONDS=3600)
def test_a_reader_never_misses_the_rows_moved_into_a_new_partition() -> None:
    """Rows of the default partition moved into a partition created for them are there for
    every statement that reads the table meanwhile: before the move, or after it (a waiter
    reading outcome records found an entry gone and its record nowhere)."""
    start = partitions.aligned(timezone.now(), 3600)
    (template,) = records_finished_at(start)
    rows = 40_000
    seen: list[int] = []
    for round_ in range(1, 4):
        # Hours no partition covers yet (each pass makes four ahead): rows land in default.
        hour = start + round_ * 10 * HOUR
        RunOutcome.objects.exclude(pk=template).delete()
        copies_in_default(template, rows, hour + timedelta(minutes=1))
        moving, stop = threading.Event(), threading.Event()
        reader = threading.Thread(target=count_rows, args=(seen, moving, stop))
        reader.start()
        assert moving.wait(10)
        result = leader_pass(hour + timedelta(minutes=2))
        counted = len(seen)
        wait_until(lambda n=counted: len(seen) > n + 2, message="statements read after the move")
        stop.set()
        reader.join(30)
        assert result.moved == rows, round_
    rows += 1  # and the template
    assert seen and min(seen) == rows, f"a statement counted {min(seen)} of {rows} rows"


@iq_settings_with(
    OUTCOME_RETENTION_SECONDS=3600, OUTCOME_PARTITION_SECONDS=3600, PRUNE_BATCH_SIZE=2
)
def test_a_leader_back_after_a_long_outage_deletes_what_expired_meanwhile_in_batches() -> None:
    hour = partitions.aligned(timezone.now(), 3600)
    leader_pass(hour)  # partitions up to hour + 3h, then the leader is away for a day
    day = timedelta(days=1)
    stale = records_finished_at(*(hour + day - 2 * HOUR + timedelta(minutes=i) for i in range(5)))
    fresh = records_finished_at(hour + day + timedelta(minutes=5))
    assert {where(pk) for pk in stale + fresh} == {partitions.default_partition()}

    result = leader_pass(hour + day + timedelta(minutes=10))

    assert result.deleted == 5, "the expired rows of the default partition, in batches of 2"
    assert [where(pk) for pk in fresh] == [partitions.partition_name(hour + day)]
    # Nothing was created for the hours already begun when the leader came back.
    assert min(lower for lower, _ in ranges() if lower is not None) == hour + day
    assert partitions.partition_name(hour) in result.dropped


@iq_settings_with(OUTCOME_RETENTION_SECONDS=3600, OUTCOME_PARTITION_SECONDS=3600)
def test_a_partition_whose_lock_is_not_granted_waits_for_a_later_pass() -> None:
    hour = partitions.aligned(timezone.now(), 3600)
    leader_pass(hour)
    (old,) = records_finished_at(hour + timedelta(minutes=1))

    # A report reading the outcome table in one long transaction.
    with held_in_another_session(lambda: RunOutcome.objects.count()):
        began = time.monotonic()
        held = leader_pass(hour + 2 * HOUR + timedelta(seconds=1))
        took = time.monotonic() - began

    assert held.dropped == [] and partitions.partition_name(hour) in held.postponed
    budget = partitions.LOCK_TRIES * (
        partitions.LOCK_TIMEOUT_MS / 1000 + partitions.LOCK_RETRY_PAUSE_SECONDS
    )
    assert took < budget + 5, f"the pass gave up after its tries ({took:.1f} s)"
    assert RunOutcome.objects.filter(pk=old).exists()

    after = leader_pass(hour + 2 * HOUR + timedelta(seconds=2))
    assert after.dropped == [partitions.partition_name(hour)]
    assert not RunOutcome.objects.filter(pk=old).exists()


@iq_settings_with(OUTCOME_RETENTION_SECONDS=86_400, OUTCOME_PARTITION_SECONDS=3600)
def test_the_migration_keeps_the_records_and_turns_back() -> None:
    stale, recent = records_finished_at(timezone.now() - timedelta(days=3), timezone.now())
    ids = set(RunOutcome.objects.values_list("pk", flat=True))

    call_command("migrate", "django_iq", "0031", verbosity=0)
    try:
        assert not partitions.is_partitioned()
        assert set(RunOutcome.objects.values_list("pk", flat=True)) == ids
    finally:
        call_command("migrate", "django_iq", verbosity=0)

    assert partitions.is_partitioned()
    assert set(RunOutcome.objects.values_list("pk", flat=True)) == ids
    legacy = [p for p in partitions.partitions() if p.name.endswith("_legacy")]
    assert len(legacy) == 1 and legacy[0].lower is None, "the old table is the first partition"
    assert legacy[0].upper is not None and legacy[0].upper > timezone.now()
    (newer,) = records_finished_at(timezone.now())
    assert newer > max(ids), "ids go on from the sequence"

    # The old table's records expire one by one, as before, until all of it goes at once.
    first = leader_pass(timezone.now())
    assert first.deleted == 1 and first.dropped == []
    assert set(RunOutcome.objects.values_list("pk", flat=True)) == {recent, newer}
    assert stale not in set(RunOutcome.objects.values_list("pk", flat=True))
    last = leader_pass(legacy[0].upper + timedelta(days=1))
    assert legacy[0].name in last.dropped
