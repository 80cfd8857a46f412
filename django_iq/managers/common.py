"""Helpers shared by the managers: database-time arithmetic and storable text."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db.models.functions import Now

ENQUEUE_BATCH_SIZE = 1000
TRUNCATED_MARK = "... (truncated)\n"


def storable_text(text: str) -> str:
    """Return ``text`` in a form every supported database stores: NUL characters (which
    PostgreSQL rejects) and lone surrogates (not encodable as UTF-8) become backslash escapes."""
    return text.replace("\x00", "\\x00").encode("utf-8", "backslashreplace").decode("utf-8")


class DatabaseClock(Now):
    """The database's clock when the row is written. Django's ``Now()`` is the start of the
    statement on PostgreSQL; this is ``CLOCK_TIMESTAMP()`` there, so a stamp written after the
    statement waited for a row lock is not older than the wait."""

    def as_postgresql(self, compiler: Any, connection: Any, **extra_context: Any) -> Any:
        return self.as_sql(compiler, connection, template="CLOCK_TIMESTAMP()", **extra_context)


def db_now_plus(seconds: float) -> Any:
    """Database time plus ``seconds``, so leases never depend on the hosts' clocks."""
    from django.db.models import DateTimeField, ExpressionWrapper

    return ExpressionWrapper(Now() + timedelta(seconds=seconds), output_field=DateTimeField())
