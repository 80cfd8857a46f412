"""serialization.py: job arguments are plain JSON values, and errors name the argument's path."""

from __future__ import annotations

import datetime
import decimal
import re
import uuid
from typing import Any

import pytest

from django_iq.exceptions import InvalidJobArguments
from django_iq.serialization import validate_arguments


@pytest.mark.parametrize(
    "value",
    [
        "text",
        "",
        "ünïcødé ✓",
        0,
        -(2**53),
        1.5,
        True,
        False,
        None,
        [],
        {},
        [1, "two", 3.0, None, [True, {"nested": []}]],
        {"a": {"b": {"c": [1, 2, 3]}}},
    ],
)
def test_json_values_are_stored_unchanged(value: Any) -> None:
    args, kwargs = validate_arguments([value], {"kw": value})

    assert args == [value]
    assert kwargs == {"kw": value}


def test_tuples_become_lists_at_every_depth() -> None:
    args, kwargs = validate_arguments((1, (2, (3,))), {"pair": ("a", {"t": (True,)})})

    assert args == [1, [2, [3]]]
    assert kwargs == {"pair": ["a", {"t": [True]}]}
    assert type(args) is list and type(kwargs["pair"][1]["t"]) is list


def test_the_stored_values_are_copies_not_the_callers_objects() -> None:
    payload = {"items": [1, 2]}

    _, kwargs = validate_arguments([], {"payload": payload})
    payload["items"].append(3)

    assert kwargs == {"payload": {"items": [1, 2]}}


@pytest.mark.parametrize(
    ("args", "kwargs", "path", "kind"),
    [
        ([datetime.datetime(2026, 1, 1, 12, 0)], {}, "args[0]", "datetime.datetime"),
        ([1, datetime.date(2026, 1, 1)], {}, "args[1]", "datetime.date"),
        ([], {"amount": decimal.Decimal("1.10")}, "kwargs['amount']", "decimal.Decimal"),
        ([], {"ids": {1, 2}}, "kwargs['ids']", "builtins.set"),
        ([frozenset()], {}, "args[0]", "builtins.frozenset"),
        ([b"bytes"], {}, "args[0]", "builtins.bytes"),
        ([uuid.UUID(int=1)], {}, "args[0]", "uuid.UUID"),
        ([object()], {}, "args[0]", "builtins.object"),
        ([[1, [2, object()]]], {}, "args[0][1][1]", "builtins.object"),
        ([], {"data": {"when": datetime.time(1)}}, "kwargs['data']['when']", "datetime.time"),
    ],
)
def test_values_that_are_not_json_are_rejected_naming_the_argument_path(
    args: list[Any], kwargs: dict[str, Any], path: str, kind: str
) -> None:
    with pytest.raises(InvalidJobArguments) as raised:
        validate_arguments(args, kwargs)

    message = str(raised.value)
    shown = kind.removeprefix("builtins.")  # as Python writes a type: <class 'set'>
    assert message.startswith(f"Unsupported type: <class '{shown}'>: job argument {path} ("), (
        message
    )
    assert ") is not JSON; pass JSON values only" in message


def test_a_rejected_value_is_shown_shortened() -> None:
    with pytest.raises(InvalidJobArguments) as raised:
        validate_arguments([{"x"} | {str(n) for n in range(100)}], {})

    shown = re.search(r"\((.*)\) is not JSON", str(raised.value))
    assert shown is not None and len(shown.group(1)) == 80


@pytest.mark.parametrize("number", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_floats_are_rejected_naming_the_argument_path(number: float) -> None:
    with pytest.raises(
        InvalidJobArguments,
        match=re.escape(
            f"Job argument kwargs['limits'][2] is {number!r}, which JSON cannot store; "
            "pass a finite number or None."
        ),
    ):
        validate_arguments([], {"limits": [1.0, 2.0, number]})


@pytest.mark.parametrize(
    ("key", "type_name"), [(1, "int"), (None, "NoneType"), (("a", "b"), "tuple")]
)
def test_dict_keys_that_are_not_strings_are_rejected_naming_the_argument_path(
    key: Any, type_name: str
) -> None:
    with pytest.raises(
        InvalidJobArguments,
        match=re.escape(
            f"Job argument args[0]['outer'] has the key {key!r} of type {type_name}; "
            "JSON object keys must be strings."
        ),
    ):
        validate_arguments([{"outer": {key: 1}}], {})


def test_a_keyword_argument_name_that_is_not_a_string_is_rejected() -> None:
    with pytest.raises(InvalidJobArguments, match=r"Keyword argument name 3 must be a string\."):
        validate_arguments([], {3: "x"})  # type: ignore[dict-item]


def test_positional_arguments_must_be_a_list_or_tuple() -> None:
    with pytest.raises(
        InvalidJobArguments, match=r"Positional arguments must be a list or tuple, not str\."
    ):
        validate_arguments("abc", {})


def test_keyword_arguments_must_be_a_mapping() -> None:
    with pytest.raises(InvalidJobArguments, match=r"Keyword arguments must be a dict, not list\."):
        validate_arguments([], [("a", 1)])  # type: ignore[arg-type]


def test_invalid_job_arguments_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        validate_arguments([object()], {})


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        (
            ["a\x00b"],
            {},
            "Job argument args[0] has a NUL character (\\x00) in its text at position 1",
        ),
        (
            [],
            {"d": {"k\x00": 1}},
            "Job argument kwargs['d'] has a NUL character (\\x00) in its key 'k\\x00' at position 1",
        ),
        (
            [],
            {"bad\x00name": 1},
            "Job argument kwargs has a NUL character (\\x00) in its key 'bad\\x00name' at position 3",
        ),
    ],
)
def test_text_with_a_nul_character_is_rejected_because_postgresql_cannot_store_it(
    args: list[Any], kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidJobArguments, match=re.escape(message)):
        validate_arguments(args, kwargs)


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        (
            ["ok", ["x\ud800"]],
            {},
            "Job argument args[1][0] has a lone surrogate in its text at position 1",
        ),
        (
            [{"\udc00": 1}],
            {},
            "Job argument args[0] has a lone surrogate in its key '\\udc00' at position 0",
        ),
    ],
)
def test_text_that_is_not_valid_unicode_is_rejected(
    args: list[Any], kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidJobArguments, match=re.escape(message)):
        validate_arguments(args, kwargs)


def test_a_surrogate_pair_spelled_as_one_character_is_valid_unicode() -> None:
    assert validate_arguments(["\U0001f600"], {}) == (["\U0001f600"], {})
