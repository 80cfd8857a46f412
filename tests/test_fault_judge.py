"""The fault suite's judge can fail: overlapping runs, a lost entry and leftovers are reported,
and only runs in flight on a killed or frozen process are excused."""

from __future__ import annotations

import pytest

from tests.factories import EntryFactory
from tests.faults.harness import FaultWindow, judge
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
