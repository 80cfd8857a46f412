"""Helpers shared by the operator command tests (``test_cli_*.py``)."""

from __future__ import annotations

import io
from datetime import datetime, timedelta
from typing import Any

from django.core.management import call_command
from django.utils.dateparse import parse_datetime

RECORD = "tests.testapp.jobs.record"
NOOP = "tests.testapp.jobs.noop"


def run(*args: str, **options: Any) -> str:
    """Run a command in-process and return what it printed on stdout."""
    out = io.StringIO()
    call_command(*args, stdout=out, stderr=io.StringIO(), **options)
    return out.getvalue()


def timestamp(value: str) -> datetime:
    parsed = parse_datetime(value)
    assert parsed is not None, f"not an ISO 8601 datetime: {value!r}"
    return parsed


def close_to(value: str, expected: datetime) -> bool:
    """The JSON encoder keeps milliseconds: compare within one."""
    return abs(timestamp(value) - expected) < timedelta(milliseconds=1)
