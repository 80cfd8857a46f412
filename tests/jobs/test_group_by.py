"""``@job(group_by=...)``: each call's group key taken from its arguments, refused before anything
is written when it cannot be; and ``merge`` checked when the job is declared."""

from __future__ import annotations

from typing import Any

import pytest

import django_iq
from django_iq import job
from django_iq.exceptions import InvalidJobArguments, InvalidJobOptions
from django_iq.models import Entry
from tests.testapp.jobs import invalidate, refresh_by_callable, refresh_field

pytestmark = pytest.mark.django_db


def test_group_key_is_taken_from_a_positional_argument() -> None:
    entry = refresh_field.enqueue(42, "title")
    assert (entry.group_key, entry.lock_key) == ("42", "g:42")


def test_group_key_is_taken_from_a_keyword_argument() -> None:
    entry = refresh_field.enqueue(field="title", obj_id="a-7")
    stored = Entry.objects.get(pk=entry.pk)
    assert (stored.group_key, stored.lock_key) == ("a-7", "g:a-7")


def test_group_key_comes_from_a_callable_given_the_call() -> None:
    entry = refresh_by_callable.enqueue(kind="user", pk=3)
    assert Entry.objects.get(pk=entry.pk).group_key == "user-3"


def test_using_group_key_overrides_group_by() -> None:
    entry = refresh_field.using(group_key="fixed").enqueue(42)
    assert Entry.objects.get(pk=entry.pk).group_key == "fixed"


def test_module_level_enqueue_and_enqueue_many_take_a_key_per_call() -> None:
    one = django_iq.enqueue(refresh_field, 1)
    by_name = django_iq.enqueue("tests.testapp.jobs.refresh_field", obj_id=2)
    many = django_iq.enqueue_many(refresh_field, [((3,), {}), ((), {"obj_id": 4, "field": "x"})])
    assert [e.group_key for e in [one, by_name, *many]] == ["1", "2", "3", "4"]
    assert sorted(Entry.objects.values_list("group_key", flat=True)) == ["1", "2", "3", "4"]


def test_an_integer_key_is_stored_as_its_text() -> None:
    assert refresh_field.enqueue(-7).group_key == "-7"


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((), {}, "missing a required argument: 'obj_id'"),
        ((None,), {}, "argument 'obj_id', which is None"),
        (([1, 2],), {}, "argument 'obj_id', which is list"),
        (({"a": 1},), {}, "argument 'obj_id', which is dict"),
        ((True,), {}, "argument 'obj_id', which is bool"),
        (("x" * 199,), {}, "has 199 characters; it must have 1 to 198"),
        (("",), {}, "has 0 characters"),
        (("a\x00b",), {}, "NUL character"),
        ((1,), {"nope": 2}, "unexpected keyword argument 'nope'"),
    ],
)
def test_a_group_key_that_cannot_be_taken_is_refused_and_nothing_is_written(
    args: tuple[Any, ...], kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidJobArguments, match=message.replace("(", r"\(")):
        refresh_field.enqueue(*args, **kwargs)
    assert not Entry.objects.exists()


def test_one_bad_call_in_enqueue_many_writes_none_of_them() -> None:
    with pytest.raises(InvalidJobArguments, match="Call 1 must be an"):
        refresh_field.enqueue_many([((1,), {}), "oops", ((3,), {})])  # type: ignore[list-item]
    with pytest.raises(InvalidJobArguments, match="which is None"):
        refresh_field.enqueue_many([((1,), {}), ((None,), {})])
    assert not Entry.objects.exists()


def test_a_callable_that_raises_is_refused_as_bad_arguments() -> None:
    with pytest.raises(InvalidJobArguments, match="which raised KeyError: 'kind'"):
        refresh_by_callable.enqueue("user", 3)
    assert not Entry.objects.exists()


def test_merged_jobs_enqueue_like_any_other() -> None:
    entry = invalidate.enqueue("o1", [1, 2])
    assert (entry.group_key, entry.args, entry.kwargs) == ("o1", ["o1", [1, 2]], {})


def noop(obj_id: int, *rest: Any) -> None:
    return None


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"group_by": "missing"}, "group_by='missing' is not a named parameter"),
        ({"group_by": "rest"}, "group_by='rest' is not a named parameter"),
        ({"group_by": 3}, "group_by must be a parameter name or a callable"),
        ({"group_by": "obj_id", "group_key": "k"}, "give group_by or group_key, not both"),
        ({"merge": lambda calls: calls[0]}, "give group_by too"),
        ({"group_by": "obj_id", "merge": "fold"}, "merge must be a callable"),
        ({"group_by": "obj_id", "merge": lambda c: c[0]}, "these are not: rest"),
    ],
)
def test_grouping_options_are_checked_when_the_job_is_declared(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidJobOptions, match=message):
        job(name="tests.jobs.test_group_by.noop", **options)(noop)


def test_group_by_is_not_a_using_option() -> None:
    with pytest.raises(InvalidJobOptions, match="Unknown option 'group_by' for using"):
        refresh_field.using(group_by="field")
