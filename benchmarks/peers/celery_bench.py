"""Celery's side of the peer benchmark, run in its own virtualenv, Redis as the broker.

    .bench-venvs/celery/bin/python benchmarks/peers/celery_bench.py --redis-url redis://127.0.0.1:6379/15

Started by ``python -m benchmarks.peers``, which creates the virtualenv from
``requirements-celery.txt``; prints one JSON object (see ``harness``). It flushes only the
Redis database of ``--redis-url`` (15), before and after. Celery's defaults: a PxT drain is P
``celery worker -c T`` instances with the prefork pool (T child processes each), prefetch
multiplier 4, early acks; bulk enqueue is ``group(...).apply_async()``. The queue counts as
empty when the ``celery`` list and the ``unacked`` hash (prefetched, not yet acked) are both
empty; with early acks, that is when the last job has been handed to a pool process.
"""

from __future__ import annotations

import argparse
import os
import sys
from urllib.parse import urlsplit

import harness


class CeleryBench:
    label: str = "Celery/Redis"
    bulk_api: str | None = "group(...).apply_async()"

    def __init__(self, args: argparse.Namespace) -> None:
        if urlsplit(args.redis_url).path.strip("/") != "15":
            raise SystemExit("Celery's benchmark uses (and flushes) Redis database 15 only")
        os.environ["IQ_PEER_REDIS_URL"] = args.redis_url
        import celery_app
        import redis

        self.tasks = celery_app
        self.redis = redis.Redis.from_url(args.redis_url)
        self.worker_env = harness.worker_env(IQ_PEER_REDIS_URL=args.redis_url)

    def reset(self) -> None:
        self.redis.flushdb()  # database 15 only

    def enqueue_one(self) -> None:
        self.tasks.noop.delay()

    def enqueue_bulk(self, count: int) -> None:
        from celery import group

        group(self.tasks.noop.s() for _ in range(count)).apply_async()

    def preenqueue(self, count: int) -> None:
        self.enqueue_bulk(count)

    def pending(self) -> int:
        return int(self.redis.llen("celery")) + int(self.redis.hlen("unacked"))

    def failed(self) -> int | None:
        return None  # no result backend to ask; the probe jobs prove the tasks run

    def worker_commands(self, processes: int, threads: int) -> list[list[str]]:
        command = [sys.executable, "-m", "celery", "-A", "celery_app", "worker"]
        command += ["--loglevel", "WARNING", "--concurrency", str(threads)]
        return [[*command, "--hostname", f"peer{index}@%h"] for index in range(processes)]

    def enqueue_probe(self, enqueued_at: float, path: str) -> None:
        self.tasks.probe.delay(enqueued_at, path)


if __name__ == "__main__":
    raise SystemExit(harness.main(CeleryBench))
