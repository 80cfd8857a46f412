"""The Queue admin: counts per state, entries merged and the oldest waiting entry per queue,
pause, resume and compaction, weight, concurrency and alarm threshold edits, and the route to
the jobs' statistics over the last hour (and from the dashboard's first address to its page,
admin/dashboard.py)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.contrib.admin.views.main import ChangeList
from django.db.models import Field, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.timesince import timesince

from django_iq import audit, operations, permissions
from django_iq.admin.common import (
    LIST_CSS,
    admin_actor,
    cancel_waiting,
    cut_column,
    report_outcome,
)
from django_iq.dashboard.links import Links
from django_iq.dashboard.views import job_stats_view
from django_iq.managers import QueueStats
from django_iq.models import Queue
from django_iq.snapshot import read_snapshot
from django_iq.states import (
    AWAITING_COMPUTE,
    COMPUTING,
    FAILED,
    STATE_LABELS,
    EntryState,
)

# Attributes set on each listed Queue by QueueChangeList: its QueueStats and oldest waiting time.
STATS_ATTRIBUTE = "_iq_stats"
OLDEST_ATTRIBUTE = "_iq_oldest_waiting"
MERGED_ATTRIBUTE = "_iq_merged"


class QueueChangeList(ChangeList):
    """Reads the statistics of the listed queues once per page, not once per row or column."""

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        queues: list[Queue] = list(self.result_list)
        if not queues:
            return
        views = {view.name: view for view in read_snapshot(queues=[q.name for q in queues]).queues}
        for queue in queues:
            view = views.get(queue.name)
            setattr(queue, STATS_ATTRIBUTE, view.stats if view else None)
            setattr(queue, OLDEST_ATTRIBUTE, view.oldest_waiting_at if view else None)
            setattr(queue, MERGED_ATTRIBUTE, view.merged if view else None)


def _stats(queue: Queue) -> QueueStats | None:
    stats: QueueStats | None = getattr(queue, STATS_ATTRIBUTE, None)
    return stats


def _count_column(state: str) -> Any:
    """A list column showing ``state``'s count for a queue, linked to those entries."""

    @admin.display(description=STATE_LABELS[state])
    def column(self: QueueAdmin, queue: Queue) -> SafeString | int | None:
        stats = _stats(queue)
        if stats is None:
            return None
        # As every surface counts it, linked to the list of those entries.
        count = stats.count(state)
        if not count:
            return count
        url = Links(self.admin_site.name).entries(queue.name, state)
        return format_html('<a href="{}">{}</a>', url, count) if url else count

    return column


