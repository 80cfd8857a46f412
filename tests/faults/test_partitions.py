"""The network silently drops a worker's or the leader's traffic to the database (no reset: a
partition, a dead switch, a hung fail-over) for longer than the silence limit, then heals.

The leader rightly declares a cut worker silent and gives its entries to another worker; the
cut worker must have stopped its runs by then (self-fencing), so that no entry and no group
ever runs in two places at once. Judged from the runs the job appended to a file, since a cut
run cannot write to the database."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
from django.db import connection

from django_iq.models import Entry, LeaderLease, Worker
from django_iq.process import EXIT_FENCED
from tests.conftest import wait_until
from tests.faults.harness import Verdict, env_with, start_leader, start_worker, stop_all
from tests.faults.partition import (
    ExitWatch,
    enqueue_in_file,
    file_runs,
    partition_verdict,
    recovery_errors,
    relay,
    through,
)
from tests.faults.test_process_faults import live_workers
from tests.processes import pid_of

HEARTBEAT = 0.5
SILENT_AFTER = 3.0
# Longer than the silence limit, by two heartbeats and some: the leader declares the cut
# process dead and another takes over its work while it is still cut.
CUT_SECONDS = SILENT_AFTER + 2 * HEARTBEAT + 4
JOB_SECONDS = 6.0


@pytest.fixture(autouse=True)
def _over_the_network() -> None:
    if connection.vendor == "sqlite":
        pytest.skip("SQLite is a file: there is no network to cut")


def settings_env() -> dict[str, str]:
    return env_with(
        HEARTBEAT_INTERVAL_SECONDS=HEARTBEAT,
        WORKER_SILENT_AFTER_SECONDS=SILENT_AFTER,
        LEADER_LEASE_SECONDS=2,
        LEADER_POLL_SECONDS=0.1,
    )


def wait_for_every_end(path: Path, tokens: list[str]) -> None:
    wait_until(
        lambda: (
            {r.token for r in file_runs(path, {}) if r.outcome == "end"} == set(tokens)
            and not Entry.objects.exists()
        ),
        timeout=40,
        interval=0.25,
        message="every entry done",
    )


def started_on(path: Path, pid: int) -> int:
    return sum(r.pid == pid for r in file_runs(path, {}))


@pytest.mark.parametrize(
    "blocked", [False, True], ids=["jobs in Python code", "jobs blocked in C code"]
)
def test_a_worker_cut_off_mid_run_stops_its_runs_before_they_run_elsewhere(
    blocked: bool, tmp_path: Path, verdicts: list[Verdict]
) -> None:
    path = tmp_path / "runs.log"
    singles, grouped = ["w-0", "w-1"], ["w-g0", "w-g1"]
    tokens = singles + grouped
    # Blocked: one sleep as long as the run, which WorkerFenced cannot interrupt.
    step = JOB_SECONDS if blocked else 0.02
    env = settings_env()
    with relay() as proxy:
        cut = start_worker("--threads", "4", env=through(proxy, env))
        other = start_worker("--threads", "4", env=env)  # ready for what recovery gives back
        leader = start_leader(env=env)
        wait_until(lambda: live_workers() == 2, message="both workers")
        # Held still for a moment, so that the worker about to be cut claims everything: both
        # singles and the group's first entry run there.
        other.send_signal(signal.SIGSTOP)
        enqueue_in_file(path, singles, "", JOB_SECONDS, step)
        enqueue_in_file(path, grouped, "w-g", JOB_SECONDS, step)
        wait_until(lambda: started_on(path, cut.pid) == 3, message="three runs on the worker")
        other.send_signal(signal.SIGCONT)
        exits = ExitWatch(cut)
        cut_at = time.time()
        proxy.silence()
        time.sleep(CUT_SECONDS)  # the partition's length is the scenario
        exited_while_cut = cut.poll()
        proxy.restore()
        healed_at = time.time()
        wait_for_every_end(path, tokens)
        # The cut process exits for its supervisor, or registers again with nothing running.
        wait_until(
            lambda: (
                cut.poll() is not None
                or Worker.objects.filter(
                    pid=cut.pid, stopped_at__isnull=True, heartbeat_at__isnull=False
                ).exists()
            ),
            timeout=20,
            message="the cut worker to exit or rejoin",
        )
        exits.close()
        rejoined = cut.poll() is None
        cut_output = cut.output()
        stop_all([cut, other, leader])
    runs = file_runs(path, exits.exited)
    for run in runs:
        print(
            f"{run.token} pid={run.pid} {'cut' if run.pid == cut.pid else 'other'} "
            f"{run.start - cut_at:+.2f}s..{run.end - cut_at:+.2f}s {run.outcome}"
        )
    scenario = (
        "worker cut off mid-run, jobs blocked in C (silent network)"
        if blocked
        else ("worker cut off mid-run (silent network)")
    )
    verdict = partition_verdict(scenario, tokens, runs, faults=1)
    verdicts.append(verdict)
    assert verdict.problems() == [], (verdict.problems(), cut_output[-3000:])
    cut_runs = [r for r in runs if r.pid == cut.pid]
    # Cut mid-run; nothing started on the cut worker while it was cut, nor after (it had runs
    # to give up).
    assert len(cut_runs) == 3 and all(cut_at - 3 < r.start < cut_at for r in cut_runs), cut_runs
    # Its runs stopped before the silence limit (less the time since its last heartbeat).
    assert all(r.end - cut_at < SILENT_AFTER for r in cut_runs), cut_runs
    # Each entry ran to its end exactly once; a cut run's attempt was counted by recovery,
    # not written by the cut worker.
    for token in tokens:
        ends = [r for r in runs if r.token == token and r.outcome == "end"]
        assert len(ends) == 1, (token, ends)
    for run in cut_runs:
        assert recovery_errors(run.token) == ["django_iq.exceptions.WorkerLost"], run
    assert healed_at - cut_at >= CUT_SECONDS
    # Runs that did not stop made it exit at once for its supervisor; runs that stopped are
    # left on its dead row, and it registered again once it reached the database.
    assert exited_while_cut == (EXIT_FENCED if blocked else None), cut_output[-3000:]
    assert blocked or rejoined, cut_output[-3000:]
    assert {r.outcome for r in cut_runs} == ({"exit"} if blocked else {"RaisedFence"})


def test_a_leader_cut_off_writes_nothing_once_a_second_leader_took_over(
    tmp_path: Path, verdicts: list[Verdict]
) -> None:
    path = tmp_path / "runs.log"
    env = settings_env()
    with relay() as proxy:
        # Logging what it recovers (INFO), to show it recovers nothing once cut off.
        cut = start_leader(env=through(proxy, {**env, "DJANGO_IQ_LOG_LEVEL": "INFO"}))
        wait_until(
            lambda: LeaderLease.objects.filter(holder__contains=f":{cut.pid}:").exists(),
            message="the leader through the relay to be elected",
        )
        standby = start_leader(env=env)
        victim = start_worker("--threads", "2", env=env)
        tokens = ["l-0", "l-1"]
        enqueue_in_file(path, tokens, "", JOB_SECONDS)
        wait_until(lambda: started_on(path, victim.pid) == 2, message="two runs on the worker")
        epoch = LeaderLease.objects.get().epoch
        proxy.silence()
        # The worker dies while the leader is cut: only a leader that took over recovers it.
        victim.kill_hard()
        killed_at = time.time()
        rescuer = start_worker("--threads", "2", env=env)
        time.sleep(CUT_SECONDS)  # the partition's length is the scenario
        lease = LeaderLease.objects.get()
        assert pid_of(lease.holder) == standby.pid and lease.epoch > epoch, lease
        proxy.restore()
        wait_for_every_end(path, tokens)
        time.sleep(2 * HEARTBEAT + 1)  # the healed leader's passes, had it anything to write
        lease = LeaderLease.objects.get()
        assert pid_of(lease.holder) == standby.pid, "the cut leader did not take the lease back"
        cut_output = cut.output()
        stop_all([cut, standby, rescuer])
    runs = file_runs(path, {victim.pid: killed_at})
    verdict = partition_verdict("leader cut off (silent network)", tokens, runs, faults=2)
    verdicts.append(verdict)
    assert verdict.problems() == [], verdict.problems()
    # Recovered once, by the leader that took over: one attempt counted per killed run.
    for token in tokens:
        assert recovery_errors(token) == ["django_iq.exceptions.WorkerLost"], token
    # The cut leader stopped acting by its own clock, and recovered nothing: the standby did.
    assert "leadership lost" in cut_output, cut_output[-3000:]
    assert "recovered lock" not in cut_output, cut_output[-3000:]
    assert "worker declared dead" not in cut_output, cut_output[-3000:]


def test_an_idle_worker_cut_off_claims_again_once_the_network_heals(
    tmp_path: Path, verdicts: list[Verdict]
) -> None:
    path = tmp_path / "runs.log"
    env = settings_env()
    with relay() as proxy:
        cut = start_worker("--threads", "2", env=through(proxy, env))
        leader = start_leader(env=env)
        other = start_worker("--threads", "2", env=env)
        wait_until(lambda: live_workers() == 2, message="both workers")
        proxy.silence()
        during = [f"i-{i}" for i in range(4)]
        enqueue_in_file(path, during, "", 0.2)  # for the other worker, while one is cut off
        time.sleep(CUT_SECONDS)  # the partition's length is the scenario
        proxy.restore()
        # Declared dead meanwhile, it registers again under a fresh row and claims again.
        wait_until(
            lambda: Worker.objects.filter(
                name__contains=f":{cut.pid}:", stopped_at__isnull=True
            ).exists(),
            timeout=20,
            message="the cut worker to register again",
        )
        after = [f"i-after-{i}" for i in range(12)]
        enqueue_in_file(path, after, "", 0.5)
        wait_for_every_end(path, during + after)
        assert cut.poll() is None, cut.output()[-3000:]
        stop_all([cut, other, leader])
    runs = file_runs(path, {})
    verdict = partition_verdict("idle worker cut off (silent network)", during + after, runs, 1)
    verdicts.append(verdict)
    assert verdict.problems() == [], verdict.problems()
    assert not any(r.pid == cut.pid and r.token in during for r in runs)
    assert any(r.pid == cut.pid for r in runs), "the healed worker claimed again"


@pytest.mark.parametrize(
    "linger", [0.5, 3.0], ids=["run ends within the grace", "run outlasts the grace"]
)
def test_a_run_still_stopping_when_the_network_heals_is_left_to_recovery(
    linger: float, tmp_path: Path, verdicts: list[Verdict]
) -> None:
    """A cut shorter than the silence limit, healed while a run told to stop (``WorkerFenced``)
    is still cleaning up: the worker must not go on as if it held nothing, with that run's lock
    kept by a live row that recovery never looks at. It claims nothing more, exits for its
    supervisor once the run ends (or the fence's grace does), and recovery counts the
    attempt."""
    path = tmp_path / "runs.log"
    # Slower heartbeats than the other scenarios: the fence comes 4 s into the cut and a run
    # has 1 s to stop, long enough to heal the network within it.
    env = env_with(
        HEARTBEAT_INTERVAL_SECONDS=1.0,
        WORKER_SILENT_AFTER_SECONDS=6.0,
        LEADER_LEASE_SECONDS=2,
        LEADER_POLL_SECONDS=0.1,
    )
    with relay() as proxy:
        cut = start_worker("--threads", "2", env=through(proxy, env))
        leader = start_leader(env=env)
        wait_until(lambda: live_workers() == 1, message="the worker")
        # Cleans up for a while after WorkerFenced reaches it: past the heal.
        enqueue_in_file(path, ["s-0"], "", 12.0, linger=linger)
        wait_until(lambda: started_on(path, cut.pid) == 1, message="the run on the worker")
        exits = ExitWatch(cut)
        proxy.silence()
        wait_until(
            lambda: "no heartbeat completed" in cut.output(), timeout=15, message="the fence"
        )
        proxy.restore()
        wait_until(
            lambda: "reached the database again" in cut.output(), timeout=5, message="the heal"
        )
        other = start_worker("--threads", "2", env=env)
        # Seen by the watch, which dates the end of a run the exit cut short.
        wait_until(lambda: cut.pid in exits.exited, timeout=20, message="the worker to exit")
        assert cut.poll() == EXIT_FENCED, cut.output()[-3000:]
        exits.close()
        # Its process gone, the leader declares its row dead and another worker runs the entry.
        wait_until(
            lambda: (
                any(r.outcome == "end" for r in file_runs(path, exits.exited))
                and not Entry.objects.exists()
            ),
            timeout=90,
            interval=0.25,
            message="the entry run again elsewhere",
        )
        cut_output = cut.output()
        stop_all([other, leader])
    runs = file_runs(path, exits.exited)
    scenario = f"run still stopping {linger:g}s when the network heals (silent network)"
    verdict = partition_verdict(scenario, ["s-0"], runs, 1)
    verdicts.append(verdict)
    assert verdict.problems() == [], (verdict.problems(), cut_output[-3000:])
    # Ended stopped, or cut short by the exit at the end of the grace (one heartbeat, 1 s).
    stopped = "RaisedFence" if linger < 1.0 else "exit"
    assert [r.outcome for r in runs if r.pid == cut.pid] == [stopped], runs
    assert recovery_errors("s-0") == ["django_iq.exceptions.WorkerLost"]
