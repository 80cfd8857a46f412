"""Results of Django Tasks: status changes written in the entries' transactions."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db import models, router, transaction

if TYPE_CHECKING:
    from django_iq.models import Result  # noqa: F401  (the manager's type argument)


class ResultManager(models.Manager["Result"]):
    """Results of Django Tasks: every status change, written in the entry's transactions."""

    def record_start(self, result_id: str, worker_id: str, now: datetime) -> None:
        """Mark a result RUNNING and append the worker to its worker_ids."""
        db = router.db_for_write(self.model)
        with transaction.atomic(using=db):
            row = self.using(db).select_for_update().filter(pk=result_id).first()
            if row is None:
                return
            row.status = "RUNNING"
            row.started_at = row.started_at or now
            row.last_attempted_at = now
            row.worker_ids = [*row.worker_ids, worker_id]
            row.save(update_fields=["status", "started_at", "last_attempted_at", "worker_ids"])

    def record_success(self, result_id: str, return_value: Any, now: datetime) -> None:
        self.filter(pk=result_id).update(
            status="SUCCESSFUL", return_value=return_value, finished_at=now
        )

    def record_failure(
        self, result_id: str, *, exception_class: str, traceback: str, final: bool, now: datetime
    ) -> None:
        """Append an error; the result is FAILED if ``final``, else READY for the retry."""
        row = self.select_for_update().filter(pk=result_id).first()
        if row is None:
            return
        row.errors = [
            *row.errors,
            {"exception_class_path": exception_class, "traceback": traceback},
        ]
        row.status = "FAILED" if final else "READY"
        row.finished_at = now if final else None
        row.save(update_fields=["errors", "status", "finished_at"])

    def record_cancelled(self, result_ids: list[str], now: datetime) -> int:
        """Finish the results of cancelled entries as FAILED with an ``EntryCancelled`` error,
        so ``get_result()`` reports that the task will not run. Return results changed."""
        changed = 0
        for row in self.select_for_update().filter(pk__in=result_ids, status="READY"):
            row.errors = [
                *row.errors,
                {
                    "exception_class_path": "django_iq.exceptions.EntryCancelled",
                    "traceback": "The entry was cancelled before it ran.",
                },
            ]
            row.status = "FAILED"
            row.finished_at = now
            row.save(update_fields=["errors", "status", "finished_at"])
            changed += 1
        return changed

    def prune(self, older_than: datetime, batch_size: int) -> int:
        """Delete up to ``batch_size`` finished results that finished before ``older_than``."""
        ids = list(
            self.filter(
                status__in=("SUCCESSFUL", "FAILED"), finished_at__lt=older_than
            ).values_list("pk", flat=True)[:batch_size]
        )
        return self.filter(pk__in=ids).delete()[0] if ids else 0
