"""Outcome records at volume on PostgreSQL: the 2x4 drain on empty tables and beside
``--outcomes`` records; one expired hour of ``--hour`` records removed by the leader while a
drain runs, with every lock wait of 10 ms or more the server saw; the bounded deletes of other
databases beside it; the table's size per record and for a day at the measured drain rate; and
the same drain with the queue on a database of its own.

    python -m benchmarks.retention
    python -m benchmarks.retention --outcomes 10000000 --hour 7000000 --drain 20000

It starts a PostgreSQL cluster of its own on a free port (``initdb`` in a temporary directory,
``log_lock_waits`` on with ``deadlock_timeout=10ms``: the server logs every lock wait from
10 ms on, and how long it lasted) and removes it afterwards. A drain is ``runworker
--processes 2 --threads 4`` started idle, then ``--drain`` no-op entries enqueued in bulk,
timed until none is left. The records are written with ``INSERT ... SELECT`` (they stand for
history, not for work) into the partitions a leader made as its clock went through the last
day: ``--hour`` of them in the hour that expires now (retention one day), the rest spread over
the day after it.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SETTINGS = "benchmarks.fleet_settings"
WAIT_LOGGED = re.compile(r"process (\d+) acquired \w+ on .* after ([0-9.]+) ms")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--outcomes", type=int, default=10_000_000)
    parser.add_argument("--hour", type=int, default=7_000_000)
    parser.add_argument("--drain", type=int, default=20_000)
    parser.add_argument("--delete-seconds", type=float, default=60.0)
    parser.add_argument("--queue-db-drain", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.queue_db_drain:  # the child of own_database_drain, under the queue's own database
        import django

        sys.path.insert(0, str(ROOT))
        django.setup()
        print(drain(os.environ["DATABASE_URL"], args.drain))
        return 0
    if args.hour > args.outcomes:
        parser.error("--hour is a part of --outcomes")

    sys.path.insert(0, str(ROOT))
    from tests.faults.cluster import OwnCluster

    cluster = OwnCluster(
        max_connections=100, log_lock_waits="on", deadlock_timeout="10ms", shared_buffers="512MB"
    )
    try:
        url = cluster.create("iq_retention_bench")
        os.environ.update(DATABASE_URL=url, DJANGO_SETTINGS_MODULE=SETTINGS)
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        report = run(args, url, cluster)
        report["own database"] = own_database_drain(cluster, args.drain)
    finally:
        cluster.remove()
    print_report(args, report)
    return 0


def run(args: argparse.Namespace, url: str, cluster: object) -> dict[str, object]:
    from django.db import connection
    from django.utils import timezone

    from django_iq import partitions
    from django_iq.duties import PruningDuty
    from django_iq.leader import Leader
    from django_iq.managers.common import delete_first
    from django_iq.models import RunOutcome
    from tests.conftest import iq_settings_with

    report: dict[str, object] = {}
    report["empty"] = drain(url, args.drain)
    leader = Leader(name="retention-bench", duties=[], lease_seconds=60)
    assert leader.run_once().is_leader
    now = timezone.now()
    hour = partitions.aligned(now, 3600)
    expiring = hour - timedelta(hours=25)  # all of it past a day's retention now
    with iq_settings_with(OUTCOME_RETENTION_SECONDS=86_400, OUTCOME_PARTITION_SECONDS=3600):
        # The leader's passes through the last day, up to an hour ago: the hour from
        # ``expiring`` is past the retention only now.
        for step in range(26, 0, -1):
            PruningDuty().run_once(hour - timedelta(hours=step), leader.fence)
        started = time.perf_counter()
        fill(expiring, args.hour, args.outcomes - args.hour)
        report["fill seconds"] = time.perf_counter() - started
        report["sizes"] = sizes(args.outcomes)
        report["beside"] = drain(url, args.drain)

        # One expired hour removed while a drain runs.
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            (leader_pid,) = cursor.fetchone()
        log = cluster.directory / "server.log"  # type: ignore[attr-defined]
        logged_before = log.stat().st_size
        timings: dict[str, float] = {}

        def drop_during_drain() -> None:
            # The lease lapsed during the fill and the drains: the first pass finds it lost,
            # the next takes it again.
            assert leader.run_once().is_leader or leader.run_once().is_leader
            began = time.perf_counter()
            result = PruningDuty().run_once(timezone.now(), leader.fence)
            timings["pass"] = time.perf_counter() - began
            passed = result.outcome_partitions
            timings["dropped"] = len(passed.dropped) if passed else 0
            timings["postponed"] = len(passed.postponed) if passed else 0

        report["drop under drain"] = drain(url, args.drain, during=drop_during_drain)
        report["drop"] = timings
        report["waits"] = lock_waits(log, logged_before, exclude={leader_pid})

        # The same removal by bounded deletes, as MariaDB and SQLite prune: for a while.
        cutoff = hour - timedelta(hours=23)  # the next hour's records
        rows = RunOutcome.objects.filter(finished_at__lt=cutoff)
        deleted, began = 0, time.perf_counter()
        while time.perf_counter() - began < args.delete_seconds:
            batch = delete_first(rows, "finished_at", 1000)
            deleted += batch
            if batch < 1000:
                break
        report["bounded deletes"] = (deleted, time.perf_counter() - began)
    return report


def drain(url: str, count: int, during: object = None) -> float:
    """Start a 2x4 worker idle, enqueue ``count`` no-op entries, time until none is left;
    ``during()`` runs once the drain is under way."""
    from django.db import connection
    from django.utils import timezone

    from django_iq import enqueue_many
    from django_iq.models import Entry, Worker
    from tests.testapp.jobs import noop

    with connection.cursor() as cursor:
        # Each drain from the same footing: the previous drain's dead rows vacuumed, the
        # statistics read, no checkpoint left to write out its pages.
        cursor.execute("VACUUM ANALYZE")
        cursor.execute("CHECKPOINT")
    env = dict(
        os.environ,
        DATABASE_URL=url,
        DJANGO_IQ_LOG_LEVEL="WARNING",
        PYTHONPATH=str(ROOT),
    )
    command = [sys.executable, "-m", "django", "runworker", "-v", "0", "--queues", "default"]
    command += ["--processes", "2", "--threads", "4"]
    launched = timezone.now()
    workers = subprocess.Popen(command, cwd=ROOT, env=env, start_new_session=True)
    # This drain's two processes, registered: not the rows of an earlier drain's, nor the
    # leader's.
    mine = Worker.objects.filter(role="worker", stopped_at__isnull=True, started_at__gte=launched)
    try:
        deadline = time.monotonic() + 120
        while mine.count() < 2:
            if time.monotonic() > deadline or workers.poll() is not None:
                raise SystemExit("the worker processes did not start")
            time.sleep(0.1)
        time.sleep(1)
        started = time.perf_counter()
        enqueue_many(noop, [((), {}) for _ in range(count)])
        if callable(during):
            while Entry.objects.count() > count * 3 // 4:  # a quarter drained
                time.sleep(0.02)
            during()
        while Entry.objects.exists():
            time.sleep(0.02)
        rate = count / (time.perf_counter() - started)
    finally:
        os.killpg(workers.pid, signal.SIGTERM)
        workers.wait(60)
    return rate


def fill(expiring: object, in_hour: int, rest: int) -> None:
    """``in_hour`` records finished within the hour from ``expiring``, ``rest`` spread over
    the 24 hours after it, in the shape runs leave them."""
    from django.db import connection

    insert = """
        INSERT INTO django_iq_runoutcome (entry_id, result_id, job_name, queue, args, kwargs,
            status, attempt, return_value, exception_class, traceback, worker_name, started_at,
            finished_at, enqueued_at, duration_seconds)
        SELECT n, NULL, 'tests.testapp.jobs.noop', 'default', '[]', '{}', 'succeeded', 1,
            'null', '', '', 'bench-worker', t, t, t, 0.001
        FROM (SELECT n, %s::timestamptz + (n %% %s) * (%s::float8 / %s) * INTERVAL '1 second'
              AS t FROM generate_series(1, %s) AS n) AS rows
    """
    with connection.cursor() as cursor:
        cursor.execute(insert, [expiring, in_hour, 3600, in_hour, in_hour])
        start = expiring + timedelta(hours=1)  # type: ignore[operator]
        cursor.execute(insert, [start, max(rest, 1), 24 * 3600, max(rest, 1), rest])
        cursor.execute("VACUUM ANALYZE django_iq_runoutcome")


def sizes(records: int) -> dict[str, float]:
    """The outcome table's bytes on disk (every partition, with its indexes) and per record."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT sum(pg_relation_size(relid)), sum(pg_indexes_size(relid)) "
            "FROM pg_partition_tree('django_iq_runoutcome') WHERE isleaf"
        )
        table, indexes = (float(v or 0) for v in cursor.fetchone())
    return {"table": table, "indexes": indexes, "per record": (table + indexes) / max(records, 1)}


