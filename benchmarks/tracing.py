"""What the OpenTelemetry instrumentation costs (docs/howto/opentelemetry.md), PostgreSQL.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/iq_bench python -m benchmarks.tracing
    python -m benchmarks.tracing --drain 20000 --rounds 5 --enqueues 2000

It creates (and afterwards drops) its own database. Three set-ups, in turns, ``--rounds``
times each (the median round counts; a drain on a shared machine varies by a tenth or more
from round to round):

- ``not instrumented``: the plain worker;
- ``instrumented, no tracer``: ``DjangoIQInstrumentor().instrument()`` with no SDK configured
  (OpenTelemetry's default no-op provider): what a project pays that installs the extra but
  exports nothing;
- ``instrumented, SDK``: a real ``TracerProvider`` whose spans go through a
  ``BatchSpanProcessor`` to an exporter that drops them: the cost of making every span.

Each drains ``--drain`` no-op entries with ``runworker --processes 2 --threads 4 --burst``
(timed from start to exit), and times ``--enqueues`` single ``enqueue()`` calls from this
process, each its own transaction, under the same set-up. Then it times the hooks alone
(``--hooks`` times an enqueue's and a run's, in this process): what each entry pays for them,
a figure the drain's noise cannot hide.
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
SETUPS = ("not instrumented", "instrumented, no tracer", "instrumented, SDK")
# The settings module of each set-up (benchmarks/tracing_settings.py reads IQ_BENCH_TRACING).
MODES = {"not instrumented": "off", "instrumented, no tracer": "noop", "instrumented, SDK": "sdk"}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--drain", type=int, default=20_000)
    parser.add_argument("--enqueues", type=int, default=2_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--hooks", type=int, default=50_000)
    args = parser.parse_args()

    os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.tracing_settings"
    os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/iq_bench")
    os.environ["IQ_BENCH_TRACING"] = "off"
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.db import connection
    from django.test.utils import setup_databases, teardown_databases

    if connection.vendor != "postgresql":
        parser.error("this benchmark is for PostgreSQL: set DATABASE_URL=postgres://...")
    old = setup_databases(verbosity=0, interactive=False)
    drains: dict[str, list[float]] = {setup: [] for setup in SETUPS}
    enqueues: dict[str, list[float]] = {setup: [] for setup in SETUPS}
    hooks: dict[str, list[float]] = {setup: [] for setup in SETUPS}
    try:
        for _ in range(args.rounds):
            for setup in SETUPS:
                drains[setup].append(drain(args.drain, MODES[setup]))
                enqueues[setup].append(enqueue_rate(args.enqueues, MODES[setup]))
                hooks[setup].append(hook_seconds(args.hooks, MODES[setup]))
    finally:
        teardown_databases(old, verbosity=0)
    base_drain = statistics.median(drains[SETUPS[0]])
    base_enqueue = statistics.median(enqueues[SETUPS[0]])
    print(
        f"PostgreSQL, runworker --processes 2 --threads 4, {args.drain:,} entries; "
        f"median of {args.rounds} rounds taken in turns (lowest-highest)"
    )
    print("| set-up | drain /s | vs not instrumented | single enqueues /s | vs not instrumented |")
    print("|---|---|---|---|---|")
    for setup in SETUPS:
        rate, single = statistics.median(drains[setup]), statistics.median(enqueues[setup])
        print(
            f"| {setup} | {rate:,.0f} ({min(drains[setup]):,.0f}-{max(drains[setup]):,.0f}) | "
            f"{rate / base_drain:.2f}x | {single:,.0f} "
            f"({min(enqueues[setup]):,.0f}-{max(enqueues[setup]):,.0f}) | "
            f"{single / base_enqueue:.2f}x |"
        )
    # The hooks alone, timed in this process: what one entry pays for them (its enqueue and
    # its run), and that as a share of the time a worker process gives each entry in the
    # median drain of the plain worker (2 processes: 2 / rate seconds each).
    print()
    print(f"The hooks alone: enqueue and run of one entry, best of {args.rounds} x {args.hooks:,}")
    print("| set-up | µs per entry | share of an entry's time in the drain |")
    print("|---|---|---|")
    for setup in SETUPS:
        cost = min(hooks[setup])
        print(f"| {setup} | {cost * 1e6:.2f} | {cost / (2 / base_drain):.2%} |")
    return 0


def hook_seconds(count: int, mode: str) -> float:
    """Seconds the tracing hooks of one entry take (an enqueue's, then a run's), as installed by
    ``mode``, with nothing else around them: the best of ``count`` timed in one go."""
    from benchmarks.tracing_settings import set_up_tracing, tear_down_tracing
    from django_iq import tracing
    from django_iq.models import Entry

    entry = Entry(pk=1, job_name="tests.testapp.jobs.noop", queue_id="default")
    set_up_tracing(mode)
    try:
        started = time.perf_counter()
        for _ in range(count):
            with tracing.enqueueing(entry.job_name, "default", 1) as sending:
                entry.traceparent = sending.traceparent
            sending.sent([entry])
            with tracing.running(entry, 1, "bench"):
                pass
        return (time.perf_counter() - started) / count
    finally:
        tear_down_tracing()


def drain(count: int, mode: str) -> float:
    from django.db import connection

    from django_iq import enqueue_many
    from tests.testapp.jobs import noop

    enqueue_many(noop, [((), {}) for _ in range(count)])
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")
        cursor.execute("CHECKPOINT")
    return timed_drain(count, IQ_BENCH_TRACING=mode)


def enqueue_rate(count: int, mode: str) -> float:
    from benchmarks.tracing_settings import set_up_tracing, tear_down_tracing
    from django_iq.models import Entry
    from tests.testapp.jobs import noop

    set_up_tracing(mode)
    try:
        started = time.perf_counter()
        for _ in range(count):
            noop.enqueue()
        rate = count / (time.perf_counter() - started)
    finally:
        tear_down_tracing()
    Entry.objects.filter(queue_id="default").delete()
    return rate


if __name__ == "__main__":
    raise SystemExit(main())
