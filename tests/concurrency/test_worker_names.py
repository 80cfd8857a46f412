"""Two workers started with the same ``--name`` on the same node name, each PID 1 in a PID
namespace of its own, as two containers of one image are: each keeps its own ``Worker`` row,
and neither one's registration takes the other's claims away."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys

import psutil
import pytest

from django_iq.models import EntryError, RunOutcome, Worker
from tests.conftest import wait_until
from tests.faults.harness import env_with, judge, wait_for_all, wait_for_no_locks
from tests.processes import Command
from tests.testapp.jobs import recorded
from tests.testapp.models import RecordedRun

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

# New PID, user and mount namespaces with a /proc of their own: the command runs as PID 1.
AS_PID_ONE = ["unshare", "--user", "--map-root-user", "--pid", "--fork", "--mount-proc"]
TIMING = {"HEARTBEAT_INTERVAL_SECONDS": 0.5, "WORKER_SILENT_AFTER_SECONDS": 4}


def _pid_namespaces() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = [*AS_PID_ONE, sys.executable, "-c", "import os; print(os.getpid())"]
    done = subprocess.run(probe, capture_output=True, text=True, timeout=30, check=False)
    return done.returncode == 0 and done.stdout.strip() == "1"


class PidOneWorker(Command):
    """``runworker`` as PID 1 of a PID namespace of its own, like a container's entry point."""

    def __init__(self, *args: str, env: dict[str, str]) -> None:
        super().__init__("runworker", *args, env=env, prefix=AS_PID_ONE)

    def terminate(self) -> None:
        """SIGTERM the worker itself (``unshare`` waits for it and passes no signal on)."""
        try:
            for child in psutil.Process(self.pid).children(recursive=True):
                child.send_signal(signal.SIGTERM)
        except psutil.NoSuchProcess:
            pass  # it has exited already


@pytest.mark.skipif(not _pid_namespaces(), reason="needs unshare with user and PID namespaces")
def test_two_containers_with_one_name_each_keep_their_own_row_and_claims() -> None:
    # One node name for both, as two containers given the same host name.
    env = env_with(**TIMING, HOST_NAME="node", LEADER_POLL_SECONDS=0.2)
    leader = Command("runleader", env=env)
    workers = [PidOneWorker("--name", "w", "--threads", "3", env=env) for _ in range(2)]
    try:
        wait_until(
            lambda: all("worker started" in worker.output() for worker in workers),
            timeout=30,
            message="both workers to start",
        )
        # Six groups of eight for six threads: both workers take part.
        groups = [f"g{g}" for g in range(6)]
        tokens = {f"{group}-{i}" for group in groups for i in range(8)}
        for group in groups:
            recorded.using(group_key=group).enqueue_many(
                [((f"{group}-{i}",), {"group_key": group, "seconds": 0.2}) for i in range(8)]
            )
        wait_for_all(tokens, timeout=60)
        wait_for_no_locks()
        live = list(Worker.objects.live().filter(role="worker").values_list("name", flat=True))
    finally:
        for worker in workers:
            worker.terminate()
        leader.send_signal(signal.SIGTERM)
        outputs = [command.finish(60)[1] for command in [*workers, leader]]

    assert set(RecordedRun.objects.values_list("pid", flat=True)) == {1}, "both ran as PID 1"
    verdict = judge("same name", tokens, [], faults=0)
    assert verdict.problems() == [] and verdict.reruns == 0, (verdict, outputs[0][-3000:])
    lost = EntryError.objects.filter(exception_class="django_iq.exceptions.WorkerLost")
    assert not lost.exists(), [e.message for e in lost]
    assert len(live) == 2 and all(name.startswith("w:1:") for name in live), live
    ran_on = set(RunOutcome.objects.values_list("worker_name", flat=True))
    assert ran_on == set(live), "both workers ran entries, each under its own row"
