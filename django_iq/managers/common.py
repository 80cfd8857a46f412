"""Helpers shared by the managers: database-time arithmetic and storable text."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

ENQUEUE_BATCH_SIZE = 1000
TRUNCATED_MARK = "... (truncated)\n"


def storable_text(text: str) -> str:
    """Return ``text`` in a form every supported database stores: NUL characters (which
    PostgreSQL rejects) and lone surrogates (not encodable as UTF-8) become backslash escapes."""
    return text.replace("\x00", "\\x00").encode("utf-8", "backslashreplace").decode("utf-8")


def db_now_plus(seconds: float) -> Any:
    """Database time plus ``seconds``, so leases never depend on the hosts' clocks."""
    from django.db.models import DateTimeField, ExpressionWrapper
    from django.db.models.functions import Now

    return ExpressionWrapper(Now() + timedelta(seconds=seconds), output_field=DateTimeField())
