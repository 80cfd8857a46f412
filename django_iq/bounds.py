"""Bounds on what can be stored, in one place: each is what every supported database holds and
reads back exactly (PostgreSQL, MariaDB, SQLite), with room to spare. See docs/reference/limits.md."""

from __future__ import annotations

import traceback as tb
from datetime import UTC, datetime, timedelta

from django_iq.conf import iq_settings
from django_iq.exceptions import InvalidJobOptions

# run_at, in UTC: PostgreSQL stores years 4713 BC to 294276 AD but Python reads only 1 to 9999,
# and a time zone offset near either end crosses the year; MariaDB's DATETIME holds 1000-9999.
EARLIEST_RUN_AT = datetime(1900, 1, 1, tzinfo=UTC)
LATEST_RUN_AT = datetime(9000, 1, 1, tzinfo=UTC)
# Times a query may filter by, in UTC: MariaDB's DATETIME range (1000-9999), a day inside each
# end so that no time zone's offset takes it out, and Python's.
EARLIEST_FILTER_TIME = datetime(1000, 1, 2, tzinfo=UTC)
LATEST_FILTER_TIME = datetime(9999, 12, 30, tzinfo=UTC)
# Integers in arguments: 64-bit signed, what every database's JSON and most JSON readers hold.
MIN_INT, MAX_INT = -(2**63), 2**63 - 1
# Floats from 2**53 up are whole numbers, which PostgreSQL's jsonb gives back as integers, not
# always equal to the float sent (1e300 comes back as 10**300).
MAX_EXACT_FLOAT = float(2**53)
# Lists and dicts inside one argument: MariaDB's JSON functions refuse a document nested more
# than 32 levels, and the stored ``args`` list is one level itself.
MAX_ARGUMENT_DEPTH = 30
# Lists and dicts inside a return value: the same 32 levels of MariaDB, with room for nothing
# else (the value is the whole document). PostgreSQL's jsonb and Python's json go far deeper.
MAX_RETURN_DEPTH = 30
# max_attempts: a PositiveIntegerField holds 2**31 - 1; nobody retries more than this.
MAX_ATTEMPTS_LIMIT = 100_000
# Backoff options and settings, in seconds: a year.
MAX_BACKOFF_SECONDS = 365 * 86_400.0
# unique_for, in seconds: a year (the end of a window stays far inside every database's range).
MAX_UNIQUE_FOR_SECONDS = 365 * 86_400.0
# Why a cron job ended (``CronJob.end_reason``): a schedule named in a sentence.
END_REASON_MAX_CHARS = 500
# Queue names, group keys and job names: no NUL (PostgreSQL refuses it in text) and valid UTF-8.


CUT_MARK = " ... (cut)"
TRUNCATED_MARK = "... (truncated)\n"


def cut_message(message: str) -> str:
    """``message`` cut to ``ERROR_MESSAGE_MAX_CHARS``, its beginning kept and the cut marked,
    as it is stored and logged."""
    limit = iq_settings.ERROR_MESSAGE_MAX_CHARS
    if len(message) <= limit:
        return message
    return message[: limit - len(CUT_MARK)] + CUT_MARK


def cut_traceback(text: str) -> str:
    """``text`` cut to ``TRACEBACK_MAX_CHARS``, keeping the end, where the exception is."""
    limit = iq_settings.TRACEBACK_MAX_CHARS
    if len(text) <= limit:
        return text
    return TRUNCATED_MARK + text[len(text) - limit + len(TRUNCATED_MARK) :]


def exception_text(exc: BaseException) -> str:
    """``str(exc)`` as plain text, or, when that raises (a broken ``__str__``, one returning
    something other than text, or one raising ``SystemExit``), a placeholder saying why: a
    failure must be recorded whatever its exception does. A ``str`` subclass is copied to a
    plain ``str``, so none of its own methods runs while the failure is recorded."""
    try:
        return _plain(str(exc))
    except BaseException as error:  # the exception's own code: anything may happen in it
        return f"<exception text could not be read: {_class_of(error)}: {_safe(error)}>"


