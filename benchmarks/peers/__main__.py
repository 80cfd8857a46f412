"""``python -m benchmarks.peers``: django_iq against django-tasks-db, procrastinate and Celery.

    python -m benchmarks.peers --quick
    python -m benchmarks.peers --systems django_iq celery --jobs 5000 --drain-jobs 10000

Run from the repository root with django_iq's environment. Each peer runs in its own
virtualenv, ``.bench-venvs/<peer>``, created from ``benchmarks/peers/requirements-<peer>.txt``
when missing or out of date; django_iq runs with this interpreter. Each system gets a fresh
PostgreSQL database, ``iq_peer_<system>``, created and dropped here (Celery uses Redis
database 15 instead, and flushes only that one). Per system, ``<system>_bench.py`` runs in its
environment: single and bulk enqueue, drains at 2x1 and 2x4 (twice each), whole-machine CPU
and worker RSS, enqueue-to-start latency; then pgbench gives the SQL-only limit. Prints one
markdown table; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path
from typing import Any

from benchmarks.peers import runner, table

ALL = [*runner.SYSTEMS, "pgbench"]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.peers",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--systems",
        nargs="+",
        choices=ALL,
        default=ALL,
        metavar="SYSTEM",
        help=f"any of: {' '.join(ALL)} (default: all)",
    )
    parser.add_argument("--jobs", type=int, help="single and bulk enqueues (default 5000)")
    parser.add_argument("--drain-jobs", type=int, help="jobs per drain (default 10000)")
    parser.add_argument("--latency-jobs", type=int, help="latency probes (default 200)")
    parser.add_argument("--drain-timeout", type=float, default=600.0, help="seconds (600)")
    parser.add_argument("--pgbench-seconds", type=int, help="per client count (default 10)")
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke test")
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    parser.add_argument("--pg-url", default="postgres://postgres@127.0.0.1:5432")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/15")
    args = parser.parse_args(argv)
    quick = {"jobs": 200, "drain_jobs": 100, "latency_jobs": 20, "pgbench_seconds": 2}
    full = {"jobs": 5000, "drain_jobs": 10000, "latency_jobs": 200, "pgbench_seconds": 10}
    for key, value in (quick if args.quick else full).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return args


def run_system(key: str, args: argparse.Namespace) -> dict[str, Any]:
    peer = runner.SYSTEMS[key]
    python = runner.ensure_venv(peer.venv) if peer.venv else Path(sys.executable)
    script_args = [
        f"--jobs={args.jobs}",
        f"--drain-jobs={args.drain_jobs}",
        f"--latency-jobs={args.latency_jobs}",
        f"--drain-timeout={args.drain_timeout}",
        f"--redis-url={args.redis_url}",
        f"--variant={peer.variant}",
    ]
    # Four drains, each bounded by --drain-timeout, plus enqueues, latency and start-ups.
    timeout = 4 * (args.drain_timeout + 60) + 900
    runner.log(f"== {key}")
    if not peer.database:
        return runner.run_script(python, peer.script, script_args, timeout)
    with runner.scratch_database(args.pg_url, f"iq_peer_{key}") as url:
        return runner.run_script(python, peer.script, [*script_args, f"--db-url={url}"], timeout)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # SIGTERM cleans up the way Ctrl-C does


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even if started with it ignored
    signal.signal(signal.SIGTERM, _interrupt)
    results: dict[str, dict[str, Any]] = {}
    for key in runner.SYSTEMS:
        if key in args.systems:
            try:
                results[key] = run_system(key, args)
            except Exception as exc:  # one system failing leaves the others' rows
                results[key] = {"error": f"{type(exc).__name__}: {exc}"}
    pgbench = None
    if "pgbench" in args.systems:
        try:
            pgbench = runner.pgbench_limit(args.pg_url, args.pgbench_seconds)
        except Exception as exc:
            pgbench = {"error": f"{type(exc).__name__}: {exc}", "clients": {}}
    params = (
        f"{args.jobs} enqueues, {args.drain_jobs} jobs per drain, {args.latency_jobs} latency"
        f" probes, pgbench {args.pgbench_seconds} s per client count"
    )
    print(table.render(results, pgbench, params))
    if args.json:
        payload = {"params": vars(args) | {"json": str(args.json)}, "systems": results}
        args.json.write_text(json.dumps(payload | {"pgbench": pgbench}, indent=2, default=str))
    failed = [key for key, r in results.items() if r.get("error")]
    return 1 if failed or (pgbench and pgbench.get("error")) else 0


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except KeyboardInterrupt:
        runner.log("interrupted; processes and databases cleaned up")
        raise SystemExit(130) from None
