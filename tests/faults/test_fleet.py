"""A fleet on one PostgreSQL: 48 worker processes of one thread each, under four supervisors
with four host names (``runworker --processes 12 --threads 1``, as four hosts would run them),
and a leader, on a cluster of the suite's own, drain 4,000 entries that mix group keys, a
cluster-wide cap, a per-node cap and a rate limit. (How fast a fleet drains is measured by
benchmarks/fleet.py; this test judges what the fleet does, at the size where its sessions,
caps and claims meet.)

Judged only by what the jobs recorded (one row per run, with its start and end times, its
process and its host): every entry ran exactly once, no group ran twice at once, no job ran
more at once than its cap (cluster-wide, or on any one host), no more rate-limited starts in
any second than the limit; and every process kept within its session budget."""

from __future__ import annotations

import random
import time
from collections import defaultdict
from collections.abc import Iterator

import pytest
from django.db.models import Count

from django_iq.models import Entry, EntryError, GroupLock
from tests.factories import most_at_once, most_starts_within
from tests.faults import fleet_jobs
from tests.faults.cluster import OwnCluster, own_database
from tests.faults.harness import (
    Verdict,
    backend_pids,
    judge,
    start_leader,
    start_worker,
    stop_all,
)
from tests.processes import command_env
from tests.testapp.models import RecordedRun

pytestmark = pytest.mark.postgresql

HOSTS = 4
PER_HOST = 12
ENTRIES = 4_000
# A claim counts as a start, and its entry starts as soon as the worker hands it over: allow
# that hand-over when judging starts by the times the jobs recorded.
HAND_OVER_SECONDS = 0.05
# (job, entries, of them in groups of ten, seconds each run takes)
MIX = [
    (fleet_jobs.fleet_free, 3_400, 1_000, 0.0),
    (fleet_jobs.fleet_capped, 200, 60, 0.01),
    (fleet_jobs.fleet_per_node, 200, 60, 0.01),
    (fleet_jobs.fleet_rated, 200, 60, 0.0),
]


@pytest.fixture
def cluster() -> Iterator[tuple[OwnCluster, str]]:
    # 48 workers at threads + 2 sessions each, a leader, the test: room for all of them.
    with own_database("iq_fleet", max_connections=300) as (own, url):
        yield own, url


def enqueue_mix() -> set[str]:
    """The mix in batches (a group's ten entries, or a hundred ungrouped ones) enqueued in a
    shuffled order, so that every kind of entry is spread through the queue. Return the
    tokens."""
    batches = []
    for job, count, grouped, seconds in MIX:
        name = job.name.rsplit(".", 1)[-1]
        tokens = [f"{name}-{i}" for i in range(count)]
        for start in range(0, grouped, 10):
            key = f"{name}-g{start // 10}"
            calls = [
                ((t,), {"group_key": key, "seconds": seconds}) for t in tokens[start : start + 10]
            ]
            batches.append((job.using(group_key=key), calls))
        for start in range(grouped, count, 100):
            calls = [((t,), {"seconds": seconds}) for t in tokens[start : start + 100]]
            batches.append((job, calls))
    random.Random(24).shuffle(batches)
    for target, calls in batches:
        target.enqueue_many(calls)
    return {args[0] for _, calls in batches for args, _ in calls}


def drain(timeout: float) -> int:
    """Wait until every entry ran; return the most sessions seen open meanwhile."""
    most = 0
    deadline = time.monotonic() + timeout
    while RecordedRun.objects.count() < ENTRIES or Entry.objects.exists():
        most = max(most, len(backend_pids()))
        assert time.monotonic() < deadline, (
            f"the drain: {RecordedRun.objects.count()} of {ENTRIES} ran, "
            f"{Entry.objects.count()} entries left, "
            f"{dict(Entry.objects.values_list('job_name').annotate(n=Count('pk')))}"
        )
        time.sleep(1)  # the poll: one sample a second keeps the test's own queries light
    return most


def test_48_worker_processes_drain_a_mixed_queue(
    cluster: tuple[OwnCluster, str], verdicts: list[Verdict]
) -> None:
    _, url = cluster
    tokens = enqueue_mix()
    assert len(tokens) == ENTRIES == Entry.objects.count()
    env = {"DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "tests.faults.fleet_settings"}
    supervisors = [
        start_worker(
            "--processes",
            str(PER_HOST),
            "--threads",
            "1",
            env=command_env(**env, DJANGO_IQ_HOST_NAME=f"host-{h}"),
        )
        for h in range(HOSTS)
    ]
    leader = start_leader(env=command_env(**env))
    began = time.time()
    try:
        # Bounded for a loaded two-core machine: 48 processes share its two cores.
        most_sessions = drain(timeout=480)
        drained = time.time() - began
        assert all(s.poll() is None for s in [*supervisors, leader]), "no process exited"
    finally:
        stop_all([*supervisors, leader])

    verdict = judge(f"{HOSTS * PER_HOST} worker processes drain a mixed queue", tokens, [], 0)
    verdicts.append(verdict)
    assert verdict.problems() == []
    assert verdict.reruns == 0 and RecordedRun.objects.count() == ENTRIES, "each entry ran once"
    assert not EntryError.objects.exists() and not GroupLock.objects.exists()

    runs: dict[str, list[tuple[str, float, float]]] = defaultdict(list)
    for token, host, started, finished in RecordedRun.objects.values_list(
        "token", "host", "started_at", "finished_at"
    ):
        runs[token.rsplit("-", 1)[0]].append((host, started, finished))
    assert len({host for kind in runs.values() for host, _, _ in kind}) == HOSTS
    capped = [(s, f) for _, s, f in runs["fleet_capped"]]
    assert most_at_once(capped) <= fleet_jobs.CAP, f"max_concurrency={fleet_jobs.CAP}"
    for h in range(HOSTS):
        on_host = [(s, f) for host, s, f in runs["fleet_per_node"] if host == f"host-{h}"]
        assert on_host and most_at_once(on_host) <= fleet_jobs.PER_NODE, f"per node on host-{h}"
    starts = [s for _, s, _ in runs["fleet_rated"]]
    most = most_starts_within(starts, 1.0 - HAND_OVER_SECONDS)
    assert most <= fleet_jobs.RATE_PER_SECOND, f"rate_limit={fleet_jobs.RATE_PER_SECOND}/s"
    # The budget: threads + 2 per busy worker process, 2 per leader, none per supervisor.
    assert most_sessions <= HOSTS * PER_HOST * (1 + 2) + 2, most_sessions
    for kind, kind_runs in sorted(runs.items()):
        first = min(s for _, s, _ in kind_runs) - began
        last = max(f for _, _, f in kind_runs) - began
        print(f"{kind}: {len(kind_runs)} runs from +{first:.1f} s to +{last:.1f} s")
    print(
        f"drained {ENTRIES} entries with {HOSTS * PER_HOST} processes in {drained:.1f} s, {most_sessions} sessions at most"
    )
