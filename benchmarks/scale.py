"""Drain rate and claim latency with big tables beside the work: empty, then with 1,000,000
waiting entries (in a queue the workers do not serve) and 1,000,000 finished records (outcome
records and final errors), PostgreSQL.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/iq_bench python -m benchmarks.scale
    python -m benchmarks.scale --waiting 1000000 --finished 1000000 --drain 10000

It creates (and afterwards drops) its own database. Each stage drains ``--drain`` no-op
entries with ``runworker --processes 2 --threads 4`` (timed from start to exit with ``--burst``)
and times ``--claims`` single claims of one entry each (claim, then release) from this process.
The big rows are written with one ``INSERT ... SELECT`` each, not through the queue's API: they
stand for history, not for work.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

from benchmarks.draining import timed_drain

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--waiting", type=int, default=1_000_000)
    parser.add_argument("--finished", type=int, default=1_000_000)
    parser.add_argument("--drain", type=int, default=10_000)
    parser.add_argument("--claims", type=int, default=500)
    args = parser.parse_args()

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/iq_bench")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.db import connection
    from django.test.utils import setup_databases, teardown_databases

    if connection.vendor != "postgresql":
        parser.error("this benchmark is for PostgreSQL: set DATABASE_URL=postgres://...")
    old = setup_databases(verbosity=0, interactive=False)
    rows = []
    try:
        rows.append(("empty tables", *stage(args)))
        started = time.perf_counter()
        fill(args.waiting, args.finished)
        print(
            f"filled {args.waiting:,} waiting and {args.finished:,} finished rows in "
            f"{time.perf_counter() - started:.0f} s",
            file=sys.stderr,
        )
        rows.append((f"{args.waiting:,} waiting, {args.finished:,} finished", *stage(args)))
    finally:
        teardown_databases(old, verbosity=0)
    print("| tables | drain 2x4 /s | claim p50 ms | claim p99 ms |")
    print("|---|---|---|---|")
    for label, rate, p50, p99 in rows:
        print(f"| {label} | {rate:,.0f} | {p50:.2f} | {p99:.2f} |")
    base, big = rows[0], rows[-1]
    print(
        f"\ndrain {big[1] / base[1]:.2f}x, claim p50 {big[2] / base[2]:.2f}x, "
        f"claim p99 {big[3] / base[3]:.2f}x of the empty-table figures"
    )
    return 0


def stage(args: argparse.Namespace) -> tuple[float, float, float]:
    """Drain ``args.drain`` entries with worker processes, then time single claims."""
    from django.db import connection

    from django_iq import enqueue_many
    from django_iq.models import Entry, GroupLock, Worker
    from tests.testapp.jobs import noop

    with connection.cursor() as cursor:
        # Both stages start from the same footing: statistics read, and no checkpoint left
        # to write out the previous stage's (or the fill's) pages during the timed drain.
        cursor.execute("ANALYZE")
        cursor.execute("CHECKPOINT")
    enqueue_many(noop, [((), {}) for _ in range(args.drain)])
    rate = timed_drain(args.drain)

    enqueue_many(noop, [((), {}) for _ in range(args.claims)])
    worker = Worker.objects.register(
        name=f"scale-bench:{os.getpid()}:{time.monotonic_ns()}",  # one row per stage
        role="worker",
        host="bench",
        pid=os.getpid(),
        queues=[],
        processing_threads=1,
    )
    times = []
    for _ in range(args.claims):
        begun = time.perf_counter()
        claims = Entry.objects.claim(worker, 1, "default", is_capped=False)
        times.append((time.perf_counter() - begun) * 1000)
        GroupLock.objects.release([claim.lock_id for claim in claims])
    Entry.objects.filter(queue_id="default").delete()
    Worker.objects.stop(worker)
    times.sort()
    return rate, statistics.median(times), times[int(len(times) * 0.99) - 1]


def fill(waiting: int, finished: int) -> None:
    """Write the big rows in bulk, in the shape the queue leaves them."""
    from django.db import connection

    from django_iq.models import Queue

    Queue.objects.get_or_create(name="backlog")
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO django_iq_entry (queue, job_name, args, kwargs, priority, state,
                lock_key, run_at, attempts, max_attempts, enqueued_at)
            SELECT 'backlog', 'tests.testapp.jobs.noop', '[]', '{}', 0, 'pending',
                'e:backlog-' || n, NOW(), 0, 3, NOW()
            FROM generate_series(1, %s) AS n
            """,
            [waiting],
        )
        cursor.execute(
            """
            INSERT INTO django_iq_runoutcome (entry_id, result_id, job_name, queue, args,
                kwargs, status, attempt, return_value, exception_class, traceback, worker_name,
                started_at, finished_at, enqueued_at, duration_seconds)
            SELECT n, 'done-' || n, 'tests.testapp.tasks.add', 'default', '[]', '{}',
                'succeeded', 1, 'null', '', '', 'bench', NOW(), NOW(), NOW(), 0.001
            FROM generate_series(1, %s) AS n
            """,
            [finished // 2],
        )
        cursor.execute(
            """
            INSERT INTO django_iq_entryerror (entry_id, queue, job_name, args, kwargs, priority,
                group_key, max_attempts, attempt, exception_class, message, traceback,
                worker_name, enqueued_at, failed_at, is_final)
            SELECT n, 'default', 'tests.testapp.jobs.noop', '[]', '{}', 0, NULL, 3, 3,
                'builtins.ValueError', 'failed', '', 'bench', NOW(), NOW(), TRUE
            FROM generate_series(1, %s) AS n
            """,
            [finished - finished // 2],
        )
        cursor.execute("VACUUM ANALYZE")


if __name__ == "__main__":
    raise SystemExit(main())