def lock_waits(log: Path, offset: int, exclude: set[int]) -> list[float]:
    """The lock waits of 10 ms or more the server logged after ``offset`` (ms each), but for
    the sessions in ``exclude`` (the leader's own, bounded by its lock timeout)."""
    text = log.read_bytes()[offset:].decode(errors="replace")
    return [float(ms) for pid, ms in WAIT_LOGGED.findall(text) if int(pid) not in exclude]


def own_database_drain(cluster: object, count: int) -> float:
    """The drain with the queue's tables on a database of their own, the application's on
    another, both on this cluster (``benchmarks.queue_db_settings``)."""
    from tests.faults.cluster import _binary

    port = cluster.port  # type: ignore[attr-defined]
    for name in ("iq_app", "iq_queue"):
        cluster._run(  # type: ignore[attr-defined]
            _binary("createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", name
        )
    env = dict(
        os.environ,
        DATABASE_URL=f"postgres://postgres@127.0.0.1:{port}/iq_app",
        QUEUE_DATABASE_URL=f"postgres://postgres@127.0.0.1:{port}/iq_queue",
        DJANGO_SETTINGS_MODULE="benchmarks.queue_db_settings",
        PYTHONPATH=str(ROOT),
    )
    for database in ("queue", "default"):
        subprocess.run(
            [sys.executable, "-m", "django", "migrate", "-v", "0", "--database", database],
            cwd=ROOT,
            env=env,
            check=True,
        )
    child = [sys.executable, "-m", "benchmarks.retention", "--queue-db-drain", "--drain"]
    command = [*child, str(count)]
    done = subprocess.run(command, cwd=ROOT, env=env, check=False, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"the drain on the queue's own database failed:\n{done.stderr[-3000:]}")
    return float(done.stdout.split()[-1])


def print_report(args: argparse.Namespace, report: dict[str, object]) -> None:
    empty = float(report["empty"])  # type: ignore[arg-type]
    beside = float(report["beside"])  # type: ignore[arg-type]
    under = float(report["drop under drain"])  # type: ignore[arg-type]
    own = float(report["own database"])  # type: ignore[arg-type]
    drop = report["drop"]
    waits = report["waits"]
    deleted, seconds = report["bounded deletes"]  # type: ignore[misc]
    size = report["sizes"]
    print(f"records written in {float(report['fill seconds']):.0f} s")  # type: ignore[arg-type]
    print()
    print("| drain 2x4 | jobs/s | vs empty tables |")
    print("|---|---:|---:|")
    for label, rate in (
        ("empty tables", empty),
        (f"beside {args.outcomes:,} outcome records", beside),
        (f"while the leader removes an hour of {args.hour:,}", under),
        ("queue on a database of its own (empty tables)", own),
    ):
        print(f"| {label} | {rate:,.0f} | {rate / empty:.2f}x |")
    print()
    print("| removing one hour of records | figure |")
    print("|---|---:|")
    print(f"| partitions dropped by the pass | {drop['dropped']:.0f} |")  # type: ignore[index]
    print(f"| postponed (lock not granted) | {drop['postponed']:.0f} |")  # type: ignore[index]
    print(f"| the leader's pass, s | {drop['pass']:.2f} |")  # type: ignore[index]
    print(f"| worker lock waits of 10 ms or more | {len(waits)} |")  # type: ignore[arg-type]
    longest = max(waits, default=0.0)  # type: ignore[type-var]
    print(f"| longest worker lock wait, ms | {longest:.1f} |")
    rate = deleted / seconds if seconds else 0.0
    print(f"| bounded deletes (batches of 1,000), records/s | {rate:,.0f} |")
    if rate:
        print(
            f"| bounded deletes: one hour of {args.hour:,} at that rate, s | {args.hour / rate:,.0f} |"
        )
    print()
    day = empty * 86_400
    per = size["per record"]  # type: ignore[index]
    print("| outcome table | size |")
    print("|---|---:|")
    print(f"| {args.outcomes:,} records: tables | {size['table'] / 2**30:.2f} GiB |")  # type: ignore[index]
    print(f"| {args.outcomes:,} records: indexes | {size['indexes'] / 2**30:.2f} GiB |")  # type: ignore[index]
    print(f"| per record, with indexes | {per:,.0f} B |")
    print(f"| a day at {empty:,.0f} jobs/s ({day:,.0f} records) | {per * day / 2**30:,.1f} GiB |")


if __name__ == "__main__":
    raise SystemExit(main())
