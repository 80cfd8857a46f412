"""JSON argument validation: job arguments are plain JSON values, never pickled objects."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from django_iq.bounds import MAX_ARGUMENT_DEPTH, MAX_EXACT_FLOAT, MAX_INT, MIN_INT
from django_iq.conf import iq_settings
from django_iq.exceptions import InvalidJobArguments

_SCALARS = (str, bool, int, type(None))


def _check_text(text: str, path: str, what: str) -> None:
    """Refuse text that PostgreSQL or MariaDB would reject inside a JSON column."""
    # PostgreSQL's jsonb cannot hold \u0000, and neither database accepts a lone surrogate;
    # both would fail the insert with a database error instead of this message.
    if "\x00" in text:
        raise InvalidJobArguments(
            f"Job argument {path} has a NUL character (\\x00) in its {what} at position "
            f"{text.index(chr(0))}, which the database cannot store; remove it or pass the text "
            "encoded (e.g. base64)."
        )
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidJobArguments(
            f"Job argument {path} has a lone surrogate in its {what} at position {exc.start}, "
            "which is not valid Unicode; pass a valid string."
        ) from None


def _check(value: Any, path: str, depth: int = 0) -> Any:
    """Return ``value`` as stored JSON (tuples become lists) or raise naming ``path``."""
    if isinstance(value, str):
        _check_text(value, path, "text")
        return value
    if isinstance(value, int) and not isinstance(value, bool) and not MIN_INT <= value <= MAX_INT:
        raise InvalidJobArguments(
            f"Job argument {path} is an integer of {value.bit_length()} bits; the most a stored "
            "argument holds is 64 bits (-2**63 to 2**63 - 1). Pass a larger number as a string."
        )
    if isinstance(value, _SCALARS):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidJobArguments(
                f"Job argument {path} is {value!r}, which JSON cannot store; "
                "pass a finite number or None."
            )
        if abs(value) >= MAX_EXACT_FLOAT:
            raise InvalidJobArguments(
                f"Job argument {path} is the float {value!r}, too large to read back exactly "
                "(PostgreSQL returns it as an integer); pass an int or a string."
            )
        return value
    if isinstance(value, (Mapping, list, tuple)) and depth >= MAX_ARGUMENT_DEPTH:
        raise InvalidJobArguments(
            f"Job argument {path} is nested more than {MAX_ARGUMENT_DEPTH} lists or dicts deep, "
            "which the database cannot store; flatten it."
        )
    if isinstance(value, Mapping):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidJobArguments(
                    f"Job argument {path} has the key {key!r} of type {type(key).__name__}; "
                    "JSON object keys must be strings."
                )
            _check_text(key, path, f"key {key!r}")
            out[key] = _check(item, f"{path}[{key!r}]", depth + 1)
        return out
    if isinstance(value, (list, tuple)):
        return [_check(item, f"{path}[{index}]", depth + 1) for index, item in enumerate(value)]
    # The Tasks framework's wording first ("Unsupported type: <class 'datetime.datetime'>"),
    # so code matching the framework's message matches ours; then which argument it was.
    label = path if path.startswith("result") else f"job argument {path}"
    raise InvalidJobArguments(
        f"Unsupported type: {type(value)}: {label} ({value!r:.80}) is not JSON; pass "
        "JSON values only (str, int, float, bool, None, list, dict), e.g. an id instead of a "
        "model instance or an ISO string instead of a datetime."
    )


def validate_arguments(
    args: Sequence[Any], kwargs: Mapping[str, Any]
) -> tuple[list[Any], dict[str, Any]]:
    """Return ``(args, kwargs)`` as they will be stored, or raise ``InvalidJobArguments``."""
    if not isinstance(args, (list, tuple)):
        raise InvalidJobArguments(
            f"Positional arguments must be a list or tuple, not {type(args).__name__}."
        )
    if not isinstance(kwargs, Mapping):
        raise InvalidJobArguments(f"Keyword arguments must be a dict, not {type(kwargs).__name__}.")
    stored_args = [_check(value, f"args[{index}]") for index, value in enumerate(args)]
    stored_kwargs = {}
    for key, value in kwargs.items():
        if not isinstance(key, str):
            raise InvalidJobArguments(f"Keyword argument name {key!r} must be a string.")
        _check_text(key, "kwargs", f"key {key!r}")
        stored_kwargs[key] = _check(value, f"kwargs[{key!r}]")
    size = len(json.dumps(stored_args).encode()) + len(json.dumps(stored_kwargs).encode())
    limit = iq_settings.MAX_ARGUMENTS_BYTES
    if size > limit:
        raise InvalidJobArguments(
            f"Job arguments take {size:,} bytes as JSON; the most is {limit:,} "
            "(MAX_ARGUMENTS_BYTES). Store large data elsewhere (a file, a model) and pass its id."
        )
    return stored_args, stored_kwargs


def call_pair(index: int, call: Any) -> tuple[Sequence[Any], dict[str, Any]]:
    """Call ``index`` of a batch as an ``(args, kwargs)`` pair of a list and a dict, or
    ``InvalidJobArguments`` naming it."""
    try:
        args, kwargs = call
    except (TypeError, ValueError):
        raise InvalidJobArguments(
            f"Call {index} must be an (args, kwargs) pair, got {call!r:.80}."
        ) from None
    if not isinstance(args, (list, tuple)) or not isinstance(kwargs, dict):
        raise InvalidJobArguments(
            f"Call {index} must be an (args, kwargs) pair of a list and a dict, got {call!r:.80}."
        )
    return args, kwargs
