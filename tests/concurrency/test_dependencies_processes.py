"""Dependencies with several worker processes on PostgreSQL: chains and fan-in run each child
once, only after every parent ended, and a parent's final failure ends or runs its children
as asked. Judged by the start and end times the jobs recorded."""

from __future__ import annotations

import pytest

from django_iq.models import Entry, EntryDependency, EntryError, GroupLock
from tests.processes import finish, start_command
from tests.testapp.jobs import step
from tests.testapp.models import RecordedRun

pytestmark = [pytest.mark.postgresql, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_chains_and_fan_in_across_worker_processes() -> None:
    parents_of: dict[str, list[str]] = {}
    for chain in range(15):
        previous = None
        for link in range(5):
            token = f"chain{chain}-{link}"
            bound = step.using(after=[previous]) if previous is not None else step
            previous = bound.enqueue(token, seconds=0.01)
            parents_of[token] = [f"chain{chain}-{link - 1}"] if link else []
    for fan in range(10):
        parents = [step.enqueue(f"fan{fan}-p{i}", seconds=0.02 * i) for i in range(3)]
        step.using(after=parents).enqueue(f"fan{fan}-child")
        parents_of[f"fan{fan}-child"] = [f"fan{fan}-p{i}" for i in range(3)]
    doomed_parent = step.enqueue("doomed", fail=True)
    doomed = step.using(after=[doomed_parent]).enqueue("never")
    step.using(after=[doomed_parent], on_parent_failure="run").enqueue("anyway")
    parents_of["anyway"] = ["doomed"]

    workers = [start_command("runworker", "--burst", "--threads", "3") for _ in range(3)]
    for worker in workers:
        code, output = finish(worker, 180)
        assert code == 0, output[-3000:]

    runs = {
        token: (started, finished)
        for token, started, finished in RecordedRun.objects.values_list(
            "token", "started_at", "finished_at"
        )
    }
    assert RecordedRun.objects.count() == len(runs), "each entry ran once"
    assert "never" not in runs
    for child, parents in parents_of.items():
        for parent in parents:
            assert runs[child][0] >= runs[parent][1], f"{child} started before {parent} ended"
    assert RecordedRun.objects.values("pid").distinct().count() >= 2
    error = EntryError.objects.get(entry_id=doomed.pk)
    assert error.exception_class == "django_iq.exceptions.ParentFailed"
    assert not Entry.objects.exists() and not EntryDependency.objects.exists()
    assert not GroupLock.objects.exists()
