"""Cron schedules, pure: validation and the next fire time of each kind a cron job may have.

A cron job has exactly one of: a cron expression (croniter syntax, in a time zone), an interval
(``every``, whole seconds), or one time (``at``, runs once).
"""

from __future__ import annotations

import zoneinfo
from datetime import UTC, datetime, timedelta
from typing import Any

from croniter import CroniterBadDateError, croniter

from django_iq.bounds import EARLIEST_RUN_AT, LATEST_RUN_AT, run_at_problem
from django_iq.exceptions import InvalidSchedule

# The shortest interval: the leader's passes and the workers' polls are a second apart.
MIN_EVERY_SECONDS = 1
# A cron expression's fields: minute, hour, day of month, month, day of week.
CRON_FIELDS = 5
# The longest interval (a year of seconds still fits a 32-bit column many times over).
MAX_EVERY_SECONDS = 366 * 86_400


def validate_schedule(
    schedule: str, timezone_name: str = "UTC", now: datetime | None = None
) -> None:
    """Raise ``InvalidSchedule`` naming the problem unless ``schedule`` is a cron expression of
    five fields that fires at least once after ``now`` (default: the current time) in a known
    time zone ``timezone_name``.

    croniter also reads a sixth (seconds) and a seventh (year) field and ``@daily``-style
    names; they are refused here, since a year runs out (after its last fire the cron job
    would have no next entry) and the documented form is five fields. A schedule that never
    fires (``0 0 30 2 *``) is refused by computing its next fire time.
    """
    if (
        not isinstance(schedule, str)
        or len(schedule.split()) != CRON_FIELDS
        or not croniter.is_valid(schedule)
    ):
        raise InvalidSchedule(
            f"{schedule!r:.120} is not a valid cron expression; use five fields "
            '"minute hour day-of-month month day-of-week", e.g. "*/5 * * * *".'
        )
    validate_timezone(timezone_name)
    next_fire_time(schedule, timezone_name, now or datetime.now(UTC))


def validate_timezone(timezone_name: str) -> None:
    """Raise ``InvalidSchedule`` if ``timezone_name`` is not a known time zone."""
    try:
        zoneinfo.ZoneInfo(timezone_name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, TypeError):
        raise InvalidSchedule(
            f"{timezone_name!r} is not a known time zone, e.g. 'UTC' or 'Europe/Paris'."
        ) from None


def every_seconds_of(every: object) -> int:
    """Return the whole seconds of an interval given as a ``timedelta``; raise
    ``InvalidSchedule`` naming the value if it is not one, not whole seconds, under a second
    or over a year."""
    if not isinstance(every, timedelta):
        raise InvalidSchedule(
            f"every must be a timedelta, e.g. timedelta(minutes=5), not {type(every).__name__} "
            f"({every!r:.80})."
        )
    seconds = every.total_seconds()
    if seconds != int(seconds):
        raise InvalidSchedule(f"every ({every}) must be whole seconds, e.g. timedelta(seconds=90).")
    validate_every_seconds(int(seconds))
    return int(seconds)


def validate_every_seconds(seconds: int) -> None:
    """Raise ``InvalidSchedule`` unless an interval of ``seconds`` is within the allowed range."""
    if not MIN_EVERY_SECONDS <= seconds <= MAX_EVERY_SECONDS:
        raise InvalidSchedule(
            f"every ({timedelta(seconds=seconds)}) must be from {MIN_EVERY_SECONDS} second to "
            f"{MAX_EVERY_SECONDS // 86_400} days."
        )


def validate_at(at: object) -> datetime:
    """Return ``at`` if it is an aware ``datetime`` a run may be set for (the bounds of an
    entry's ``run_at``); raise ``InvalidSchedule`` naming it otherwise."""
    if not isinstance(at, datetime):
        raise InvalidSchedule(
            f"at must be an aware datetime, e.g. datetime(2030, 1, 1, 9, tzinfo=UTC), not "
            f"{type(at).__name__} ({at!r:.80})."
        )
    if at.tzinfo is None or at.utcoffset() is None:
        raise InvalidSchedule(
            f"at ({at.isoformat()}) has no time zone; pass an aware datetime, e.g. "
            "datetime(2030, 1, 1, 9, tzinfo=UTC)."
        )
    if run_at_problem(at) is not None:
        raise InvalidSchedule(
            f"at ({at.isoformat()}) is out of range; a run may be set from "
            f"{EARLIEST_RUN_AT:%Y-%m-%d} to {LATEST_RUN_AT:%Y-%m-%d} UTC."
        )
    return at


