"""The Tasks backend reads a task's result from its entry while it is queued and from its
outcome records once it has ended: before, during and after a run, and gone once pruned."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from django_iq.duties import PruningDuty
from django_iq.leader import Leader
from django_iq.models import Entry, GroupLock, RunOutcome, Worker
from django_iq.tasks_compat import TaskResultDoesNotExist, TaskResultStatus, task_backends
from django_iq.worker import WorkerProcess
from tests.conftest import iq_settings_with
from tests.testapp import tasks

pytestmark = pytest.mark.django_db(transaction=True)


def drain() -> WorkerProcess:
    worker = WorkerProcess(burst=True, processing_threads=1)
    assert worker.run(install_signal_handlers=False) == 0
    return worker


def register_worker(name: str) -> Worker:
    return Worker.objects.register(
        name=name, role="worker", host="h", pid=1, queues=[], processing_threads=1
    )


def test_a_queued_task_is_ready_and_running_while_a_lock_holds_its_entry() -> None:
    result = tasks.add.enqueue(1, 2)
    before = tasks.add.get_result(result.id)
    assert before.status == TaskResultStatus.READY
    assert before.args == [1, 2] and before.worker_ids == [] and before.started_at is None
    assert before.enqueued_at == result.enqueued_at

    worker = register_worker("w:running")
    (claim,) = Entry.objects.claim(worker, 1, "default")
    during = tasks.add.get_result(result.id)

    lock = GroupLock.objects.get(pk=claim.lock_id)
    assert during.status == TaskResultStatus.RUNNING
    assert during.worker_ids == ["w:running"]
    assert during.started_at == lock.locked_at == during.last_attempted_at
    assert during.finished_at is None
    assert not RunOutcome.objects.exists(), "nothing is written for a task's start"


def test_after_a_success_the_result_comes_from_its_outcome_record() -> None:
    result = tasks.add.enqueue(20, 22)

    worker = drain()

    after = tasks.add.get_result(result.id)
    record = RunOutcome.objects.get(result_id=result.id)
    assert after.status == TaskResultStatus.SUCCESSFUL and after.return_value == 42
    assert after.worker_ids == [worker.name] == [record.worker_name]
    assert (after.started_at, after.finished_at) == (record.started_at, record.finished_at)
    assert after.enqueued_at == result.enqueued_at and after.args == [20, 22]
    assert after.errors == []


def test_a_failed_task_has_an_error_per_failed_record_and_its_retry_reads_them() -> None:
    result = tasks.explode.using(max_attempts=3).enqueue("kaput")

    drain()

    after = tasks.explode.get_result(result.id)
    records = list(RunOutcome.objects.filter(result_id=result.id).order_by("pk"))
    assert [r.status for r in records] == ["failed"] * 3
    assert after.status == TaskResultStatus.FAILED
    assert [e.exception_class_path for e in after.errors] == ["builtins.ValueError"] * 3
    assert all("ValueError: kaput" in e.traceback for e in after.errors)
    assert after.finished_at == records[-1].finished_at
    assert after.started_at == records[0].started_at
    assert len(after.worker_ids) == 3


def test_a_task_between_attempts_is_ready_with_the_errors_so_far() -> None:
    result = tasks.attempt_number.enqueue("between")
    worker = register_worker("w:failing")
    (claim,) = Entry.objects.claim(worker, 1, "default")
    entry = claim.entries[0]
    Entry.objects.fail(
        entry,
        claim.lock_id,
        exception_class="builtins.RuntimeError",
        message="first try",
        traceback="Traceback ...\nRuntimeError: first try",
        retry_at=timezone.now() + timedelta(hours=1),
        worker_name="w:failing",
        started_at=timezone.now() - timedelta(seconds=1),
    )

    between = tasks.attempt_number.get_result(result.id)

    assert between.status == TaskResultStatus.READY
    assert [e.exception_class_path for e in between.errors] == ["builtins.RuntimeError"]
    assert between.worker_ids == ["w:failing"] and between.finished_at is None


@iq_settings_with(OUTCOME_RETENTION_SECONDS=3600)
def test_a_result_pruned_with_its_records_no_longer_exists() -> None:
    result = tasks.add.enqueue(2, 2)
    drain()
    assert tasks.add.get_result(result.id).return_value == 4
    RunOutcome.objects.update(finished_at=timezone.now() - timedelta(hours=2))

    pruned = Leader(name="pruner", duties=[PruningDuty()], lease_seconds=30).run_once()

    assert pruned.ran["pruning"].outcomes == 1
    with pytest.raises(TaskResultDoesNotExist):
        tasks.add.get_result(result.id)


@pytest.mark.parametrize("result_id", ["", "x" * 33, "no-such-result"])
def test_an_unknown_or_malformed_id_does_not_exist(result_id: str) -> None:
    with pytest.raises(TaskResultDoesNotExist):
        task_backends["default"].get_result(result_id)
