"""Unique keys with a window (``unique_for``): the row that keeps a key taken after the entry
holding it finished, until its window has passed. Every time is the database's, so the hosts'
clocks do not move a window."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from django.db import IntegrityError, models, router, transaction
from django.db.models import F, Q
from django.db.models.functions import Now

from django_iq.queries import take_unique_key

if TYPE_CHECKING:
    from django_iq.models import UniqueKey  # noqa: F401  (the manager's type argument)


class UniqueKeyManager(models.Manager["UniqueKey"]):
    def window_running(self, key: str) -> bool:
        """Whether ``key``'s window runs now: its last entry finished less than its window ago.

        A plain read is enough: a running window only ends with time (no writer shortens it).
        """
        return self.filter(key=key, expires_at__gt=Now()).exists()

    def take(self, key: str, window: timedelta) -> bool:
        """Take ``key`` for the entry the caller's transaction just wrote with it, keeping
        ``window`` for when that entry finishes; return False, changing nothing, while the
        key's window runs.

        No two enqueues of one key are here at once: each holds an uncommitted entry with the
        key, and the entry's unique constraint lets only one do so.
        """
        db = self._db or router.db_for_write(self.model)
        taken = take_unique_key(db, key, window)
        if taken is not None:
            return taken
        free = Q(expires_at__isnull=True) | Q(expires_at__lte=Now())
        if self.filter(free, key=key).update(expires_at=None, window=window):
            return True
        try:
            with transaction.atomic(using=db):
                self.create(key=key, expires_at=None, window=window)
        except IntegrityError:
            return False  # the row exists and its window runs
        return True

    def start_windows(self, keys: Iterable[str | None]) -> None:
        """The entries holding ``keys`` finished: start their windows now. Only keys taken by an
        enqueue with a window have a row, and a window already running is left as it is. Call
        in the transaction that removes the entries, after removing them."""
        wanted = sorted({key for key in keys if key})
        if wanted:
            self.filter(key__in=wanted, expires_at__isnull=True).update(
                expires_at=Now() + F("window")
            )

    def prune(self, older_than: datetime, batch_size: int) -> int:
        """Delete up to ``batch_size`` keys whose window ended before ``older_than`` (and before
        the database's now). The delete checks the window again: a key taken meanwhile stays."""
        passed = self.filter(expires_at__lt=older_than).filter(expires_at__lt=Now())
        ids = list(passed.order_by("expires_at").values_list("pk", flat=True)[:batch_size])
        return passed.filter(pk__in=ids).delete()[0] if ids else 0
