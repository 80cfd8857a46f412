"""The jobs of the 48-process drain (tests/faults/test_fleet.py), registered only in processes
run with ``tests.faults.fleet_settings`` (and in the test's own process, which imports this
module): their caps and rate limit must not reach the rest of the suite's workers.

Each run records itself once, at its end, with its start and end times, its process and its
host name: a drain without faults has one row per entry."""

from __future__ import annotations

import os
import time

from django_iq import job
from tests.testapp.models import RecordedRun

CAP = 6
PER_NODE = 2
RATE_PER_SECOND = 200


def _ran(token: str, group_key: str, seconds: float) -> str:
    started = time.time()
    if seconds:
        time.sleep(seconds)  # the job's own work: a run that takes time, for overlap checks
    RecordedRun.objects.create(
        token=token,
        group_key=group_key,
        pid=os.getpid(),
        host=os.environ.get("DJANGO_IQ_HOST_NAME", ""),
        started_at=started,
        finished_at=time.time(),
    )
    return token


@job
def fleet_free(token: str, group_key: str = "", seconds: float = 0.0) -> str:
    return _ran(token, group_key, seconds)


@job(max_concurrency=CAP)
def fleet_capped(token: str, group_key: str = "", seconds: float = 0.0) -> str:
    return _ran(token, group_key, seconds)


@job(max_concurrency_per_node=PER_NODE)
def fleet_per_node(token: str, group_key: str = "", seconds: float = 0.0) -> str:
    return _ran(token, group_key, seconds)


@job(rate_limit=f"{RATE_PER_SECOND}/s")
def fleet_rated(token: str, group_key: str = "", seconds: float = 0.0) -> str:
    return _ran(token, group_key, seconds)
