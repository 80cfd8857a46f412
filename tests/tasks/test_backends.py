"""Django's Tasks framework on django_iq: enqueue, defer, priority, results, context, signals."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

from django_iq.backends import IQBackend, IQTask
from django_iq.models import Entry, EntryError, RunOutcome
from django_iq.tasks_compat import (
    InvalidTask,
    TaskResultDoesNotExist,
    TaskResultStatus,
    task_backends,
    task_enqueued,
    task_finished,
    task_started,
)
from django_iq.worker import WorkerProcess
from tests.processes import ROOT, command_env
from tests.testapp import tasks
from tests.testapp.models import JobRun

pytestmark = pytest.mark.django_db(transaction=True)


def drain(threads: int = 2) -> None:
    assert (
        WorkerProcess(burst=True, processing_threads=threads).run(install_signal_handlers=False)
        == 0
    )


def test_backend_declares_every_capability() -> None:
    backend = task_backends["default"]
    assert isinstance(backend, IQBackend)
    assert (
        backend.supports_defer,
        backend.supports_priority,
        backend.supports_get_result,
        backend.supports_async_task,
    ) == (
        True,
        True,
        True,
        True,
    )
    assert isinstance(tasks.add, IQTask)


def test_enqueued_task_runs_on_a_worker_and_its_result_is_retrievable() -> None:
    result = tasks.add.enqueue(2, 3)
    assert result.status == TaskResultStatus.READY
    assert Entry.objects.get().result_id == result.id

    drain()

    fetched = tasks.add.get_result(result.id)
    assert fetched.status == TaskResultStatus.SUCCESSFUL
    assert fetched.return_value == 5
    assert fetched.started_at is not None and fetched.finished_at >= fetched.started_at
    assert fetched.attempts == 1 and len(fetched.worker_ids) == 1
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 5
    assert not Entry.objects.exists(), "finished work leaves the entry table"


def test_result_is_read_from_another_process() -> None:
    result = tasks.greet.enqueue("ada")
    drain()

    code = (
        "import json; from tests.testapp import tasks; "
        f"r = tasks.greet.get_result({result.id!r}); "
        "print(json.dumps({'status': str(r.status), 'value': r.return_value}))"
    )
    out = subprocess.run(
        [sys.executable, "-m", "django", "shell", "-c", code],
        cwd=ROOT,
        env=command_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {
        "status": "SUCCESSFUL",
        "value": {"greeting": "hello ada"},
    }


def test_failed_task_keeps_errors_and_final_status() -> None:
    result = tasks.explode.using(max_attempts=3).enqueue("boom")
    drain()

    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert len(result.errors) == 3
    # The first start is written behind the run, the failure after it: no attempt is lost.
    assert len(result.worker_ids) == 3 and result.started_at is not None
    assert result.errors[-1].exception_class_path == "builtins.ValueError"
    assert "ValueError: boom" in result.errors[-1].traceback
    assert result.errors[-1].exception_class is ValueError
    with pytest.raises(ValueError, match="Task failed"):
        _ = result.return_value
    assert EntryError.objects.filter(is_final=True).count() == 1


def test_context_carries_the_attempt_number_across_retries() -> None:
    result = tasks.attempt_number.enqueue("ctx")
    drain()

    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 2
    assert set(JobRun.objects.values_list("token", flat=True)) == {"ctx:1", "ctx:2"}
    assert result.attempts == 2 and len(result.errors) == 1


def test_async_task_functions_run_on_the_worker() -> None:
    result = tasks.async_double.enqueue(21)
    drain()
    result.refresh()
    assert result.return_value == 42


def test_a_return_value_that_is_not_json_fails_the_task() -> None:
    result = tasks.not_json.using(max_attempts=1).enqueue()
    drain()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.errors[0].exception_class_path == "builtins.TypeError"


def test_priority_order_and_using_overrides() -> None:
    tasks.add.using(priority=-10).enqueue(0, 1)
    tasks.add.using(priority=90).enqueue(0, 2)
    tasks.add.enqueue(0, 3)

    drain(threads=1)

    assert list(JobRun.objects.order_by("pk").values_list("token", flat=True)) == [
        "add:0:2",
        "add:0:3",
        "add:0:1",
    ]


def test_run_after_defers_the_task() -> None:
    later = timezone.now() + timedelta(hours=1)
    result = tasks.add.using(run_after=later).enqueue(1, 1)

    entry = Entry.objects.get()
    assert entry.state == "initial" and entry.run_at == later
    drain()
    assert tasks.add.get_result(result.id).status == TaskResultStatus.READY


def test_django_iq_options_pass_through_using() -> None:
    tasks.add.using(group_key="ledger", max_attempts=7, queue_name="reports").enqueue(4, 4)
    entry = Entry.objects.get()
    assert (entry.group_key, entry.max_attempts, entry.queue_id) == ("ledger", 7, "reports")


def test_signals_are_sent_for_enqueue_start_and_finish() -> None:
    seen: list[tuple[str, str]] = []
    finished = []

    def collect(name: str):
        def receiver(sender, task_result, **kwargs) -> None:
            seen.append((name, str(task_result.status)))
            if name == "finished":
                finished.append(task_result)

        return receiver

    receivers = {
        signal: collect(name)
        for signal, name in (
            (task_enqueued, "enqueued"),
            (task_started, "started"),
            (task_finished, "finished"),
        )
    }
    for signal, receiver in receivers.items():
        signal.connect(receiver)
    try:
        tasks.add.enqueue(5, 5)
        drain()
    finally:
        for signal, receiver in receivers.items():
            signal.disconnect(receiver)

    assert seen == [("enqueued", "READY"), ("started", "RUNNING"), ("finished", "SUCCESSFUL")]
    (result,) = finished
    assert result.return_value == 10 and len(result.worker_ids) == 1
    assert result.started_at is not None and result.finished_at >= result.started_at


def test_unknown_result_id_raises_task_result_does_not_exist() -> None:
    with pytest.raises(TaskResultDoesNotExist):
        task_backends["default"].get_result("nope")


def test_non_json_arguments_are_refused_and_nothing_is_written() -> None:
    with pytest.raises(TypeError, match=r"args\[0\]"):
        tasks.add.enqueue(object(), 1)
    assert not RunOutcome.objects.exists() and not Entry.objects.exists()


def test_invalid_tasks_raise_invalid_task() -> None:
    with pytest.raises(InvalidTask, match="priority"):
        tasks.add.using(priority=500)
    with pytest.raises(InvalidTask, match="max_attempts"):
        tasks.add.using(max_attempts=0)
    with pytest.raises(InvalidTask, match="Queue 'nowhere' is not valid for backend"):
        tasks.add.using(queue_name="nowhere").enqueue(1, 2)
    assert not Entry.objects.exists()


@override_settings(
    TASKS={"default": {"BACKEND": "django_iq.backends.IQBackend", "OPTIONS": {"colour": "red"}}}
)
def test_backend_check_reports_unknown_options() -> None:
    (message,) = task_backends["default"].check()
    assert message.id == "django_iq.E018"
    assert message.msg == "TASKS['default']['OPTIONS'] has an unknown key 'colour'."


def test_task_decorator_accepts_django_iq_options() -> None:
    assert (tasks.post_to_ledger.max_attempts, tasks.post_to_ledger.group_key) == (1, "ledger")
    tasks.post_to_ledger.enqueue(10)
    entry = Entry.objects.get()
    assert (entry.max_attempts, entry.group_key, entry.lock_key) == (1, "ledger", "g:ledger")


def test_a_cancelled_task_reports_failed_with_the_reason() -> None:
    result = tasks.add.enqueue(1, 2)
    entry = Entry.objects.get(result_id=result.id)

    assert Entry.objects.cancel([entry.pk]) == (1, 0)

    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.finished_at is not None
    assert [error.exception_class_path for error in result.errors] == [
        "django_iq.exceptions.EntryCancelled"
    ]
    drain()
    assert not JobRun.objects.exists(), "a cancelled task never runs"


def test_a_snoozed_task_runs_again_without_an_error_and_counts_one_attempt() -> None:
    result = tasks.snoozes_once.enqueue("nap")

    drain()

    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == "nap after 1 snooze, attempt 2", "the framework counts runs"
    assert result.errors == [] and len(result.worker_ids) == 2
