"""What the OpenTelemetry instrumentation costs (docs/howto/opentelemetry.md), PostgreSQL.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/iq_bench python -m benchmarks.tracing
    python -m benchmarks.tracing --drain 20000 --rounds 3 --enqueues 2000

It creates (and afterwards drops) its own database. Three set-ups, in turns, ``--rounds``
times each (the best round counts):

- ``not instrumented``: the plain worker;
- ``instrumented, no tracer``: ``DjangoIQInstrumentor().instrument()`` with no SDK configured
  (OpenTelemetry's default no-op provider): what a project pays that installs the extra but
  exports nothing;
- ``instrumented, SDK``: a real ``TracerProvider`` whose spans go through a
  ``BatchSpanProcessor`` to an exporter that drops them: the cost of making every span.

Each drains ``--drain`` no-op entries with ``runworker --processes 2 --threads 4 --burst``
(timed from start to exit), and times ``--enqueues`` single ``enqueue()`` calls from this
process, each its own transaction, under the same set-up.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

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
    parser.add_argument("--rounds", type=int, default=3)
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
    try:
        for _ in range(args.rounds):
            for setup in SETUPS:
                drains[setup].append(drain(args.drain, MODES[setup]))
                enqueues[setup].append(enqueue_rate(args.enqueues, MODES[setup]))
    finally:
        teardown_databases(old, verbosity=0)
    base_drain, base_enqueue = max(drains[SETUPS[0]]), max(enqueues[SETUPS[0]])
    print(f"PostgreSQL, runworker --processes 2 --threads 4, best of {args.rounds} rounds")
    print("| set-up | drain /s | vs not instrumented | single enqueues /s | vs not instrumented |")
    print("|---|---|---|---|---|")
    for setup in SETUPS:
        rate, single = max(drains[setup]), max(enqueues[setup])
        print(
            f"| {setup} | {rate:,.0f} | {rate / base_drain:.2f}x | {single:,.0f} | "
            f"{single / base_enqueue:.2f}x |"
        )
    return 0


def drain(count: int, mode: str) -> float:
    from django.db import connection

    from django_iq import enqueue_many
    from django_iq.models import Entry
    from tests.testapp.jobs import noop

    enqueue_many(noop, [((), {}) for _ in range(count)])
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")
        cursor.execute("CHECKPOINT")
    env = dict(
        os.environ,
        DATABASE_URL=_url(),
        DJANGO_IQ_LOG_LEVEL="WARNING",
        PYTHONPATH=str(ROOT),
        IQ_BENCH_TRACING=mode,
    )
    command = [sys.executable, "-m", "django", "runworker", "--burst", "-v", "0"]
    command += ["--queues", "default", "--processes", "2", "--threads", "4"]
    started = time.perf_counter()
    subprocess.run(command, cwd=ROOT, env=env, check=True)
    rate = count / (time.perf_counter() - started)
    left = Entry.objects.filter(queue_id="default").count()
    if left:
        raise SystemExit(f"{left} entries were left after the drain")
    return rate


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


def _url() -> str:
    from django.db import connection

    s = connection.settings_dict
    return f"postgres://{s['USER']}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


if __name__ == "__main__":
    raise SystemExit(main())
