"""Drain rate and claim latency as the number of worker processes grows, on one machine:
``runworker --processes 2 --threads 4`` (the peer benchmark's 2x4) beside 8, 24 and 48
processes of one processing thread each, PostgreSQL.

    python -m benchmarks.fleet
    python -m benchmarks.fleet --drain 20000 --shapes 2x4 8x1 24x1 48x1 --runs 2

It starts a PostgreSQL cluster of its own on a free port (``initdb`` in a temporary directory,
``max_connections=300``: 48 processes keep a few sessions each), and removes it afterwards.
For each shape the workers are started idle and registered before ``--drain`` no-op entries
are enqueued in bulk; the rate is entries over the time from the enqueue's start until no
entry is left. Claim p50/p99: each worker process times its single-statement claims (the
client's call, round trip included) through ``benchmarks.fleet_settings``.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--drain", type=int, default=20_000)
    parser.add_argument("--shapes", nargs="+", default=["2x4", "8x1", "24x1", "48x1"])
    parser.add_argument("--runs", type=int, default=1, help="drains per shape (the best is kept)")
    parser.add_argument("--max-connections", type=int, default=300)
    args = parser.parse_args()
    shapes = [tuple(int(n) for n in shape.split("x")) for shape in args.shapes]

    sys.path.insert(0, str(ROOT))
    from tests.faults.cluster import OwnCluster

    cluster = OwnCluster(max_connections=args.max_connections)
    try:
        url = cluster.create("iq_fleet_bench")
        os.environ["DATABASE_URL"] = url
        os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.fleet_settings"
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        rows = []
        for processes, threads in shapes:
            runs = [drain(url, processes, threads, args.drain) for _ in range(args.runs)]
            rate, p50, p99, claims = max(runs)
            rows.append((f"{processes}x{threads}", processes * threads, rate, p50, p99, claims))
            print(f"{processes}x{threads}: {[round(r[0]) for r in runs]} jobs/s", file=sys.stderr)
    finally:
        cluster.remove()
    base = next((row for row in rows if row[0] == "2x4"), rows[0])
    print(f"| processes x threads | jobs/s | vs {base[0]} | claim p50 ms | claim p99 ms | claims |")
    print("|---|---:|---:|---:|---:|---:|")
    for label, _, rate, p50, p99, claims in rows:
        print(
            f"| {label} | {rate:,.0f} | {rate / base[2]:.2f}x | {p50:.2f} | {p99:.2f} | "
            f"{claims:,} |"
        )
    return 0


def drain(url: str, processes: int, threads: int, count: int) -> tuple[float, float, float, int]:
    """Start the workers, wait until each is registered, enqueue ``count`` no-op entries and
    time until none is left. Return jobs/s, claim p50 and p99 (ms) and the claims timed."""
    from django.db import connection

    from django_iq import enqueue_many
    from django_iq.models import Entry, Worker
    from tests.testapp.jobs import noop

    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE django_iq_entry, django_iq_runoutcome, django_iq_entryerror, "
            "django_iq_grouplock, django_iq_worker CASCADE"
        )
        cursor.execute("VACUUM ANALYZE")
        cursor.execute("CHECKPOINT")
    times = Path(tempfile.mkdtemp(prefix="iq-fleet-claims-"))
    env = dict(
        os.environ,
        DATABASE_URL=url,
        DJANGO_SETTINGS_MODULE="benchmarks.fleet_settings",
        DJANGO_IQ_LOG_LEVEL="WARNING",
        IQ_BENCH_CLAIM_TIMES=str(times),
        PYTHONPATH=str(ROOT),
    )
    command = [sys.executable, "-m", "django", "runworker", "-v", "0", "--queues", "default"]
    command += ["--processes", str(processes), "--threads", str(threads)]
    workers = subprocess.Popen(command, cwd=ROOT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while Worker.objects.filter(stopped_at__isnull=True).count() < processes:
            if time.monotonic() > deadline or workers.poll() is not None:
                raise SystemExit(f"{processes} worker processes did not all start")
            time.sleep(0.1)
        time.sleep(1)  # their first idle passes done
        for path in times.iterdir():
            path.unlink()  # claims of the idle passes
        started = time.perf_counter()
        enqueue_many(noop, [((), {}) for _ in range(count)])
        while Entry.objects.exists():
            time.sleep(0.02)
        rate = count / (time.perf_counter() - started)
    finally:
        os.killpg(workers.pid, signal.SIGTERM)
        workers.wait(60)
    claims = sorted(float(line) for path in times.iterdir() for line in path.read_text().split())
    for path in times.iterdir():
        path.unlink()
    times.rmdir()
    if not claims:
        return rate, 0.0, 0.0, 0
    p99 = claims[min(len(claims) - 1, int(len(claims) * 0.99))]
    return rate, statistics.median(claims), p99, len(claims)


if __name__ == "__main__":
    raise SystemExit(main())
