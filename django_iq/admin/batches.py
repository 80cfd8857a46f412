"""Batches in the admin, read-only: each batch's members enqueued, ended, succeeded and failed,
and where its ``on_complete`` callback stands."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from django_iq.admin.common import (
    EstimatedCountPaginator,
    ReadOnlyAdmin,
    job_column,
    time_column,
)
from django_iq.models import Batch

# Members enqueued, ended, succeeded and failed, then the callback; and the batch's times.
PROGRESS = ("total", "finished", "succeeded", "failed", "callback")
TIMES = ("created_at", "closed_at", "completed_at")


@admin.register(Batch)
class BatchAdmin(ReadOnlyAdmin):
    # When the batch was closed is on its page: the list has room for its start and its end.
    list_display = ("id", "on_complete_job", *PROGRESS, "created", "completed")
    list_filter = ("on_complete",)
    search_fields = ("=id", "=callback_entry_id")
    date_hierarchy = "created_at"
    ordering = ("-created_at", "-id")
    paginator = EstimatedCountPaginator
    fields = ("on_complete", *PROGRESS, "callback_entry_id", *TIMES)
    readonly_fields = ("finished", "succeeded", "callback")

    on_complete_job = job_column("on_complete", "on complete")
    created = time_column("created_at", "created")
    completed = time_column("completed_at", "completed")

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        return Batch.objects.with_progress()

    @admin.display(description="members ended")
    def finished(self, batch: Any) -> int:
        return int(batch.total - batch.waiting)

    @admin.display(description="succeeded")
    def succeeded(self, batch: Any) -> int:
        """Members that ended without failing; all of them once every member has ended."""
        return int(batch.total - batch.waiting - batch.failed)

    @admin.display(description="callback")
    def callback(self, batch: Any) -> str:
        """Where the callback stands: waiting (for the block or for members), its entry's
        state, or, once its entry is gone, failed, finished or cancelled before it ran."""
        state = batch.callback_state
        if state is None:
            if batch.callback_failed:
                return "failed"
            return "finished" if batch.completed_at is not None else "cancelled"
        if state != "blocked":
            return str(state)
        if batch.closed_at is None:
            return "waiting: block open"
        return f"waiting for {batch.waiting} members"
