"""The fault suite's judge can fail: overlapping runs, a lost entry and leftovers are reported,
and only runs in flight on a killed or frozen process are excused."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import wait_until
from tests.factories import EntryFactory
from tests.faults.harness import FaultWindow, freeze, judge, kill_pid, thaw
from tests.testapp.models import RecordedRun

pytestmark = pytest.mark.django_db


def run(token: str, pid: int, start: float, end: float | None, group: str = "") -> None:
    RecordedRun.objects.create(
        token=token, group_key=group, pid=pid, started_at=start, finished_at=end
    )


def test_runs_one_after_the_other_pass() -> None:
    run("a", 1, 10.0, 11.0)
    run("a", 2, 11.5, 12.0)
    run("b", 2, 10.0, 10.5, group="g")
    run("c", 1, 10.6, 11.0, group="g")

    verdict = judge("calm", ["a", "b", "c"], [], faults=0)

    assert verdict.problems() == [] and verdict.reruns == 1


def test_two_runs_of_one_entry_at_once_are_an_overlap_unless_a_fault_hit_one() -> None:
    run("a", 1, 10.0, 12.0)
    run("a", 2, 11.0, 11.5)

    assert len(judge("no fault", ["a"], [], faults=0).overlaps) == 1
    frozen = FaultWindow(pid=1, start=10.5, end=13.0)
    excused = judge("frozen", ["a"], [frozen], faults=1)
    assert excused.overlaps == [] and excused.excused == 1
    before = FaultWindow(pid=1, start=9.0, end=9.5)
    assert len(judge("fault before the run", ["a"], [before], faults=1).overlaps) == 1


def test_two_entries_of_one_group_at_once_are_an_overlap() -> None:
    run("a", 1, 10.0, 12.0, group="g")
    run("b", 2, 11.0, 13.0, group="g")

    (overlap,) = judge("group", ["a", "b"], [], faults=0).overlaps
    assert overlap.startswith("group g:")


def test_an_entry_without_a_finished_run_is_lost_and_leftovers_are_reported() -> None:
    run("a", 1, 10.0, None)
    EntryFactory()

    verdict = judge("lost", ["a", "b"], [], faults=0)

    assert verdict.lost == ["a", "b"]
    assert verdict.left == ["1 entries left"]


def _stamping_process(path: Path) -> subprocess.Popen[bytes]:
    """A process that writes the time, over and over, as a job's start record would be."""
    with path.open("w") as out:
        process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import sys, time\nwhile True:\n    print(repr(time.time()), flush=True)",
            ],
            stdout=out,
        )
    wait_until(lambda: path.stat().st_size > 0, message="the process to write")
    return process


def _last_stamp(path: Path) -> float:
    lines = path.read_text().splitlines()
    return max(float(line) for line in lines if line.count(".") == 1 and line[-1].isdigit())


@pytest.mark.parametrize("rounds", [20])
def test_a_kill_window_opens_no_earlier_than_the_last_thing_the_process_did(
    rounds: int, tmp_path: Path
) -> None:
    # A run recorded by a process an instant before the kill reached it was hit by the kill:
    # the window must not open before that record, however late the signal is delivered.
    for i in range(rounds):
        path = tmp_path / f"stamps-{i}"
        process = _stamping_process(path)
        window = kill_pid(process.pid)
        process.wait()
        assert window.start >= _last_stamp(path)


def test_a_freeze_window_opens_no_earlier_than_the_last_thing_the_process_did(
    tmp_path: Path,
) -> None:
    path = tmp_path / "stamps"
    process = _stamping_process(path)
    try:
        stopped_at = freeze(process.pid)
        last = _last_stamp(path)
        assert stopped_at >= last
        window = thaw(process.pid, stopped_at)
        wait_until(lambda: _last_stamp(path) > window.end, message="the process to go on")
    finally:
        process.kill()
        process.wait()
