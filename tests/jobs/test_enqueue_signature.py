"""An enqueued call the job's function cannot take (too many or too few arguments, a keyword it
has no parameter for) is refused at enqueue, through every way in, and nothing is written: it
would otherwise fail at each attempt on a worker."""

from __future__ import annotations

from typing import Any

import pytest

import django_iq
from django_iq import enqueue, enqueue_many, job
from django_iq.exceptions import InvalidJobArguments
from django_iq.models import Batch, Entry
from tests.testapp import tasks
from tests.testapp.jobs import batch_done

pytestmark = pytest.mark.django_db


@job
def add(a: int, b: int) -> int:
    return a + b


@job
def anything(*args: Any, **kwargs: Any) -> None:
    return None


@job
def limited(token: str, *, limit: int = 1) -> None:
    return None


@job
async def add_later(a: int, b: int) -> int:
    return a + b


ADD = "tests.jobs.test_enqueue_signature.add(a, b)"


@pytest.mark.parametrize(
    ("args", "kwargs", "problem"),
    [
        ((1, 2, 3), {}, "too many positional arguments"),
        ((1,), {}, "missing a required argument: 'b'"),
        ((1, 2), {"c": 3}, "got an unexpected keyword argument 'c'"),
        ((1,), {"a": 2}, "multiple values for argument 'a'"),
    ],
    ids=["too-many", "too-few", "unknown-keyword", "twice"],
)
def test_a_call_the_function_cannot_take_is_refused_and_nothing_is_written(
    args: tuple[Any, ...], kwargs: dict[str, Any], problem: str
) -> None:
    with pytest.raises(InvalidJobArguments) as refused:
        add.enqueue(*args, **kwargs)
    message = str(refused.value)
    assert message.startswith(f"{ADD} cannot be called with (")
    assert message.endswith(f": {problem}. Nothing was enqueued.")
    assert not Entry.objects.exists()


def test_the_refusal_shows_the_call() -> None:
    with pytest.raises(InvalidJobArguments) as refused:
        add.enqueue(1, 2, "three", c=[4])
    assert str(refused.value) == (
        f"{ADD} cannot be called with (1, 2, 'three', c=[4]): too many positional "
        "arguments. Nothing was enqueued."
    )


def test_callers_catching_type_error_catch_it() -> None:
    with pytest.raises(TypeError, match="too many positional arguments"):
        add.enqueue(1, 2, 3)


def test_by_name_and_through_using_the_call_is_checked_too() -> None:
    with pytest.raises(InvalidJobArguments, match="too many positional arguments"):
        enqueue(add.name, 1, 2, 3)
    with pytest.raises(InvalidJobArguments, match="too many positional arguments"):
        add.using(priority=5).enqueue(1, 2, 3)
    with pytest.raises(InvalidJobArguments, match="missing a required argument"):
        enqueue(add.using(max_attempts=1), 1)
    assert not Entry.objects.exists()


def test_one_call_that_does_not_fit_in_enqueue_many_writes_nothing_and_is_named() -> None:
    with pytest.raises(InvalidJobArguments, match=r"^Call 2: .*too many positional"):
        add.enqueue_many([((1, 2), {}), ((3,), {"b": 4}), ((5, 6, 7), {})])
    with pytest.raises(InvalidJobArguments, match=r"^Call 0: .*missing a required argument"):
        enqueue_many(add.name, [((), {}), ((1, 2), {})])
    assert not Entry.objects.exists()


def test_calls_that_fit_are_stored_as_given() -> None:
    add.enqueue(1, b=2)
    anything.enqueue(1, 2, 3, any_name="x")
    limited.enqueue("t", limit=3)
    add_later.enqueue(1, 2)
    add.enqueue_many([((1, 2), {}), ((), {"a": 1, "b": 2})])
    stored = sorted(Entry.objects.values_list("job_name", "args", "kwargs"))
    assert [(name.rsplit(".", 1)[1], args, kwargs) for name, args, kwargs in stored] == [
        ("add", [], {"a": 1, "b": 2}),
        ("add", [1], {"b": 2}),
        ("add", [1, 2], {}),
        ("add_later", [1, 2], {}),
        ("anything", [1, 2, 3], {"any_name": "x"}),
        ("limited", ["t"], {"limit": 3}),
    ]


def test_keyword_only_and_async_jobs_are_checked() -> None:
    with pytest.raises(InvalidJobArguments, match="too many positional arguments"):
        limited.enqueue("t", 3)
    with pytest.raises(InvalidJobArguments, match=r"add_later\(a, b\).*too many"):
        add_later.enqueue(1, 2, 3)
    assert not Entry.objects.exists()


def test_a_django_task_called_wrongly_is_refused_before_anything_is_written() -> None:
    with pytest.raises(TypeError, match=r"add\(a, b\) cannot be called .*too many"):
        tasks.add.enqueue(1, 2, 3)
    with pytest.raises(TypeError, match=r"async_double\(value\).*missing a required"):
        tasks.async_double.enqueue()
    assert not Entry.objects.exists()


def test_a_task_taking_its_context_is_checked_without_it() -> None:
    with pytest.raises(TypeError) as refused:
        tasks.attempt_number.enqueue()
    assert (
        "attempt_number(token) cannot be called with (): missing a required argument: 'token'"
        in str(refused.value)
    )
    tasks.attempt_number.enqueue("ctx")
    assert Entry.objects.get().args == ["ctx"]


def test_a_batch_member_that_does_not_fit_is_refused_and_leaves_nothing() -> None:
    with (
        pytest.raises(InvalidJobArguments, match="too many positional arguments"),
        django_iq.batch(on_complete=batch_done),
    ):
        add.enqueue(1, 2, 3)
    assert not Batch.objects.exists() and not Entry.objects.exists()
