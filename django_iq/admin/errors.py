"""The EntryError admin: failed attempts shown readably, filtered by queue, job, exception and
outcome, and requeued one by one or all alike through the manager."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.safestring import SafeString

from django_iq import audit, operations, permissions
from django_iq.admin.common import (
    ActionOnlyAdmin,
    EstimatedCountPaginator,
    admin_actor,
    clip,
    job_column,
    report_outcome,
    time_column,
)
from django_iq.models import EntryError


class RequeuedFilter(admin.SimpleListFilter):
    title = "requeued"
    parameter_name = "requeued"

    def lookups(
        self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]
    ) -> list[tuple[str, str]]:
        return [("yes", "yes"), ("no", "no")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value in ("yes", "no"):
            return queryset.filter(requeued_at__isnull=value == "no")
        return queryset


@admin.register(EntryError)
class EntryErrorAdmin(ActionOnlyAdmin):
    list_display = (
        "failed",
        "job",
        "entry_id",
        "attempt_display",
        "is_final",
        "error",
    )
    list_display_links = ("failed", "job")
    # Job and exception choices are read with SELECT DISTINCT: the error table stays small, as
    # pruning removes rows older than ERROR_RETENTION_SECONDS.
    list_filter = ("queue", "job_name", "exception_class", "is_final", RequeuedFilter)
    search_fields = ("=entry_id",)
    search_help_text = "An entry id: every failed attempt of that entry."
    ordering = ("-failed_at",)
    sortable_by = ("failed",)
    paginator = EstimatedCountPaginator
    list_deferred = ("args", "kwargs", "traceback")
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    actions = ("requeue_errors", "requeue_matching")
    fieldsets = (
        ("Failure", {"fields": ("exception_class", "message", "traceback_display")}),
        (
            "Entry",
            {
                "fields": (
                    ("entry_id", "queue", "job_name"),
                    "args",
                    "kwargs",
                    ("priority", "group_key"),
                    ("attempt", "max_attempts", "enqueued_at"),
                )
            },
        ),
        ("Outcome", {"fields": (("worker_name", "failed_at"), ("is_final", "requeued_at"))}),
    )
    readonly_fields = ("traceback_display",)

    failed = time_column("failed_at", "failed at")
    job = job_column("job_name")

    @admin.display(description="queue", ordering="queue_id")
    def queue_name(self, error: EntryError) -> str:
        return str(error.queue_id)

    @admin.display(description="attempt")
    def attempt_display(self, error: EntryError) -> str:
        return f"{error.attempt} of {error.max_attempts}"

    @admin.display(description="error")
    def error(self, error: EntryError) -> SafeString:
        """The exception's class name and the message's first line, cut to the width the other
        columns leave; the class's dotted path and the whole message in their titles."""
        short = error.exception_class.rsplit(".", 1)[-1]
        first_line = clip(error.message.splitlines()[0]) if error.message else ""
        return format_html(
            '<span class="iq-cut iq-fill"><strong title="{}">{}{}</strong> '
            '<span title="{}">{}</span></span>',
            error.exception_class,
            short,
            ":" if first_line else "",
            clip(error.message),
            first_line,
        )

    @admin.display(description="traceback")
    def traceback_display(self, error: EntryError) -> SafeString:
        # format_html escapes the traceback: it holds whatever the job's exception said.
        return format_html('<pre style="white-space: pre-wrap">{}</pre>', error.traceback or "-")

    def delete_model(self, request: HttpRequest, obj: EntryError) -> None:
        operations.delete_errors([obj.pk], admin_actor(request))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[EntryError]) -> None:
        # Django's delete action has written the admin log and reports the count itself.
        operations.delete_errors(queryset.values_list("pk", flat=True), admin_actor(request))

    # -- actions -----------------------------------------------------------------------------

    def has_requeue_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(permissions.REQUEUE)

    @admin.action(description="Requeue selected failed entries", permissions=["requeue"])
    def requeue_errors(self, request: HttpRequest, queryset: QuerySet[EntryError]) -> None:
        selected = list(queryset)
        outcome = operations.requeue([error.pk for error in selected], admin_actor(request))
        done = set(outcome.done)
        audit.admin_log(
            admin_actor(request),
            [error for error in selected if error.pk in done],
            "change",
            "Requeued as a new pending entry.",
        )
        report_outcome(self, request, outcome)

    @admin.action(
        description="Requeue all failures of the selected errors' job and exception class",
        permissions=["requeue"],
    )
    def requeue_matching(self, request: HttpRequest, queryset: QuerySet[EntryError]) -> None:
        pairs = sorted(queryset.order_by().values_list("job_name", "exception_class").distinct())
        for job_name, exception_class in pairs:
            if not job_name or not exception_class:
                continue  # an empty value would widen the match to every job or exception
            outcome = operations.requeue_matching(
                admin_actor(request), job=job_name, exception_class=exception_class
            )
            example = queryset.filter(job_name=job_name, exception_class=exception_class).first()
            audit.admin_log(
                admin_actor(request), [example] if example else [], "change", outcome.message
            )
            report_outcome(self, request, outcome)
