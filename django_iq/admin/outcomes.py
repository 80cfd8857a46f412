"""Outcome records: one row per run that ended, read-only (workers, the leader and cancels write
them; the leader prunes them)."""

from __future__ import annotations

from django.contrib import admin

from django_iq.admin.common import EstimatedCountPaginator, ReadOnlyAdmin
from django_iq.models import RunOutcome


@admin.register(RunOutcome)
class RunOutcomeAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "job_name",
        "status",
        "queue",
        "attempt",
        "entry_id",
        "worker_name",
        "finished_at",
        "duration_seconds",
    )
    list_filter = ("status", "queue", "job_name")
    search_fields = ("=result_id", "=entry_id")
    search_help_text = "A Django Tasks result id or an entry id."
    # The primary key is the only index fit for ordering a table that can be large.
    ordering = ("-id",)
    sortable_by = ("id",)
    paginator = EstimatedCountPaginator
    list_deferred = ("args", "kwargs", "return_value", "traceback")
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
