"""Throughput benchmark: enqueue no-op jobs, drain them with real runworker processes, print a table.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/iq_bench python -m benchmarks.throughput
    python -m benchmarks.throughput --jobs 5000 --processes 2 --threads 8

It creates (and afterwards drops) its own database, so it never touches yours.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--threads", type=int, nargs="+", default=[4, 8])
    args = parser.parse_args()

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    os.environ.setdefault("DATABASE_URL", f"sqlite:///{ROOT / '.bench.sqlite3'}")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.db import connection
    from django.test.utils import setup_databases, teardown_databases

    from django_iq import enqueue_many
    from django_iq.models import Entry
    from tests.testapp.jobs import noop

    old = setup_databases(verbosity=0, interactive=False)
    test_url = _url(connection.settings_dict, connection.vendor)
    rows = []
    try:
        for processes in args.processes:
            for threads in args.threads:
                started = time.perf_counter()
                enqueue_many(noop, [((), {}) for _ in range(args.jobs)])
                enqueued = time.perf_counter() - started
                env = dict(
                    os.environ,
                    DATABASE_URL=test_url,
                    DJANGO_IQ_LOG_LEVEL="WARNING",
                    PYTHONPATH=str(ROOT),
                )
                started = time.perf_counter()
                command = [
                    sys.executable,
                    "-m",
                    "django",
                    "runworker",
                    "--burst",
                    "-v",
                    "0",
                    "--threads",
                    str(threads),
                    "--processes",
                    str(processes),
                ]
                subprocess.run(command, cwd=ROOT, env=env, check=True)
                drained = time.perf_counter() - started
                left = Entry.objects.count()
                rows.append(
                    (
                        connection.vendor,
                        processes,
                        threads,
                        args.jobs,
                        args.jobs / enqueued,
                        args.jobs / drained,
                        left,
                    )
                )
    finally:
        teardown_databases(old, verbosity=0)
    print(
        f"{'database':<11}{'procs':>6}{'threads':>8}{'jobs':>8}{'enqueue/s':>12}{'run/s':>10}{'left':>6}"
    )
    for vendor, processes, threads, jobs, enqueue_rate, run_rate, left in rows:
        print(
            f"{vendor:<11}{processes:>6}{threads:>8}{jobs:>8}{enqueue_rate:>12.0f}{run_rate:>10.0f}{left:>6}"
        )
    return 0


def _url(settings: dict[str, object], vendor: str) -> str:
    if vendor == "sqlite":
        return f"sqlite:///{settings['NAME']}"
    scheme = {"postgresql": "postgres", "mysql": "mysql"}[vendor]
    return f"{scheme}://{settings['USER']}@{settings['HOST'] or '127.0.0.1'}:{settings['PORT'] or ''}/{settings['NAME']}"


if __name__ == "__main__":
    raise SystemExit(main())
