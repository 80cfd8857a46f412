"""Two workers drain while the leader, its clock run ahead of theirs, drops the outcome
partitions they write into, creates new ones, and deletes the default partition's expired rows
under their inserts. On a PostgreSQL cluster of the suite's own that logs every lock wait of
50 ms or more (``log_lock_waits``, ``deadlock_timeout``): judged by the runs the jobs recorded
and by the server's log, not by the leader's own account."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from django_iq.duties import PruningDuty
from django_iq.leader import Leader
from django_iq.models import EntryError
from tests.conftest import iq_settings_with
from tests.faults.cluster import own_database
from tests.faults.harness import Verdict, all_done, judge, start_worker, stop_all
from tests.faults.test_process_faults import enqueue
from tests.processes import command_env

pytestmark = pytest.mark.postgresql

# A wait the server logs: the bound no worker may reach.
WAIT_BOUND_MS = 50


def test_workers_draining_while_the_leader_drops_the_partitions_they_write_into(
    verdicts: list[Verdict],
) -> None:
    with own_database(
        "iq_retention",
        max_connections=60,
        log_lock_waits="on",
        deadlock_timeout=f"{WAIT_BOUND_MS}ms",
    ) as (own, url):
        with connection.cursor() as cursor:
            cursor.execute("SHOW log_lock_waits")
            assert cursor.fetchone() == ("on",), "the server logs lock waits"
        tokens = enqueue("retention", 6000, seconds=0.01)
        workers = [
            start_worker("--threads", "4", env=command_env(DATABASE_URL=url)) for _ in range(2)
        ]
        leader = Leader(name="retention", duties=[], lease_seconds=30)
        created: list[str] = []
        dropped: list[str] = []
        deleted = 0
        try:
            with iq_settings_with(OUTCOME_PARTITION_SECONDS=60, OUTCOME_RETENTION_SECONDS=60):
                clock = timezone.now()
                deadline = time.monotonic() + 180
                while not all_done(tokens, "default"):
                    assert time.monotonic() < deadline, "the drain to end"
                    assert leader.run_once().is_leader
                    done = PruningDuty().run_once(clock, leader.fence)
                    assert done.skipped == {} and done.outcome_partitions is not None
                    created += done.outcome_partitions.created
                    dropped += done.outcome_partitions.dropped
                    deleted += done.outcome_partitions.deleted
                    clock += timedelta(seconds=45)  # the partitions they write into expire
                    time.sleep(0.25)  # the pace of the leader's passes, as its loop's
            assert all(w.poll() is None for w in workers), "no worker exited"
        finally:
            stop_all(workers)
        log = (own.directory / "server.log").read_text(errors="replace")

        verdict = judge("leader dropped outcome partitions under a drain", tokens, [], len(dropped))
        verdicts.append(verdict)
        assert verdict.problems() == []
        assert not EntryError.objects.exists(), "no run failed"
        assert len(dropped) >= 3 and len(created) >= 3 and deleted > 0, (created, dropped, deleted)
        waits = [line for line in log.splitlines() if "still waiting for" in line]
        assert waits == [], f"lock waits of {WAIT_BOUND_MS} ms or more: {waits[:5]}"