def validate_kind(schedule: str, every_seconds: int | None, run_once_at: datetime | None) -> None:
    """Raise ``InvalidSchedule`` unless exactly one of a cron expression, an interval and a
    one-off time is given."""
    given = [
        name
        for name, value in (
            ("schedule", schedule),
            ("every", every_seconds),
            ("at", run_once_at),
        )
        if value not in ("", None)
    ]
    if len(given) != 1:
        raise InvalidSchedule(
            "A cron job needs exactly one of schedule (a cron expression), every (an interval) "
            f"and at (one time); got {', '.join(given) if given else 'none'}."
        )


def validate_declared_schedule(spec: dict[str, Any], now: datetime | None = None) -> None:
    """Raise ``InvalidSchedule`` naming the problem with the ``schedule``, ``every``, ``at`` or
    ``timezone`` of a ``DJANGO_IQ["CRON"]`` entry, or unless it has exactly one of the first
    three; a cron expression must fire after ``now``."""
    validate_kind(spec.get("schedule", ""), spec.get("every"), spec.get("at"))
    timezone_name = spec.get("timezone", "UTC")
    if "schedule" in spec:
        validate_schedule(spec["schedule"], timezone_name, now)
        return
    validate_timezone(timezone_name)
    if "every" in spec:
        every_seconds_of(spec["every"])
    else:
        validate_at(spec.get("at"))


def next_fire_time(schedule: str, timezone_name: str, after: datetime) -> datetime:
    """Return the first fire time of ``schedule`` strictly after ``after``, in UTC.

    Raise ``InvalidSchedule`` if there is none: croniter finds no date (a year field that ran
    out, or a day that never comes, as 30 February), cannot read the expression or time zone
    (a row written by hand), or the time found is past what a run may be set for.
    """
    fire: datetime | None
    try:
        zone = zoneinfo.ZoneInfo(timezone_name)
        fire = croniter(schedule, after.astimezone(zone)).get_next(datetime).astimezone(UTC)
        # A wall-clock time the fall-back hour repeats fires at its first occurrence only,
        # unless the hour field is a wildcard (the schedule then keeps its pace by the clock).
        if not _hour_is_wildcard(schedule):
            times = croniter(schedule, fire.astimezone(zone))
            while _is_repeated(fire, zone):
                fire = times.get_next(datetime).astimezone(UTC)
    except CroniterBadDateError:
        fire = None
    # croniter's other errors are ValueErrors; a bad zone name is a KeyError or a ValueError.
    except (ValueError, TypeError, KeyError, OverflowError) as exc:
        raise InvalidSchedule(
            f"{schedule!r:.120} in {timezone_name!r:.80} cannot be read: {exc}"
        ) from None
    if fire is None or run_at_problem(fire) is not None:
        raise InvalidSchedule(
            f"{schedule!r:.120} has no fire time after {after.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC."
        )
    return fire


def _hour_is_wildcard(schedule: str) -> bool:
    """Whether the hour field of ``schedule`` is ``*`` or ``*/n`` (every hour, by the clock)."""
    return schedule.split()[1].startswith("*")


def _is_repeated(fire: datetime, zone: zoneinfo.ZoneInfo) -> bool:
    """Whether ``fire`` is the second occurrence of its wall-clock time in ``zone`` (the hour
    a fall-back to winter time repeats)."""
    local = fire.astimezone(zone)
    return local.fold == 1 and local.utcoffset() != local.replace(fold=0).utcoffset()


def next_interval_time(anchor: datetime | None, every_seconds: int, after: datetime) -> datetime:
    """Return the first of ``anchor + k * every`` (k >= 0) strictly after ``after``; with no
    anchor, ``after + every``.

    Fire times stay on the anchor's grid, so they do not drift by how long each run took, and
    fires missed while nothing ran are skipped rather than replayed.
    """
    every = timedelta(seconds=every_seconds)
    if anchor is None:
        return after + every
    if anchor > after:
        return anchor
    return anchor + every * ((after - anchor) // every + 1)


def describe(schedule: str, every_seconds: int | None, run_once_at: datetime | None) -> str:
    """A cron job's schedule in words: its expression, ``every 1h30m``, or ``once at ...``."""
    if every_seconds is not None:
        return f"every {format_seconds(every_seconds)}"
    if run_once_at is not None:
        return f"once at {run_once_at.astimezone(zoneinfo.ZoneInfo('UTC')):%Y-%m-%d %H:%M:%S} UTC"
    return schedule


def format_seconds(seconds: int) -> str:
    """``5400`` -> ``1h30m``; ``90`` -> ``1m30s``; ``86400`` -> ``1d``."""
    parts = []
    for unit, size in (("d", 86_400), ("h", 3600), ("m", 60), ("s", 1)):
        count, seconds = divmod(seconds, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts) or "0s"
