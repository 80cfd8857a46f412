"""Operator pages at scale: fill the entry table, then time the admin, dashboard, API and metrics.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/iq_bench python -m benchmarks.admin_scale
    python -m benchmarks.admin_scale --entries 100000 --repeat 5

It creates (and afterwards drops) its own database, so it never touches yours. Entries are
spread over three queues and two jobs: most pending, some deferred, some disabled, a few
hundred running (claimed, with their group locks), and a few hundred final failures. Each page
is loaded once to warm up, then ``--repeat`` times; the table shows the median time and the
number of SQL queries of one load.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BATCH = 10_000


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if args.entries < BATCH or args.repeat < 1:
        parser.error(f"--entries must be at least {BATCH} and --repeat at least 1")

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    os.environ.setdefault("DATABASE_URL", f"sqlite:///{ROOT / '.bench.sqlite3'}")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.test.utils import setup_databases, teardown_databases

    old = setup_databases(verbosity=0, interactive=False)
    try:
        started = time.perf_counter()
        fill(args.entries)
        print(f"filled {args.entries:,} entries in {time.perf_counter() - started:.0f} s")
        rows = measure(args.repeat)
    finally:
        teardown_databases(old, verbosity=0)
    print_table(rows, args.entries)
    return 0


def fill(total: int) -> None:
    from datetime import timedelta

    from django.db import connection

    from django_iq import enqueue_many
    from django_iq.models import Entry, Worker
    from tests.testapp.jobs import always_fails, noop, record

    deferred, disabled, grouped = total // 10, total // 20, 2_000
    plain = total - deferred - disabled - grouped
    for start in range(0, plain, BATCH):
        size = min(BATCH, plain - start)
        batch = start // BATCH
        job = noop if batch % 3 == 0 else record
        options = {"queue": ("default", "emails", "reports")[batch % 3], "priority": batch % 7 * 10}
        arguments = (
            [((), {})] * size if job is noop else [((f"p{start + i}",), {}) for i in range(size)]
        )
        enqueue_many(job.using(**options), arguments)
    for start in range(0, deferred, BATCH):
        size = min(BATCH, deferred - start)
        enqueue_many(noop.using(queue="reports", run_at=timedelta(hours=1)), [((), {})] * size)
    for start in range(0, disabled, BATCH):
        size = min(BATCH, disabled - start)
        enqueue_many(always_fails, [((f"d{start + i}",), {}) for i in range(size)])
    for n in range(grouped):  # an application enqueues one entry per group key
        record.using(queue="emails", group_key=f"customer:{n}").enqueue(f"k{n}")

    worker = Worker.objects.register(
        name="bench:1",
        role=Worker.Role.WORKER,
        host="bench",
        pid=1,
        queues=[],
        processing_threads=300,
    )
    claims = [
        c for q in ("default", "emails", "reports") for c in Entry.objects.claim(worker, 100, q)
    ]
    for claim in claims[::2]:  # half the running entries fail for good: error records
        for entry in claim.entries:
            lock_id = claim.lock_id if entry is claim.entries[-1] else None
            Entry.objects.fail(
                entry,
                lock_id,
                exception_class="RuntimeError",
                message="upstream answered 503",
                traceback="Traceback (most recent call last):\nRuntimeError: upstream answered 503",
                retry_at=None,
            )
    Entry.objects.disable(always_fails.name)
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")


def measure(repeat: int) -> list[tuple[str, float, int, int]]:
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    user = get_user_model().objects.create_superuser("bench", "bench@example.com", "bench")
    client = Client()
    client.force_login(user)
    pages = [
        ("queues (admin)", "/admin/django_iq/queue/"),
        ("entries (admin)", "/admin/django_iq/entry/"),
        ("entries of a queue", "/admin/django_iq/entry/?queue__name__exact=emails"),
        ("entries awaiting compute", "/admin/django_iq/entry/?state=awaiting_compute"),
        ("entries computing", "/admin/django_iq/entry/?state=computing"),
        ("entries of a job", "/admin/django_iq/entry/?job=tests.testapp.jobs.noop"),
        ("entries, group key search", "/admin/django_iq/entry/?q=customer%3A42"),
        ("errors (admin)", "/admin/django_iq/entryerror/"),
        ("workers (admin)", "/admin/django_iq/worker/"),
        ("dashboard", "/admin/django_iq/dashboard/"),
        ("API: entries page", "/iq/api/entries/?limit=100"),
        ("API: entries of a queue", "/iq/api/entries/?queue=reports&limit=100"),
        ("API: count awaiting", "/iq/api/entries/count/?state=awaiting_compute"),
        ("API: queues", "/iq/api/queues/"),
        ("Prometheus metrics", "/iq/metrics/"),
    ]
    rows = []
    for label, url in pages:
        response = client.get(url)
        if response.status_code != 200:
            raise SystemExit(f"{url} answered {response.status_code}")
        timings = []
        for _ in range(repeat):
            with CaptureQueriesContext(connection) as queries:
                started = time.perf_counter()
                response = client.get(url)
                if hasattr(response, "streaming_content"):
                    b"".join(response.streaming_content)
                timings.append(time.perf_counter() - started)
        rows.append((label, statistics.median(timings) * 1000, len(queries), len(response.content)))
    return rows


def print_table(rows: list[tuple[str, float, int, int]], entries: int) -> None:
    from django.db import connection

    print(f"\n{connection.vendor}, {entries:,} entries")
    print(f"{'page':<28} {'median ms':>10} {'queries':>8} {'KiB':>7}")
    for label, ms, queries, size in rows:
        print(f"{label:<28} {ms:>10.0f} {queries:>8} {size / 1024:>7.0f}")


if __name__ == "__main__":
    raise SystemExit(main())