def _plain(text: str) -> str:
    """``text`` as an exact ``str`` (a subclass's comparisons or length could raise)."""
    return text if type(text) is str else str.__str__(text)


def _safe(error: BaseException) -> str:
    try:
        return _plain(str(error))[:200]
    except BaseException:  # the placeholder's own detail is not worth a second failure
        return "?"


def _class_of(error: BaseException) -> str:
    try:
        return _plain(type(error).__name__)
    except BaseException:  # a metaclass whose name cannot be read
        return "?"


def exception_class_name(exc: BaseException) -> str:
    """The dotted name ``exc``'s class is recorded under (a placeholder when its class's
    module or name cannot be read as text)."""
    kind = type(exc)
    try:
        return f"{_plain(kind.__module__)}.{_plain(kind.__qualname__)}"
    except BaseException:  # a metaclass that makes __module__ or __qualname__ odd
        return "<exception class name could not be read>"


def format_failure(exc: BaseException) -> tuple[str, str]:
    """The message and traceback of ``exc`` as stored and logged, each within its limit; a long
    message is cut inside the traceback too, so the frames above it are kept. An exception
    whose text cannot be read gets a placeholder (see ``exception_text``) in both."""
    message = exception_text(exc)
    short = cut_message(message)
    try:
        text = _plain("".join(tb.format_exception(exc)))
    except BaseException:  # the traceback module calls the exception's code too (notes, repr)
        text = f"{exception_class_name(exc)}: {message}\n"
    if short != message:
        text = text.replace(message, short)
    return short, cut_traceback(text)


def text_problem(text: str) -> str | None:
    """Why ``text`` cannot be stored in a text column of every database, or None."""
    if "\x00" in text:
        return f"has a NUL character (\\x00) at position {text.index(chr(0))}"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"has a lone surrogate at position {exc.start}, which is not valid Unicode"
    return None


def run_at_problem(run_at: datetime) -> str | None:
    """Why an aware ``run_at`` is out of bounds, or None."""
    try:
        utc = run_at.astimezone(UTC)
    except OverflowError:
        utc = None
    if utc is None or not EARLIEST_RUN_AT <= utc <= LATEST_RUN_AT:
        return (
            f"run_at {run_at.isoformat()} is out of range; it must fall between "
            f"{EARLIEST_RUN_AT:%Y-%m-%d} and {LATEST_RUN_AT:%Y-%m-%d} UTC"
        )
    return None


def filter_time_in_range(moment: datetime) -> bool:
    """Whether an aware ``moment`` is a time a query may filter by (see
    ``EARLIEST_FILTER_TIME``)."""
    try:
        utc = moment.astimezone(UTC)
    except OverflowError:
        return False
    return EARLIEST_FILTER_TIME <= utc <= LATEST_FILTER_TIME


def add_delay(now: datetime, delay: timedelta) -> datetime | None:
    """``now + delay``, or None if that is not a datetime Python can hold."""
    try:
        return now + delay
    except OverflowError:
        return None


def capped_backoff(base: float, cap: float, attempt: int) -> float:
    """``min(cap, base * 2 ** (attempt - 1))`` without overflowing for any attempt number."""
    try:
        return float(min(cap, base * 2.0 ** (attempt - 1)))
    except OverflowError:
        return float(cap)


def resolve_run_at(wanted: datetime | timedelta | None, now: datetime) -> datetime:
    """The UTC time an entry enqueued at ``now`` may run: ``wanted`` itself, ``now`` plus a
    delay, or ``now``; raise ``InvalidJobOptions`` if a delay takes it out of bounds."""
    if wanted is None:
        return now
    if isinstance(wanted, timedelta):
        run_at = add_delay(now, wanted)
        if run_at is None or run_at_problem(run_at) is not None:
            raise InvalidJobOptions(
                f"run_at = now + {wanted!r} is out of range; a delay must end between "
                f"{EARLIEST_RUN_AT:%Y-%m-%d} and {LATEST_RUN_AT:%Y-%m-%d} UTC."
            )
        return run_at.astimezone(UTC)
    return wanted.astimezone(UTC)
