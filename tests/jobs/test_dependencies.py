"""Dependencies between entries, run by a real worker on the test database: ``using(after=...)``
chains and fan-in, a child ``blocked`` until its parents end, and both failure policies,
judged by the runs the jobs recorded (docs/howto/workflows.md)."""

from __future__ import annotations

import pytest

from django_iq.exceptions import InvalidJobOptions
from django_iq.models import Entry, EntryDependency, EntryError, Queue
from django_iq.worker import WorkerProcess
from tests.testapp.jobs import record, step
from tests.testapp.models import RecordedRun

pytestmark = pytest.mark.django_db(transaction=True)

PARENT_FAILED = "django_iq.exceptions.ParentFailed"


def drain() -> None:
    assert WorkerProcess(burst=True, processing_threads=4).run(install_signal_handlers=False) == 0


def run_of(token: str) -> tuple[float, float]:
    started, finished = (
        RecordedRun.objects.filter(token=token).values_list("started_at", "finished_at").get()
    )
    assert finished is not None
    return started, finished


def test_a_chain_runs_in_order_each_step_after_the_one_before_ended() -> None:
    first = step.enqueue("a", seconds=0.05)
    second = step.using(after=[first]).enqueue("b", seconds=0.05)
    third = step.using(after=[second.pk]).enqueue("c")

    assert (second.state, second.blockers, third.state) == ("blocked", 1, "blocked")
    (stats,) = [s for s in Queue.objects.stats() if s.queue == "default"]
    assert (stats.pending, stats.blocked) == (1, 2)

    drain()

    assert run_of("a")[1] <= run_of("b")[0] and run_of("b")[1] <= run_of("c")[0]
    assert not Entry.objects.exists() and not EntryDependency.objects.exists()


def test_a_child_with_three_parents_runs_once_after_all_of_them() -> None:
    parents = [step.enqueue(f"p{i}", seconds=0.05 * i) for i in range(3)]
    step.using(after=parents).enqueue("child")

    drain()

    assert run_of("child")[0] >= max(run_of(f"p{i}")[1] for i in range(3))
    assert RecordedRun.objects.filter(token="child").count() == 1


def test_a_parent_failing_for_good_fails_its_descendants_with_parent_failed() -> None:
    parent = step.enqueue("doomed", fail=True)
    child = step.using(after=[parent]).enqueue("child")
    grandchild = step.using(after=[child]).enqueue("grandchild")

    drain()

    assert not RecordedRun.objects.filter(token__in=["child", "grandchild"]).exists()
    for entry, cause in ((child, parent), (grandchild, child)):
        error = EntryError.objects.get(entry_id=entry.pk)
        assert (error.exception_class, error.is_final) == (PARENT_FAILED, True)
        assert f"Parent entry {cause.pk}" in error.message
    assert not Entry.objects.exists()


def test_with_on_parent_failure_run_the_child_runs_anyway() -> None:
    parent = step.enqueue("fails", fail=True)
    step.using(after=[parent], on_parent_failure="run").enqueue("runs-anyway")

    drain()

    assert run_of("runs-anyway")[0] >= run_of("fails")[1]


def test_parents_that_already_ended_count_as_they_ended() -> None:
    done = step.enqueue("done-before")
    failed = step.enqueue("failed-before", fail=True)
    drain()

    after_success = step.using(after=[done]).enqueue("after-success")
    after_failure = step.using(after=[failed]).enqueue("after-failure")
    runs = step.using(after=[failed], on_parent_failure="run").enqueue("runs")

    assert after_success.state == "pending" and runs.state == "pending"
    error = EntryError.objects.get(entry_id=after_failure.pk)
    assert error.exception_class == PARENT_FAILED
    drain()
    assert RecordedRun.objects.filter(token__in=["after-success", "runs"]).count() == 2


def test_cancelling_a_parent_fails_its_children() -> None:
    parent = record.using(run_at=None).enqueue("never")
    child = step.using(after=[parent]).enqueue("orphan")

    assert Entry.objects.cancel([parent.pk]) == (1, 0)

    error = EntryError.objects.get(entry_id=child.pk)
    assert error.exception_class == PARENT_FAILED and "was cancelled" in error.message
    assert not Entry.objects.exists()


def test_a_disabled_job_enabled_again_keeps_its_blocked_entries_waiting() -> None:
    parent = step.enqueue("parent", seconds=0.05)
    child = record.using(after=[parent]).enqueue("child")
    Entry.objects.disable(record.name)
    Entry.objects.enable(record.name)

    assert Entry.objects.get(pk=child.pk).state == "blocked"


@pytest.mark.parametrize("bad", ["1,2", 5, [0], [True], [None], ["x"], [2**63], [2**70]])
def test_bad_parents_are_refused_and_nothing_is_written(bad: object) -> None:
    with pytest.raises(InvalidJobOptions, match="after"):
        step.using(after=bad).enqueue("never")
    assert not Entry.objects.exists()


def test_bad_policies_and_unique_keys_with_after_are_refused() -> None:
    with pytest.raises(InvalidJobOptions, match="on_parent_failure"):
        step.using(on_parent_failure="skip")
    with pytest.raises(InvalidJobOptions, match="unique"):
        step.using(after=[1], unique_key="k")
