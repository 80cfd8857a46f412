"""Helpers shared by the managers: storable text, and transactions
that lock rows in one order and are run again when they lose a lock conflict."""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from django.db import connections, models, transaction

from django_iq.dbconn import is_lock_conflict, with_db_retry
from django_iq.logs import get_logger

logger = get_logger(__name__)
T = TypeVar("T")

# Runs of a transaction that keeps losing lock conflicts before the error reaches the caller.
CONFLICT_ATTEMPTS = 6

ENQUEUE_BATCH_SIZE = 1000


def storable_text(text: str) -> str:
    """Return ``text`` in a form every supported database stores: NUL characters (which
    PostgreSQL rejects) and lone surrogates (not encodable as UTF-8) become backslash escapes."""
    return text.replace("\x00", "\\x00").encode("utf-8", "backslashreplace").decode("utf-8")


def atomic_retrying(using: str, action: Callable[[], T], what: str, *, atomic: bool = True) -> T:
    """Run ``action`` in a transaction; run it again, after a short random pause, when the
    database chose it as a deadlock victim or it timed out waiting for a lock.

    The managers lock rows in one order (see ``lock_in_order``), so a deadlock among them
    cannot happen; one with a transaction of the caller's own can, and is cured here, so no
    operator or worker sees it. Inside a caller's transaction it runs once: only the caller
    can run its whole transaction again. ``atomic=False`` is for an action of one statement,
    which is a transaction on its own.
    """
    if connections[using].in_atomic_block:
        with transaction.atomic(using=using):
            return action()

    def run() -> T:
        if not atomic:
            return action()
        with transaction.atomic(using=using):
            return action()

    return with_db_retry(
        run,
        f"lock conflict in {what}",
        retry_if=is_lock_conflict,
        attempts=CONFLICT_ATTEMPTS,
        delay=lambda attempt: random.uniform(0, 0.02 * 2**attempt),  # noqa: S311 (jitter)
        before_retry=lambda: None,
        log_level=logging.INFO,
    )


def lock_in_order(rows: models.QuerySet[Any], ids: Iterable[int] | None = None) -> list[int]:
    """Lock ``rows`` (or those of them with the given ids) ``FOR UPDATE`` in ascending id order
    and return their ids. Every manager that writes several rows takes its locks this way,
    table by table in one order (disabled jobs, entries, group locks, then rows it owns), so
    that no two of them can wait on each other in a cycle. Call inside a transaction."""
    if ids is not None:
        rows = rows.filter(pk__in=sorted(set(ids)))
    return list(rows.order_by("pk").select_for_update().values_list("pk", flat=True))


def lock_awaited_in_order(rows: models.QuerySet[Any], ids: Iterable[int]) -> dict[int, bool]:
    """Lock entries as ``lock_in_order`` does; return each one's id and whether a caller waits
    on it (``awaited``), in id order."""
    rows = rows.filter(pk__in=sorted(set(ids))).order_by("pk").select_for_update()
    return dict(rows.values_list("pk", "awaited"))


def delete_first(rows: models.QuerySet[Any], order: str, batch_size: int) -> int:
    """Delete the first ``batch_size`` of ``rows`` in ``order`` (a field): one pruning batch,
    its ids read first so that no database needs DELETE ... LIMIT. Return the rows deleted."""
    ids = list(rows.order_by(order).values_list("pk", flat=True)[:batch_size])
    return rows.model._default_manager.using(rows.db).filter(pk__in=ids).delete()[0] if ids else 0


def stored_json(value: Any) -> Any:
    """The value as the entry stored it; a JSON ``null`` (a row written by hand) stays JSON
    ``null``, where Django would write SQL NULL, which the column refuses."""
    return models.Value(None, models.JSONField()) if value is None else value
