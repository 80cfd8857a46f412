"""The operators' audit trail: one row per action taken through the admin, the API or a
command, written by ``django_iq.operations`` in the action's own transaction."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db import models

from django_iq.managers.common import storable_text

if TYPE_CHECKING:
    from django_iq.models import OperatorAction


class OperatorActionManager(models.Manager["OperatorAction"]):
    def record(
        self,
        *,
        door: str,
        actor: str,
        user_pk: Any,
        action: str,
        target: str,
        done: int,
        skipped: int,
        not_found: int,
        message: str,
    ) -> OperatorAction:
        """Write the audit record of one operator action."""
        return self.create(
            door=door,
            actor=storable_text(actor)[:200],
            user_pk="" if user_pk is None else str(user_pk)[:64],
            action=action,
            target=storable_text(target)[:500],
            done=done,
            skipped=skipped,
            not_found=not_found,
            message=storable_text(message),
        )

    def prune(self, older_than: datetime, batch_size: int) -> int:
        """Delete up to ``batch_size`` records of actions taken before ``older_than``."""
        ids = list(
            self.filter(at__lt=older_than).order_by("at").values_list("pk", flat=True)[:batch_size]
        )
        return self.filter(pk__in=ids).delete()[0] if ids else 0
