"""Cron schedules, pure: validation and the next fire time (croniter syntax, in a time zone)."""

from __future__ import annotations

import zoneinfo
from datetime import datetime

from croniter import croniter


def validate_schedule(schedule: str, timezone_name: str = "UTC") -> None:
    """Raise ``ValueError`` naming the problem if ``schedule`` or ``timezone_name`` is invalid."""
    if not isinstance(schedule, str) or not croniter.is_valid(schedule):
        raise ValueError(
            f"{schedule!r} is not a valid cron expression; use five fields "
            '"minute hour day-of-month month day-of-week", e.g. "*/5 * * * *".'
        )
    try:
        zoneinfo.ZoneInfo(timezone_name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, TypeError):
        raise ValueError(
            f"{timezone_name!r} is not a known time zone, e.g. 'UTC' or 'Europe/Paris'."
        ) from None


def next_fire_time(schedule: str, timezone_name: str, after: datetime) -> datetime:
    """Return the first fire time of ``schedule`` strictly after ``after``, in UTC."""
    zone = zoneinfo.ZoneInfo(timezone_name)
    fire: datetime = croniter(schedule, after.astimezone(zone)).get_next(datetime)
    return fire.astimezone(zoneinfo.ZoneInfo("UTC"))
