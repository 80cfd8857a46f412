"""Results of Django Tasks: status changes written in the entries' transactions."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db import models, router

from django_iq.queries import finish_results, start_result, start_results

if TYPE_CHECKING:
    from django_iq.models import Result


class ResultManager(models.Manager["Result"]):
    """Results of Django Tasks: every status change, written in the entry's transactions."""

    def record_start(self, result_id: str, worker_id: str, now: datetime) -> Result | None:
        """Mark a result RUNNING, keep its first start, append the worker to its worker_ids;
        return the row as written (None if there is none). One statement."""
        db = router.db_for_write(self.model)
        started: Result | None = start_result(db, result_id, worker_id, now)
        return started

    def record_starts(self, starts: Sequence[tuple[str, str, datetime]]) -> None:
        """``record_start`` of many ``(result id, worker id, time)``: one statement on
        PostgreSQL, in id order."""
        ordered = sorted(starts, key=lambda item: item[0])
        if start_results(self.db, ordered):
            return
        for result_id, worker_id, now in ordered:
            start_result(self.db, result_id, worker_id, now)

    def record_successes(self, done: Sequence[tuple[str, Any, datetime]]) -> None:
        """Finish results as SUCCESSFUL: ``(result id, return value, finished at)`` each, in
        one statement, in the caller's transaction."""
        if not done:
            return
        ordered = sorted(done, key=lambda item: item[0])
        if finish_results(self.db, ordered):
            return
        rows = [
            self.model(pk=result_id, status="SUCCESSFUL", return_value=value, finished_at=at)
            for result_id, value, at in ordered
        ]
        self.bulk_update(rows, ["status", "return_value", "finished_at"])

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
