"""Outcome records: one row per run that ended, read-only (workers, the leader and cancels write
them; the leader prunes them)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from django_iq.admin.common import (
    EstimatedCountPaginator,
    ReadOnlyAdmin,
    cut_column,
    job_column,
    time_column,
)
from django_iq.admin.entries import JobFilter
from django_iq.models import Queue, RunOutcome
from django_iq.wording import duration


class QueueNameFilter(admin.SimpleListFilter):
    """Records of one queue. The choices come from the queue table, not from a ``SELECT
    DISTINCT`` over the records, which would read every row on each page load."""

    title = "queue"
    parameter_name = "queue"

    def lookups(
        self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]
    ) -> list[tuple[str, str]]:
        names = set(Queue.objects.values_list("name", flat=True))
        if self.value():
            names.add(str(self.value()))
        return [(name, name) for name in sorted(names)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        return queryset.filter(queue=value) if value else queryset


@admin.register(RunOutcome)
class RunOutcomeAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "job",
        "status",
        "attempt",
        "entry_id",
        "worker",
        "finished",
        "duration",
    )
    list_filter = ("status", QueueNameFilter, JobFilter)
    search_fields = ("=result_id", "=entry_id")
    search_help_text = "A Django Tasks result id or an entry id."
    # The primary key is the only index fit for ordering a table that can be large.
    ordering = ("-id",)
    sortable_by = ("id",)
    paginator = EstimatedCountPaginator
    list_deferred = ("args", "kwargs", "return_value", "traceback")
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER

    job = job_column("job_name", width="fill")
    worker = cut_column("worker_name", "worker", "narrow", sortable=False)
    finished = time_column("finished_at", "finished", sortable=False)

    @admin.display(description="duration")
    def duration(self, outcome: RunOutcome) -> str:
        return duration(outcome.duration_seconds)
