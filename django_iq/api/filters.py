"""Query parameters of the listings: each one declared once (name, JSON Schema, description,
parser, filter), so the views, the counts and the OpenAPI document cannot disagree."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db.models import QuerySet
from django.http import QueryDict
from django.utils import timezone

from django_iq.api.endpoint import MAX_ID, ApiError, InvalidParameter
from django_iq.bounds import EARLIEST_FILTER_TIME, LATEST_FILTER_TIME, filter_time_in_range
from django_iq.models import Queue
from django_iq.states import (
    AWAITING_COMPUTE,
    COMPUTING,
    MAX_PRIORITY,
    MIN_PRIORITY,
    RUNNING,
    EntryState,
    OutcomeStatus,
)
from django_iq.wording import close_names

ENTRY_STATES = (*EntryState.values, COMPUTING, RUNNING, AWAITING_COMPUTE)
# Queue names listed in a "does not exist" message, at most.
KNOWN_QUEUES_SHOWN = 20


class Expected(ValueError):
    """Raised by a parser to say, better than ``Param.expected``, what the value should be."""


@dataclass(frozen=True)
class Param:
    """One query parameter. ``parse`` turns the raw text into a value or raises ``ValueError``
    (an ``Expected`` one replaces ``expected`` in the message); ``apply`` filters by it."""

    name: str
    schema: dict[str, Any]
    description: str
    expected: str
    parse: Callable[[str], Any]
    apply: Callable[[QuerySet[Any], Any], QuerySet[Any]] | None = field(default=None)


def parse_text(raw: str) -> str:
    if not raw or len(raw) > 255:
        raise ValueError
    return raw


def parse_queue(raw: str) -> str:
    """Return ``raw`` if a queue of that name exists; a typo would otherwise list nothing."""
    if Queue.objects.filter(name=raw).exists():
        return raw
    known = list(Queue.objects.order_by("name").values_list("name", flat=True))
    close = close_names(raw, known)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    shown = ", ".join(known[:KNOWN_QUEUES_SHOWN]) + (
        ", ..." if len(known) > KNOWN_QUEUES_SHOWN else ""
    )
    raise Expected(f"the name of an existing queue{hint}; queues: {shown or 'none'}")


def parse_priority(raw: str) -> int:
    value = int(raw)
    if not MIN_PRIORITY <= value <= MAX_PRIORITY:
        raise ValueError
    return value


def parse_id(raw: str) -> int:
    value = int(raw)
    if not 1 <= value <= MAX_ID:
        raise ValueError
    return value


def parse_boolean(raw: str) -> bool:
    if raw not in ("true", "false"):
        raise ValueError
    return raw == "true"


def parse_datetime(raw: str) -> datetime:
    """Read an ISO 8601 datetime with a timezone offset (``Z`` or ``+02:00``)."""
    try:
        value = datetime.fromisoformat(raw)
    except ValueError:
        hint = " (a '+' in a query string reads as a space: write it %2B, or use Z)"
        raise Expected(
            "an ISO 8601 datetime with a timezone, e.g. 2025-01-31T09:30:00Z"
            + (hint if " " in raw else "")
        ) from None
    if timezone.is_naive(value):
        raise Expected(
            "an ISO 8601 datetime with a timezone offset, e.g. 2025-01-31T09:30:00Z; "
            "without one the time would be ambiguous"
        )
    if not filter_time_in_range(value):
        raise Expected(
            f"an ISO 8601 datetime between {EARLIEST_FILTER_TIME:%Y-%m-%d} and "
            f"{LATEST_FILTER_TIME:%Y-%m-%d} UTC, the times every supported database holds"
        )
    # With USE_TZ = False the database stores naive local times.
    return value if settings.USE_TZ else timezone.make_naive(value)


def parse_state(raw: str) -> str:
    if raw == "failed":
        raise Expected(
            "one of " + ", ".join(ENTRY_STATES) + "; failed entries have left the queue: "
            "list them with /errors/?final=true&requeued=false"
        )
    if raw not in ENTRY_STATES:
        raise ValueError
    return raw


def filter_state(rows: QuerySet[Any], state: str) -> QuerySet[Any]:
    """Entries in ``state``, stored (``pending``) or inferred (``computing``)."""
    method: Callable[[], QuerySet[Any]] = getattr(rows, state)  # the EntryQuerySet method
    return method()


def _where(lookup: str) -> Callable[[QuerySet[Any], Any], QuerySet[Any]]:
    def apply(rows: QuerySet[Any], value: Any) -> QuerySet[Any]:
        return rows.filter(**{lookup: value})

    return apply


def filter_requeued(rows: QuerySet[Any], requeued: bool) -> QuerySet[Any]:
    return rows.filter(requeued_at__isnull=not requeued)


QUEUE = Param(
    "queue",
    {"type": "string"},
    "Only this queue's rows. An unknown queue is refused, not listed as empty.",
    "the name of an existing queue",
    parse_queue,
    _where("queue_id"),
)
JOB = Param(
    "job",
    {"type": "string", "maxLength": 255},
    "Only rows of this job (its registered name, e.g. shop.jobs.send_receipt).",
    "a job name",
    parse_text,
    _where("job_name"),
)
ENTRY_FILTERS: tuple[Param, ...] = (
    QUEUE,
    JOB,
    Param(
        "state",
        {"type": "string", "enum": list(ENTRY_STATES)},
        "Only entries in this state. initial, pending, disabled and blocked (waiting for "
        "parent entries) are stored; computing (pending, its group lock held by a live "
        "worker), running (computing, the entry its worker runs now) and awaiting_compute "
        "(pending, not locked) are inferred.",
        "one of " + ", ".join(ENTRY_STATES),
        parse_state,
        filter_state,
    ),
    Param(
        "group_key",
        {"type": "string", "maxLength": 255},
        "Only entries of this group.",
        "a group key",
        parse_text,
        _where("group_key"),
    ),
    Param(
        "enqueued_after",
        {"type": "string", "format": "date-time"},
        "Only entries enqueued at or after this time (ISO 8601 with a timezone offset).",
        "an ISO 8601 datetime with a timezone, e.g. 2025-01-31T09:30:00Z",
        parse_datetime,
        _where("enqueued_at__gte"),
    ),
    Param(
        "enqueued_before",
        {"type": "string", "format": "date-time"},
        "Only entries enqueued strictly before this time (ISO 8601 with a timezone offset).",
        "an ISO 8601 datetime with a timezone, e.g. 2025-01-31T09:30:00Z",
        parse_datetime,
        _where("enqueued_at__lt"),
    ),
    Param(
        "priority_min",
        {"type": "integer", "minimum": MIN_PRIORITY, "maximum": MAX_PRIORITY},
        "Only entries of at least this priority.",
        f"an integer from {MIN_PRIORITY} to {MAX_PRIORITY}",
        parse_priority,
        _where("priority__gte"),
    ),
    Param(
        "priority_max",
        {"type": "integer", "minimum": MIN_PRIORITY, "maximum": MAX_PRIORITY},
        "Only entries of at most this priority.",
        f"an integer from {MIN_PRIORITY} to {MAX_PRIORITY}",
        parse_priority,
        _where("priority__lte"),
    ),
)


def parse_outcome_status(raw: str) -> str:
    if raw not in OutcomeStatus.values:
        raise ValueError
    return raw


OUTCOME_FILTERS: tuple[Param, ...] = (
    Param(
        "queue",
        {"type": "string", "maxLength": 255},
        "Only runs of entries of this queue.",
        "a queue name",
        parse_text,
        _where("queue"),
    ),
    JOB,
    Param(
        "status",
        {"type": "string", "enum": list(OutcomeStatus.values)},
        "Only runs that ended this way.",
        "one of " + ", ".join(OutcomeStatus.values),
        parse_outcome_status,
        _where("status"),
    ),
    Param(
        "entry_id",
        {"type": "integer", "minimum": 1},
        "Only the runs of this entry.",
        "an entry id",
        parse_id,
        _where("entry_id"),
    ),
    Param(
        "result_id",
        {"type": "string", "maxLength": 32},
        "Only the runs of this Django Tasks result.",
        "a Tasks result id",
        parse_text,
        _where("result_id"),
    ),
)
ERROR_FILTERS: tuple[Param, ...] = (
    QUEUE,
    JOB,
    Param(
        "exception_class",
        {"type": "string", "maxLength": 255},
        "Only attempts that raised this exception (its dotted path, e.g. builtins.ValueError).",
        "a dotted exception class path",
        parse_text,
        _where("exception_class"),
    ),
    Param(
        "final",
        {"type": "boolean"},
        "true: only the last attempts of entries that left the queue as failed; false: only "
        "attempts that were retried.",
        "true or false",
        parse_boolean,
        _where("is_final"),
    ),
    Param(
        "requeued",
        {"type": "boolean"},
        "true: only failures already requeued; false: only those not requeued.",
        "true or false",
        parse_boolean,
        filter_requeued,
    ),
    Param(
        "entry_id",
        {"type": "integer", "minimum": 1},
        "Only the attempts of this entry.",
        "a positive integer id",
        parse_id,
        _where("entry_id"),
    ),
)


INCLUDE_STOPPED = Param(
    "include_stopped",
    {"type": "boolean"},
    "true: list processes marked stopped (cleanly, or declared dead) too.",
    "true or false",
    parse_boolean,
)


def parse_query(query: QueryDict, params: Sequence[Param]) -> dict[str, Any]:
    """Read the parameters of ``query`` declared in ``params``; raise ``ApiError`` (400) for
    an unknown or repeated parameter and ``InvalidParameter`` for a value that does not parse."""
    by_name = {param.name: param for param in params}
    values: dict[str, Any] = {}
    for name, raws in query.lists():
        param = by_name.get(name)
        if param is None:
            close = close_names(name, list(by_name))
            hint = f" Did you mean {close[0]!r}?" if close else ""
            accepted = f"Accepted: {', '.join(by_name)}." if by_name else "It takes none."
            raise ApiError(
                400, f"Unknown query parameter {name!r}.{hint} {accepted}", parameter=name
            )
        if len(raws) > 1:
            raise ApiError(
                400,
                f"Parameter {name!r} was given {len(raws)} times; give it once.",
                parameter=name,
            )
        try:
            values[name] = param.parse(raws[0])
        except Expected as exc:
            raise InvalidParameter(name, raws[0], str(exc)) from None
        except ValueError:
            raise InvalidParameter(name, raws[0], param.expected) from None
    low, high = values.get("priority_min"), values.get("priority_max")
    if low is not None and high is not None and low > high:
        raise ApiError(
            400,
            f"priority_min ({low}) is greater than priority_max ({high}): nothing could match.",
            parameter="priority_min",
        )
    return values


def apply_filters(
    rows: QuerySet[Any], params: Sequence[Param], values: Mapping[str, Any]
) -> QuerySet[Any]:
    """Filter ``rows`` by every parameter of ``params`` present in ``values``."""
    for param in params:
        if param.apply is not None and param.name in values:
            rows = param.apply(rows, values[param.name])
    return rows
