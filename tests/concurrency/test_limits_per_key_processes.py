"""Caps and rate limits per key with four worker processes on whichever database the suite runs
on, judged by the times the jobs recorded: no account ever has more than its cap running, while
twenty accounts run side by side and one account's backlog holds up none of the others; and each
tenant's starts stay within its own rate limit in any window."""

from __future__ import annotations

from collections import defaultdict

import pytest

from django_iq import enqueue_many
from django_iq.models import Entry, GroupLock
from tests.factories import most_at_once, most_starts_within
from tests.processes import Command, command_env, finish, start_command
from tests.testapp.jobs import per_account, per_tenant
from tests.testapp.models import RecordedRun

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

# A claim counts as a start, and its entry starts as soon as the worker hands it over: allow
# that hand-over when judging starts by the times the jobs recorded. Four processes of four
# threads on two cores hand over less evenly than the per-job test's two processes of three
# (tests/concurrency/test_job_limits_processes.py allows 0.05 s): one run, on a loaded machine,
# recorded 4 starts of a tenant within 0.9 s whose claims were a second apart.
HAND_OVER_SECONDS = 0.2


def start_workers(count: int = 4) -> list[Command]:
    return [
        start_command(
            "runworker",
            "--burst",
            "--threads",
            "4",
            # No leader runs here: a long silence limit, so that a heartbeat waiting seconds
            # for SQLite's one write lock under load does not fence a worker (status 5).
            env=command_env(DJANGO_IQ_WORKER_SILENT_AFTER_SECONDS="20"),
        )
        for _ in range(count)
    ]


def finish_all(workers: list[Command]) -> None:
    for worker in workers:
        code, output = finish(worker, 240)
        assert code == 0, output[-3000:]


def runs_by_key() -> dict[str, list[tuple[float, float]]]:
    runs: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for key, started, finished in RecordedRun.objects.values_list(
        "group_key", "started_at", "finished_at"
    ):
        assert finished is not None, "every run ended"
        runs[key].append((started, finished))
    return runs


def test_twenty_accounts_each_within_its_cap_and_one_backlog_holds_up_no_other() -> None:
    # Account 00's 40 entries are enqueued first: a claim in order would take them all first.
    enqueue_many(per_account, [(("acct-00", f"00-{i}"), {"seconds": 0.1}) for i in range(40)])
    enqueue_many(
        per_account,
        [
            ((f"acct-{k:02}", f"{k:02}-{i}"), {"seconds": 0.1})
            for k in range(1, 20)
            for i in range(6)
        ],
    )

    finish_all(start_workers())

    runs = runs_by_key()
    assert len(runs) == 20 and sum(map(len, runs.values())) == 40 + 19 * 6, "each ran once"
    for key, key_runs in runs.items():
        assert most_at_once(key_runs) <= 2, f"max_concurrency=2 per account: {key}"
    everything = [run for key_runs in runs.values() for run in key_runs]
    assert most_at_once(everything) >= 8, "accounts ran side by side, not two at a time"
    big_starts = sorted(start for start, _ in runs["acct-00"])
    others_done = max(
        end for key, key_runs in runs.items() if key != "acct-00" for _, end in key_runs
    )
    assert others_done < big_starts[-1], (
        "every other account was done before account 00 started its last entry"
    )
    assert not Entry.objects.exists() and not GroupLock.objects.exists()


def test_each_tenants_starts_stay_within_its_own_rate_limit() -> None:
    enqueue_many(per_tenant, [((f"t{k}", f"t{k}-{i}"), {}) for k in range(4) for i in range(7)])

    finish_all(start_workers(count=2))

    runs = runs_by_key()
    assert sorted(runs) == ["t0", "t1", "t2", "t3"]
    for tenant, tenant_runs in runs.items():
        starts = [start for start, _ in tenant_runs]
        assert len(starts) == 7
        assert most_starts_within(starts, 1.0 - HAND_OVER_SECONDS) <= 3, f"3/s for {tenant}"
        assert max(starts) - min(starts) >= 2.0 - HAND_OVER_SECONDS, "7 starts at 3/s: 3 windows"
    all_starts = sorted(start for tenant_runs in runs.values() for start, _ in tenant_runs)
    assert most_starts_within(all_starts, 1.0 - HAND_OVER_SECONDS) >= 8, (
        "tenants started side by side: more than one tenant's limit a second in all"
    )
