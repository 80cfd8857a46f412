"""The leadership lease: acquire, renew (fencing) and release in database time."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from django.db import IntegrityError, models, router, transaction
from django.db.models import F
from django.utils import timezone

from django_iq.queries import db_now_plus

if TYPE_CHECKING:
    from django_iq.models import (
        LeaderLease,
    )


LEASE_NAME = "leader"


class LeaderLeaseManager(models.Manager["LeaderLease"]):
    """Election by compare-and-set on one lease row, in database time."""

    def acquire(self, holder: str, lease_seconds: float) -> int | None:
        """Take the lease if it has expired; return the new epoch, or None if someone holds it."""
        from django.db.models.functions import Now

        db = router.db_for_write(self.model)
        if not self.using(db).filter(name=LEASE_NAME).exists():
            try:
                with transaction.atomic(using=db):
                    self.using(db).create(
                        name=LEASE_NAME, expires_at=timezone.now() - timedelta(days=1)
                    )
            except IntegrityError:
                pass  # another candidate created it first; the update below decides
        with transaction.atomic(using=db):
            taken = (
                self.using(db)
                .filter(name=LEASE_NAME, expires_at__lt=Now())
                .update(
                    holder=holder,
                    epoch=F("epoch") + 1,
                    expires_at=db_now_plus(lease_seconds),
                    acquired_at=Now(),
                )
            )
            if not taken:
                return None
            epoch: int = (
                self.using(db).filter(name=LEASE_NAME).values_list("epoch", flat=True).get()
            )
            return epoch

    def renew(self, holder: str, epoch: int, lease_seconds: float) -> bool:
        """Extend the lease if ``holder`` still holds it under ``epoch`` and it has not expired.

        Inside a transaction this also fences: the lease row stays locked until commit, so no
        other candidate can take over while the caller's writes are in flight.
        """
        from django.db.models.functions import Now

        return (
            self.filter(name=LEASE_NAME, holder=holder, epoch=epoch, expires_at__gte=Now()).update(
                expires_at=db_now_plus(lease_seconds)
            )
            > 0
        )

    def release(self, holder: str, epoch: int) -> bool:
        """Give the lease up at once so a standby can take over on its next poll."""
        return (
            self.filter(name=LEASE_NAME, holder=holder, epoch=epoch).update(
                holder="", expires_at=db_now_plus(-1)
            )
            > 0
        )

    def current(self) -> LeaderLease | None:
        return self.filter(name=LEASE_NAME).first()