@admin.register(Queue)
class QueueAdmin(admin.ModelAdmin):
    list_display = (
        "queue_name",
        "paused",
        "weight",
        "max_concurrency",
        "initial_count",
        "pending_count",
        "disabled_count",
        "blocked_count",
        "computing_count",
        "awaiting_compute_count",
        "failed_count",
        "oldest_waiting",
    )
    list_editable = ("weight", "max_concurrency")
    # No filter pane: its width is the counts'; the paused column sorts paused queues first.
    # The running count (a part of computing) is on the dashboard, beside the same counts: one
    # more column here would not fit 1280 px with the sidebar open.
    # What compaction merged away is on the dashboard and each queue's page.

    class Media:
        css = LIST_CSS

    search_fields = ("name",)
    actions = ("pause_queues", "resume_queues", "compact_queues", "cancel_waiting_entries")
    fields = (
        "name",
        "weight",
        "max_concurrency",
        "alert_waiting_seconds",
        "is_paused",
        "created_at",
        "merged",
    )

    initial_count = _count_column(EntryState.INITIAL)
    pending_count = _count_column(EntryState.PENDING)
    disabled_count = _count_column(EntryState.DISABLED)
    blocked_count = _count_column(EntryState.BLOCKED)
    computing_count = _count_column(COMPUTING)
    awaiting_compute_count = _count_column(AWAITING_COMPUTE)
    failed_count = _count_column(FAILED)

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return QueueChangeList

    def get_readonly_fields(
        self, request: HttpRequest, obj: Queue | None = None
    ) -> tuple[str, ...]:
        # The name is the key entries, errors and cron jobs refer to: fixed once created.
        # is_paused changes only through the pause and resume actions.
        if obj is None:
            return ("is_paused", "created_at", "merged")
        return ("name", "is_paused", "created_at", "merged")

    def has_delete_permission(self, request: HttpRequest, obj: Queue | None = None) -> bool:
        # Entries protect their queue, and Django's confirmation page would list every error
        # and lock of the queue, unbounded. A declared queue would come back at once anyway.
        return False

    def formfield_for_dbfield(
        self, db_field: Field[Any, Any], request: HttpRequest, **kwargs: Any
    ) -> forms.Field | None:
        if db_field.name in ("weight", "max_concurrency", "alert_waiting_seconds"):
            kwargs["min_value"] = 1  # the table's check constraints say so too
        return super().formfield_for_dbfield(db_field, request, **kwargs)

    def save_model(
        self, request: HttpRequest, obj: Queue, form: forms.ModelForm[Queue], change: bool
    ) -> None:
        if not change:
            super().save_model(request, obj, form, change)
            return
        options: dict[str, Any] = {}
        if "weight" in form.changed_data:
            options["weight"] = obj.weight
        if "max_concurrency" in form.changed_data:
            options["max_concurrency"] = obj.max_concurrency
        if "alert_waiting_seconds" in form.changed_data:
            options["alert_waiting_seconds"] = obj.alert_waiting_seconds
        if options:
            Queue.objects.configure(obj.name, **options)

    queue_name = cut_column("name", "name", "narrow")

    @admin.display(description="paused", ordering="-is_paused")
    def paused(self, queue: Queue) -> SafeString | str:
        """The word paused for a paused queue, the admin's neutral "-" for a running one: the
        healthy state should not look like an error, as a red cross would."""
        return (
            format_html('<strong class="iq-paused">{}</strong>', "paused")
            if queue.is_paused
            else ""
        )

    @admin.display(description="merged")
    def merged(self, queue: Queue) -> int | None:
        """Waiting entries compaction merged away, since the queue's first."""
        if not hasattr(queue, MERGED_ATTRIBUTE):  # its page: read for this queue alone
            views = read_snapshot(queues=[queue.name]).queues if queue.pk else []
            return views[0].merged if views else None
        view_merged: int | None = getattr(queue, MERGED_ATTRIBUTE, None)
        return view_merged

    @admin.display(description="oldest waiting")
    def oldest_waiting(self, queue: Queue) -> str | None:
        oldest = getattr(queue, OLDEST_ATTRIBUTE, None)
        return timesince(oldest, timezone.now(), depth=1) if oldest is not None else None

    # -- actions -----------------------------------------------------------------------------

    def has_pause_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(permissions.PAUSE)

    @admin.action(description="Pause selected queues", permissions=["pause"])
    def pause_queues(self, request: HttpRequest, queryset: QuerySet[Queue]) -> None:
        self._set_paused(request, queryset, paused=True)

    @admin.action(description="Resume selected queues", permissions=["pause"])
    def resume_queues(self, request: HttpRequest, queryset: QuerySet[Queue]) -> None:
        self._set_paused(request, queryset, paused=False)

    def _set_paused(self, request: HttpRequest, queryset: QuerySet[Queue], *, paused: bool) -> None:
        act = operations.pause if paused else operations.resume
        queues = {queue.name: queue for queue in queryset}
        outcome = act(list(queues), admin_actor(request))
        verb = "Paused" if paused else "Resumed"
        audit.admin_log(
            admin_actor(request),
            [queues[name] for name in outcome.done],
            "change",
            f"{verb} the queue.",
        )
        report_outcome(self, request, outcome)

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(permissions.CANCEL)

    @admin.action(
        description="Cancel every waiting entry of selected queues", permissions=["cancel"]
    )
    def cancel_waiting_entries(
        self, request: HttpRequest, queryset: QuerySet[Queue]
    ) -> TemplateResponse | None:
        """Counted first on a confirmation page; entries a worker holds are left alone."""
        names = sorted(queue.name for queue in queryset)
        return cancel_waiting(
            self,
            request,
            queryset,
            action="cancel_waiting_entries",
            what="these queues",
            targets={name: {"queue": name} for name in names},
        )

    @admin.action(description="Compact waiting entries", permissions=["pause"])
    def compact_queues(self, request: HttpRequest, queryset: QuerySet[Queue]) -> None:
        """Merge the waiting entries of each group of jobs declared with ``merge``, in the
        selected queues; needs the permission to pause and resume queues."""
        queues = {queue.name: queue for queue in queryset}
        outcome = operations.compact(admin_actor(request), queues=list(queues))
        if outcome.done:
            audit.admin_log(
                admin_actor(request), list(queues.values()), "change", outcome.message[:1000]
            )
        report_outcome(self, request, outcome)

    # -- dashboard ---------------------------------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        def job_stats(request: HttpRequest) -> HttpResponse:
            return job_stats_view(request, admin_site=self.admin_site)

        def dashboard_moved(request: HttpRequest) -> HttpResponse:
            # The dashboard's first address: kept for bookmarks (and for pages still open, which
            # re-fetch it with ?partial=1), leading to where it is now.
            url = reverse(f"{self.admin_site.name}:django_iq_dashboard")
            query = request.META.get("QUERY_STRING", "")
            return HttpResponseRedirect(f"{url}?{query}" if query else url)

        # Before the default routes, whose "<path:object_id>/" would take "dashboard/".
        return [
            path(
                "dashboard/",
                self.admin_site.admin_view(dashboard_moved),
                name="django_iq_queue_dashboard",
            ),
            path("job-stats/", self.admin_site.admin_view(job_stats), name="django_iq_job_stats"),
            *super().get_urls(),
        ]
