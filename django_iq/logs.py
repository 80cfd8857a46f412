"""Structured log records (docs/howto/logging.md).

Every record django_iq logs carries, beside its readable ``key=value`` message, the fields of
what it is about as attributes of the record (``extra``): ``entry_id``, ``job``, ``queue``,
``attempt``, ``worker``, ``duration`` (seconds) and ``outcome`` (``succeeded``, ``retrying``,
``failed``, ``snoozed``, ``cancelled``, ``expired``), each None where it does not apply. A
formatter that writes a record's attributes (``JsonFormatter`` here, python-json-logger, a
log shipper's) sends them as fields, so a log search finds every line of one entry by its id.

``worker`` is the name of the worker or leader the process registered as (``set_process_name``),
or, inside a run, the run's worker. Inside a job, ``JobContextFilter`` on a handler gives the
job's own log lines (any logger) the fields of the run they come from.
"""

from __future__ import annotations

import json
import logging
import traceback
from collections.abc import Callable, Mapping, MutableMapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from django_iq.context import JobContext
    from django_iq.models import Entry

FIELDS = ("entry_id", "job", "queue", "attempt", "worker", "duration", "outcome")

# The attributes every LogRecord has: anything else on a record came from ``extra``.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
}

_process_name = ""


def _no_run() -> JobContext | None:
    return None


# ``django_iq.context.current``, set by that module (which sits above this one).
_current: Callable[[], JobContext | None] = _no_run


def read_runs_with(current: Callable[[], JobContext | None]) -> None:
    """Take the run a thread is in from ``current`` (``django_iq.context`` calls it)."""
    global _current
    _current = current


def set_process_name(name: str) -> None:
    """The name this process registered as (a worker's or the leader's): every record's
    ``worker`` from now on, outside a run."""
    global _process_name
    _process_name = name


def process_name() -> str:
    return _process_name


def run_fields(
    entry: Entry,
    *,
    attempt: int | None = None,
    duration: float | None = None,
    outcome: str | None = None,
    worker: str | None = None,
) -> dict[str, Any]:
    """The fields of a record about ``entry``'s run (``attempt``: the entry's next one unless
    given)."""
    return {
        "entry_id": entry.pk,
        "job": entry.job_name,
        "queue": str(entry.queue_id),
        "attempt": entry.attempts + 1 if attempt is None else attempt,
        "duration": None if duration is None else round(duration, 6),
        "outcome": outcome,
        **({"worker": worker} if worker else {}),
    }


def _context_fields() -> dict[str, Any]:
    """The fields of the run this thread is in (all None outside one, but ``worker``)."""
    context = _current()
    if context is None:
        return {
            "entry_id": None,
            "job": None,
            "queue": None,
            "attempt": None,
            "worker": _process_name or None,
            "duration": None,
            "outcome": None,
        }
    return {
        "entry_id": context.entry_id,
        "job": context.job_name,
        "queue": context.queue,
        "attempt": context.attempt,
        "worker": context.worker,
        "duration": None,
        "outcome": None,
    }


class IQLogger(logging.LoggerAdapter[logging.Logger]):
    """A logger whose records carry the ``FIELDS``: those of the call's ``extra`` first, then
    the run the thread is in, then the process's worker name."""

    def process(
        self, msg: Any, kwargs: MutableMapping[str, Any]
    ) -> tuple[Any, MutableMapping[str, Any]]:
        given: Mapping[str, Any] = kwargs.get("extra") or {}
        kwargs["extra"] = {**_context_fields(), **given}
        return msg, kwargs


def get_logger(name: str) -> IQLogger:
    """The logger of one of django_iq's modules (``name`` under ``django_iq``)."""
    return IQLogger(logging.getLogger(name), {})


class JobContextFilter(logging.Filter):
    """Give each record without them the ``FIELDS`` of the run its thread is in: put on a
    handler, a job's own log lines (``logging.getLogger(__name__).info(...)`` in the job)
    carry its entry id, job, queue, attempt and worker. Records outside a run get None."""

    def filter(self, record: logging.LogRecord) -> bool:
        for name, value in _context_fields().items():
            if not hasattr(record, name):
                setattr(record, name, value)
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``time`` (ISO 8601, UTC), ``level``, ``logger``, ``message``,
    every field of ``extra`` (the ``FIELDS`` included), and ``exception`` (the traceback) when
    the record has one. Values JSON cannot hold are written as their ``str()``."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name, value in vars(record).items():
            if name not in _STANDARD and not name.startswith("_"):
                line[name] = value
        if record.exc_info:
            line["exception"] = "".join(traceback.format_exception(*record.exc_info)).rstrip()
        elif record.exc_text:
            line["exception"] = record.exc_text
        return json.dumps(line, default=str, ensure_ascii=False)
