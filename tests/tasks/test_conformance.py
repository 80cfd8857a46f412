"""The Tasks framework's own defaults, held by IQBackend as by the framework's backends: one
attempt unless told otherwise, only configured queues, the framework's wording for arguments
that are not JSON, the priority range, run_after, and results read back. Tasks run on a real
worker, in this process."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest
from django.conf import settings
from django.test import override_settings

import django_iq
from django_iq.exceptions import ImproperlyConfiguredIQ, InvalidJobArguments, IQError
from django_iq.models import Entry, EntryError, Queue, RunOutcome
from django_iq.registry import declared_queues
from django_iq.tasks_compat import (
    DEFAULT_TASK_QUEUE_NAME,
    TASKS_MODULE,
    InvalidTask,
    TaskResultStatus,
    normalize_json,
    task_backends,
)
from tests.tasks.test_backends import drain
from tests.testapp import jobs, tasks

if TASKS_MODULE == "django.tasks":
    from django.tasks import task
    from django.tasks.exceptions import TaskResultMismatch
else:  # Django 5.2 with the django-tasks backport
    from django_tasks import task  # type: ignore[no-redef]
    from django_tasks.exceptions import TaskResultMismatch  # type: ignore[no-redef]

pytestmark = pytest.mark.django_db(transaction=True)

BACKEND = "django_iq.backends.IQBackend"


def backend_with(**params: Any) -> Any:
    """``TASKS`` with the default backend given ``params`` (``OPTIONS``, ``QUEUES``)."""
    return override_settings(TASKS={"default": {"BACKEND": BACKEND, **params}})


def iq_settings_with(**changes: Any) -> Any:
    return override_settings(DJANGO_IQ={**settings.DJANGO_IQ, **changes})


# -- attempts ----------------------------------------------------------------------------------


def test_a_task_naming_no_attempts_runs_once_and_fails_for_good() -> None:
    result = tasks.explode.enqueue("once")

    drain()

    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert [error.exception_class_path for error in result.errors] == ["builtins.ValueError"]
    assert len(result.worker_ids) == 1, "no retry of a task the framework runs once"
    assert RunOutcome.objects.filter(result_id=result.id).count() == 1
    (error,) = EntryError.objects.all()
    assert (error.is_final, error.attempt, error.max_attempts) == (True, 1, 1)
    assert not Entry.objects.exists()


@backend_with(OPTIONS={"max_attempts": 3})
def test_the_backends_max_attempts_option_gives_tasks_more_attempts() -> None:
    result = tasks.explode.enqueue("thrice")

    drain()

    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert len(result.errors) == 3 and len(result.worker_ids) == 3
    assert list(EntryError.objects.order_by("attempt").values_list("attempt", "is_final")) == [
        (1, False),
        (2, False),
        (3, True),
    ]


@backend_with(OPTIONS={"max_attempts": 3})
def test_the_tasks_own_attempts_and_using_override_the_backends() -> None:
    tasks.post_to_ledger.enqueue(1)  # @task(max_attempts=1)
    tasks.explode.using(max_attempts=2).enqueue("x")
    tasks.add.enqueue(1, 2)

    assert dict(Entry.objects.values_list("job_name", "max_attempts")) == {
        "tests.testapp.tasks.post_to_ledger": 1,
        "tests.testapp.tasks.explode": 2,
        "tests.testapp.tasks.add": 3,
    }


@backend_with(OPTIONS={"max_attempts": 5})
def test_native_jobs_keep_their_own_attempts() -> None:
    jobs.noop.enqueue()
    jobs.always_fails.enqueue("m")

    assert dict(Entry.objects.values_list("job_name", "max_attempts")) == {
        "tests.testapp.jobs.noop": django_iq.conf.iq_settings.DEFAULT_MAX_ATTEMPTS,
        "tests.testapp.jobs.always_fails": 2,
    }


def test_enqueue_many_by_a_tasks_name_gives_its_entries_one_attempt() -> None:
    entries = django_iq.enqueue_many(tasks.explode.module_path, [(["a"], {}), (["b"], {})])

    assert [entry.max_attempts for entry in entries] == [1, 1]


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        (
            {"max_attempts": 0},
            "TASKS['default']['OPTIONS']['max_attempts'] must be an integer from 1 to "
            "100,000, got 0.",
        ),
        (
            {"max_attempts": "3"},
            "TASKS['default']['OPTIONS']['max_attempts'] must be an integer from 1 to "
            "100,000, got '3'.",
        ),
        (
            {"max_attempts": True},
            "TASKS['default']['OPTIONS']['max_attempts'] must be an integer from 1 to "
            "100,000, got True.",
        ),
        (
            {"max_attempt": 3},
            "TASKS['default']['OPTIONS'] has an unknown key 'max_attempt'. Did you mean "
            "'max_attempts'?",
        ),
        (
            ["max_attempts"],
            "TASKS['default']['OPTIONS'] must be a dict, got list ['max_attempts'].",
        ),
    ],
)
def test_bad_options_are_reported_by_the_check_and_refused_at_enqueue(
    options: Any, problem: str
) -> None:
    with backend_with(OPTIONS=options):
        (message,) = task_backends["default"].check()
        assert (message.id, message.msg) == ("django_iq.E018", problem)
        with pytest.raises(ImproperlyConfiguredIQ, match="TASKS\\['default'\\]\\['OPTIONS'\\]"):
            tasks.add.enqueue(1, 2)
    assert not Entry.objects.exists()


# -- queues ------------------------------------------------------------------------------------


def test_a_task_naming_an_unknown_queue_is_refused_at_definition_and_declares_nothing() -> None:
    with pytest.raises(InvalidTask, match=r"^Queue 'emials' is not valid for backend\. Did you"):
        task(queue_name="emials")(tasks.add.func)

    assert "emials" not in declared_queues()
    assert not Queue.objects.filter(name="emials").exists()


def test_using_an_unknown_queue_is_refused_before_anything_is_written() -> None:
    with pytest.raises(InvalidTask) as raised:
        tasks.add.using(queue_name="nowhere").enqueue(1, 2)

    assert str(raised.value) == (
        "Queue 'nowhere' is not valid for backend. Tasks of 'default' may use default, emails, "
        'reports; declare the queue in DJANGO_IQ["QUEUES"] (or TASKS[alias]["QUEUES"]).'
    )
    assert not Entry.objects.exists() and not Queue.objects.filter(name="nowhere").exists()


def test_a_queue_made_in_the_admin_alone_is_not_configured_for_tasks() -> None:
    Queue.objects.create(name="adhoc")

    with pytest.raises(InvalidTask, match="Queue 'adhoc' is not valid for backend"):
        tasks.add.using(queue_name="adhoc")


def test_configured_queues_and_the_frameworks_default_are_valid() -> None:
    with iq_settings_with(DEFAULT_QUEUE="main", QUEUES={"reports": {}}):
        tasks.add.using(queue_name="reports").enqueue(1, 1)
        tasks.add.using(queue_name="main").enqueue(1, 2)
        tasks.add.enqueue(1, 3)  # the framework's default queue, "default"
        with pytest.raises(InvalidTask, match="Queue 'emails' is not valid"):
            tasks.add.using(queue_name="emails")

    assert sorted(Entry.objects.values_list("queue_id", flat=True)) == [
        DEFAULT_TASK_QUEUE_NAME,
        "main",
        "reports",
    ]


@backend_with(QUEUES=["default", "side"])
def test_the_backends_queues_are_the_valid_ones_when_given() -> None:
    result = tasks.add.using(queue_name="side").enqueue(2, 2)

    with pytest.raises(InvalidTask) as raised:
        tasks.add.using(queue_name="emails")
    assert str(raised.value) == (
        "Queue 'emails' is not valid for backend. Tasks of 'default' may use default, side; "
        "declare the queue in TASKS['default']['QUEUES']."
    )
    assert Entry.objects.get().queue_id == "side" and Queue.objects.filter(name="side").exists()
    drain()
    assert tasks.add.get_result(result.id).return_value == 4


@backend_with(QUEUES=[])
def test_an_empty_queues_list_lets_tasks_use_any_queue() -> None:
    result = tasks.add.using(queue_name="anywhere").enqueue(2, 3)

    assert Entry.objects.get().queue_id == "anywhere"
    assert Queue.objects.filter(name="anywhere").exists()
    assert "anywhere" not in declared_queues()
    drain()
    assert tasks.add.get_result(result.id).return_value == 5
    with pytest.raises(InvalidTask, match="queue_name must be 1 to 100 characters, got 101"):
        tasks.add.using(queue_name="q" * 101)
    assert Entry.objects.count() == 0


def test_a_stored_result_keeps_its_queue_after_the_queue_leaves_the_settings() -> None:
    result = tasks.add.using(queue_name="reports").enqueue(3, 3)

    with iq_settings_with(QUEUES={"default": {}}):
        fetched = tasks.add.get_result(result.id)

    assert (fetched.status, fetched.task.queue_name) == (TaskResultStatus.READY, "reports")


# -- arguments ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value", [datetime(2030, 1, 1), object(), {1, 2}], ids=["datetime", "object", "set"]
)
def test_a_non_json_argument_has_the_frameworks_wording_and_names_the_argument(
    value: Any,
) -> None:
    with pytest.raises(TypeError) as framework:
        normalize_json(value)

    with pytest.raises(InvalidJobArguments) as raised:
        tasks.add.enqueue(1, value)

    message = str(raised.value)
    assert message.startswith(f"{framework.value}: job argument args[1] ("), message
    assert isinstance(raised.value, IQError) and isinstance(raised.value, TypeError)
    assert not Entry.objects.exists()


# -- priority and run_after ------------------------------------------------------------------


@pytest.mark.parametrize("priority", [-101, 101, 1.5])
def test_a_priority_outside_the_frameworks_range_is_invalid(priority: Any) -> None:
    with pytest.raises(InvalidTask, match="priority must be a whole number between -100 and 100"):
        tasks.add.using(priority=priority)


def test_the_ends_of_the_priority_range_are_valid_and_run_higher_first() -> None:
    low = tasks.add.using(priority=-100).enqueue(0, 1)
    high = tasks.add.using(priority=100).enqueue(0, 2)

    drain(threads=1)

    assert tasks.add.get_result(high.id).finished_at <= tasks.add.get_result(low.id).started_at


def test_a_naive_run_after_is_invalid() -> None:
    with pytest.raises(InvalidTask, match="run_after must be an aware datetime"):
        tasks.add.using(run_after=datetime(2030, 1, 1))


# -- results -----------------------------------------------------------------------------------


def test_get_result_equals_the_enqueued_result() -> None:
    result = tasks.add.enqueue(1, 2)

    assert task_backends["default"].get_result(result.id) == result


def test_get_result_of_another_tasks_id_is_a_mismatch() -> None:
    result = tasks.add.enqueue(1, 2)

    with pytest.raises(TaskResultMismatch):
        tasks.greet.get_result(result.id)
