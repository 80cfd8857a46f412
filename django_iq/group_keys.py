"""Group keys taken from a job's arguments (``@job(group_by=...)``) and the arguments of a job
call as one keyword dict (what ``merge`` folds): both bound through the function's signature,
so a call passes its arguments positionally or by keyword alike."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from django_iq.bounds import text_problem
from django_iq.exceptions import InvalidJobArguments, InvalidJobOptions
from django_iq.options import MAX_GROUP_KEY_LENGTH

# group_by="obj_id": the key is that argument; group_by=f: the key is f(args, kwargs).
GroupBy = str | Callable[[tuple[Any, ...], dict[str, Any]], Any]
# merge=fold: fold([kwargs of each entry, in enqueue order]) -> the merged entry's kwargs.
Fold = Callable[[list[dict[str, Any]]], Any]

_NAMED = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


def check_grouping(
    func: Callable[..., Any], job_name: str, group_by: Any, merge: Any, group_key: Any
) -> None:
    """Refuse, with ``InvalidJobOptions``, a ``group_by`` that names no parameter of ``func``,
    a ``merge`` that is not callable or comes without ``group_by``, a function ``merge`` could
    not call by keyword, and ``group_by`` together with a fixed ``group_key``."""
    if group_by is None:
        if merge is not None:
            raise InvalidJobOptions(
                f"{job_name}: merge folds entries of one group; give group_by too, e.g. "
                '@job(group_by="obj_id", merge=...).'
            )
        return
    if group_key is not None:
        raise InvalidJobOptions(
            f"{job_name}: give group_by or group_key, not both; using(group_key=...) still "
            "overrides group_by for one enqueue."
        )
    check_key_source(func, job_name, "group_by", group_by)
    if merge is None:
        return
    if not callable(merge):
        raise InvalidJobOptions(
            f"{job_name}: merge must be a callable taking a list of kwargs dicts and returning "
            f"one, got {type(merge).__name__} {merge!r:.80}."
        )
    refused = [
        p.name
        for p in inspect.signature(func).parameters.values()
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.VAR_POSITIONAL)
    ]
    if refused:
        raise InvalidJobOptions(
            f"{job_name}: merged entries are stored as keyword arguments, so with merge every "
            f"parameter must be passable by keyword; these are not: {', '.join(refused)}."
        )


def as_kwargs(func: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict:
    """The call ``func(*args, **kwargs)`` as one keyword dict, defaults filled in; raise
    ``InvalidJobArguments`` if the arguments do not fit the signature."""
    bound = _bind(func, args, kwargs)
    bound.apply_defaults()
    call: dict[str, Any] = {}
    for name, value in bound.arguments.items():
        if bound.signature.parameters[name].kind == inspect.Parameter.VAR_KEYWORD:
            call.update(value)
        else:
            call[name] = value
    return call


def group_key_of(
    func: Callable[..., Any],
    group_by: GroupBy,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
) -> str:
    """The group key of the call ``func(*args, **kwargs)``; raise ``InvalidJobArguments`` if
    the argument is missing, None, not a string or an integer, or too long to store."""
    return key_of(
        func,
        group_by,
        args,
        kwargs,
        "group key",
        "group_by",
        "pass a value to group by, or using(group_key=...)",
    )


def check_key_source(func: Callable[..., Any], job_name: str, option: str, source: Any) -> None:
    """Refuse, with ``InvalidJobOptions``, a key option (``concurrency_key``,
    ``rate_limit_key``) that is neither a named parameter of ``func`` nor a callable."""
    if source is None:
        return
    if isinstance(source, str):
        parameters = inspect.signature(func).parameters
        parameter = parameters.get(source)
        if parameter is None or parameter.kind not in _NAMED:
            named = [p.name for p in parameters.values() if p.kind in _NAMED]
            raise InvalidJobOptions(
                f"{job_name}: {option}={source!r} is not a named parameter of the function; "
                f"its parameters are: {', '.join(named) or '(none)'}. Pass a callable "
                f"{option}=lambda args, kwargs: ... for anything else."
            )
    elif not callable(source):
        raise InvalidJobOptions(
            f"{job_name}: {option} must be a parameter name or a callable (args, kwargs) -> "
            f"str, got {type(source).__name__} {source!r:.80}."
        )


def key_of(
    func: Callable[..., Any],
    source: GroupBy,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    what: str,
    option: str,
    hint: str,
) -> str:
    """The key (``what``: "group key", "concurrency key", ...) of the call
    ``func(*args, **kwargs)``, taken as ``option`` says: the argument it names, or what it
    returns when called with ``(args, kwargs)``. Raise ``InvalidJobArguments`` if the
    argument is missing, None, not a string or an integer, or too long to store, or if the
    callable raises."""
    if isinstance(source, str):
        # Partly: a batch's callback gets the batch's counts only when it runs.
        bound = _bind(func, args, kwargs, partial=True)
        bound.apply_defaults()
        value = bound.arguments.get(source)
        where = f"argument {source!r}"
    else:
        where = f"{option} {getattr(source, '__name__', 'callable')}(args, kwargs)"
        try:
            value = source(tuple(args), dict(kwargs))
        except Exception as exc:  # the user's callable: refused as the call's error, not ours
            raise InvalidJobArguments(
                f"The {what} comes from {where}, which raised {type(exc).__name__}: {exc}"
            ) from exc
    if value is None:
        raise InvalidJobArguments(f"The {what} comes from {where}, which is None; {hint}.")
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        raise InvalidJobArguments(
            f"The {what} comes from {where}, which is {type(value).__name__} {value!r:.80}; "
            "it must be a string or an integer."
        )
    if not 0 < len(value) <= MAX_GROUP_KEY_LENGTH:
        raise InvalidJobArguments(
            f"The {what} from {where} has {len(value)} characters; it must have 1 to "
            f"{MAX_GROUP_KEY_LENGTH}."
        )
    problem = text_problem(value)
    if problem is not None:
        raise InvalidJobArguments(
            f"The {what} from {where} {value!r:.80} {problem}; the database cannot store it."
        )
    return value


def _bind(
    func: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any], partial: bool = False
) -> inspect.BoundArguments:
    signature = inspect.signature(func)
    try:
        if partial:
            return signature.bind_partial(*args, **kwargs)
        return signature.bind(*args, **kwargs)
    except TypeError as exc:
        raise InvalidJobArguments(
            f"The arguments do not fit {getattr(func, '__qualname__', func)}{inspect.signature(func)}"
            f": {exc}."
        ) from None
