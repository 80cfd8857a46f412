"""Cron schedules, pure: validation and the next fire time of each kind a cron job may have.

A cron job has exactly one of: a cron expression (croniter syntax, in a time zone), an interval
(``every``, whole seconds), or one time (``at``, runs once).
"""

from __future__ import annotations

import zoneinfo
from datetime import datetime, timedelta

from croniter import croniter

# The shortest interval: the leader's passes and the workers' polls are a second apart.
MIN_EVERY_SECONDS = 1
# The longest interval (a year of seconds still fits a 32-bit column many times over).
MAX_EVERY_SECONDS = 366 * 86_400


def validate_schedule(schedule: str, timezone_name: str = "UTC") -> None:
    """Raise ``ValueError`` naming the problem if ``schedule`` or ``timezone_name`` is invalid."""
    if not isinstance(schedule, str) or not croniter.is_valid(schedule):
        raise ValueError(
            f"{schedule!r} is not a valid cron expression; use five fields "
            '"minute hour day-of-month month day-of-week", e.g. "*/5 * * * *".'
        )
    validate_timezone(timezone_name)


def validate_timezone(timezone_name: str) -> None:
    """Raise ``ValueError`` if ``timezone_name`` is not a known time zone."""
    try:
        zoneinfo.ZoneInfo(timezone_name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, TypeError):
        raise ValueError(
            f"{timezone_name!r} is not a known time zone, e.g. 'UTC' or 'Europe/Paris'."
        ) from None


def every_seconds_of(every: object) -> int:
    """Return the whole seconds of an interval given as a ``timedelta``; raise ``ValueError``
    naming the value if it is not one, not whole seconds, under a second or over a year."""
    if not isinstance(every, timedelta):
        raise ValueError(
            f"every must be a timedelta, e.g. timedelta(minutes=5), not {type(every).__name__} "
            f"({every!r:.80})."
        )
    seconds = every.total_seconds()
    if seconds != int(seconds):
        raise ValueError(f"every ({every}) must be whole seconds, e.g. timedelta(seconds=90).")
    validate_every_seconds(int(seconds))
    return int(seconds)


def validate_every_seconds(seconds: int) -> None:
    """Raise ``ValueError`` unless an interval of ``seconds`` is within the allowed range."""
    if not MIN_EVERY_SECONDS <= seconds <= MAX_EVERY_SECONDS:
        raise ValueError(
            f"every ({timedelta(seconds=seconds)}) must be from {MIN_EVERY_SECONDS} second to "
            f"{MAX_EVERY_SECONDS // 86_400} days."
        )


def validate_at(at: object) -> datetime:
    """Return ``at`` if it is an aware ``datetime``; raise ``ValueError`` naming it otherwise."""
    if not isinstance(at, datetime):
        raise ValueError(
            f"at must be an aware datetime, e.g. datetime(2030, 1, 1, 9, tzinfo=UTC), not "
            f"{type(at).__name__} ({at!r:.80})."
        )
    if at.tzinfo is None or at.utcoffset() is None:
        raise ValueError(
            f"at ({at.isoformat()}) has no time zone; pass an aware datetime, e.g. "
            "datetime(2030, 1, 1, 9, tzinfo=UTC)."
        )
    return at


def validate_kind(schedule: str, every_seconds: int | None, run_once_at: datetime | None) -> None:
    """Raise ``ValueError`` unless exactly one of a cron expression, an interval and a one-off
    time is given."""
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
        raise ValueError(
            "A cron job needs exactly one of schedule (a cron expression), every (an interval) "
            f"and at (one time); got {', '.join(given) if given else 'none'}."
        )


def validate_declared_schedule(spec: dict[str, object]) -> None:
    """Raise ``ValueError`` naming the problem with the ``schedule``, ``every``, ``at`` or
    ``timezone`` of a ``DJANGO_IQ["CRON"]`` entry that has exactly one of the first three."""
    timezone_name = spec.get("timezone", "UTC")
    if "schedule" in spec:
        validate_schedule(spec["schedule"], timezone_name)  # type: ignore[arg-type]
        return
    validate_timezone(timezone_name)  # type: ignore[arg-type]
    if "every" in spec:
        every_seconds_of(spec["every"])
    else:
        validate_at(spec.get("at"))


def next_fire_time(schedule: str, timezone_name: str, after: datetime) -> datetime:
    """Return the first fire time of ``schedule`` strictly after ``after``, in UTC."""
    zone = zoneinfo.ZoneInfo(timezone_name)
    fire: datetime = croniter(schedule, after.astimezone(zone)).get_next(datetime)
    return fire.astimezone(zoneinfo.ZoneInfo("UTC"))


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
