"""The Entry and DisabledJob admins: entries listed fast on large tables, filtered by queue,
job and state (stored or inferred), and changed only through manager actions."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast
from urllib.parse import urlencode

from django.contrib import admin
from django.db.models import Q, QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

from django_iq import audit, operations, permissions
from django_iq.admin.common import (
    ActionOnlyAdmin,
    EstimatedCountPaginator,
    ReadOnlyAdmin,
    admin_actor,
    cancel_waiting,
    cut,
    job_column,
    report_outcome,
    time_column,
)
from django_iq.managers import EntryQuerySet
from django_iq.managers.entry_states import lock_held, lock_held_by_live_worker, lock_running_it
from django_iq.models import DisabledJob, Entry, GroupLock
from django_iq.progress_reports import Progress
from django_iq.registry import autodiscover, registered_jobs
from django_iq.states import (
    AWAITING_COMPUTE,
    COMPUTING,
    COUNTED_STATES,
    FAILED,
    RUNNING,
    STATE_LABELS,
    EntryState,
    entry_state_label,
    group_lock_key,
)


class JobFilter(admin.SimpleListFilter):
    """Entries of one job. The choices come from the registry and the disabled jobs, not from a
    ``SELECT DISTINCT`` over the entry table, which would read every row on each page load."""

    title = "job"
    parameter_name = "job"

    def lookups(
        self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]
    ) -> list[tuple[str, str]]:
        autodiscover()
        names = set(registered_jobs()) | set(DisabledJob.objects.values_list("job_name", flat=True))
        if self.value():
            names.add(str(self.value()))
        return [(name, name) for name in sorted(names)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        return queryset.filter(job_name=value) if value else queryset


class StateFilter(admin.SimpleListFilter):
    """Stored states plus the inferred ones, through the queryset's own state methods, named as
    ``states.STATE_LABELS`` names them for people, with the meanings every surface counts them
    by (``states``)."""

    title = "state"
    parameter_name = "state"

    def lookups(
        self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]
    ) -> list[tuple[str, str]]:
        return [(state, STATE_LABELS[state]) for state in COUNTED_STATES if state != FAILED]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        entries = cast(EntryQuerySet, queryset)  # the queryset of Entry's own manager
        states = {
            EntryState.INITIAL.value: entries.initial,
            EntryState.PENDING.value: entries.pending,
            EntryState.DISABLED.value: entries.disabled,
            EntryState.BLOCKED.value: lambda: entries.filter(state=EntryState.BLOCKED),
            COMPUTING: entries.computing,
            RUNNING: entries.running,
            AWAITING_COMPUTE: entries.awaiting_compute,
        }
        state = states.get(str(self.value()))
        return state() if state is not None else queryset


@admin.register(Entry)
class EntryAdmin(ActionOnlyAdmin):
    list_display = (
        "id",
        "job",
        "queue_name",
        "status",
        "group",
        "run_at_short",
        "attempts_display",
    )
    list_filter = ("queue", JobFilter, StateFilter)
    # The search box matches a group key exactly (through the indexed lock key) or an entry id.
    search_fields = ("=group_key",)
    search_help_text = "An exact group key, or an entry id."
    ordering = ("-id",)
    # Sorting by an unindexed column would sort the whole table on each page load.
    sortable_by = ("id",)
    paginator = EstimatedCountPaginator
    list_deferred = ("args", "kwargs")
    show_full_result_count = False
    # Facet counts would count the whole table once per filter choice.
    show_facets = admin.ShowFacets.NEVER
    actions = ("disable_jobs", "enable_jobs", "run_now", "cancel_entries", "cancel_jobs_waiting")
    fields = (
        ("queue", "job_name"),
        ("status", "lock"),
        "progress",
        ("priority", "group_key", "lock_key"),
        ("run_at", "enqueued_at", "expires_at"),
        ("attempts", "max_attempts"),
        "args",
        "kwargs",
        ("cron_job", "result_id"),
        "errors",
    )
    readonly_fields = ("status", "lock", "progress", "errors")

    def get_queryset(self, request: HttpRequest) -> QuerySet[Entry]:
        # Three EXISTS per listed row tell computing (and running) from awaiting compute and
        # from a dead worker's lock: no query per row.
        entries: QuerySet[Entry] = super().get_queryset(request)
        return entries.annotate(
            is_locked=lock_held(),
            is_locked_live=lock_held_by_live_worker(),
            is_running=lock_running_it(),
        )

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Entry], search_term: str
    ) -> tuple[QuerySet[Entry], bool]:
        term = search_term.strip()
        if not term:
            return queryset, False
        # lock_key is "g:" + group_key for grouped entries, and lock_key is indexed.
        match = Q(lock_key=group_lock_key(term))
        if term.isdigit() and len(term) < 19:
            match |= Q(pk=int(term))
        return queryset.filter(match), False

    def has_delete_permission(self, request: HttpRequest, obj: Entry | None = None) -> bool:
        # Deleting would also remove entries a worker is running; "cancel" refuses those.
        return False

    @admin.display(description="queue", ordering="queue_id")
    def queue_name(self, entry: Entry) -> SafeString | str:
        return cut(entry.queue_id, "narrow")

    @admin.display(description="state")
    def status(self, entry: Entry) -> str:
        return entry_state_label(
            entry.state,
            bool(getattr(entry, "is_locked", False)),
            bool(getattr(entry, "is_locked_live", False)),
            bool(getattr(entry, "is_running", False)),
        )

    job = job_column("job_name", width="fill")
    run_at_short = time_column("run_at", "run at", sortable=False)

    @admin.display(description="group key")
    def group(self, entry: Entry) -> SafeString | None:
        if not entry.group_key:
            return None
        url = reverse("admin:django_iq_entry_changelist", current_app=self.admin_site.name)
        return format_html(
            '<a href="{}?{}">{}</a>',
            url,
            urlencode({"q": entry.group_key}),
            cut(entry.group_key, "narrow"),
        )

    @admin.display(description="attempts")
    def attempts_display(self, entry: Entry) -> str:
        return f"{entry.attempts} of {entry.max_attempts}"

    @admin.display(description="group lock")
    def lock(self, entry: Entry) -> str:
        held = GroupLock.objects.select_related("worker").filter(key=entry.lock_key).first()
        if held is None:
            return "not locked"
        worker = held.worker.name if held.worker is not None else "no live worker (orphaned)"
        return f"held by {worker} since {held.locked_at:%Y-%m-%d %H:%M:%S %Z}"

    @admin.display(description="progress")
    def progress(self, entry: Entry) -> str:
        report = Progress.of(entry)
        if report is None:
            return "none reported"
        return report.shown(timezone.now())

    @admin.display(description="failed attempts")
    def errors(self, entry: Entry) -> SafeString:
        url = reverse("admin:django_iq_entryerror_changelist", current_app=self.admin_site.name)
        return format_html(
            '<a href="{}?{}">errors of entry {}</a>', url, urlencode({"q": entry.pk}), entry.pk
        )

    # -- actions -----------------------------------------------------------------------------

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(permissions.CANCEL)

    @staticmethod
    def _job_names(queryset: QuerySet[Entry]) -> list[str]:
        return sorted(queryset.order_by().values_list("job_name", flat=True).distinct())

    @admin.action(description="Disable the jobs of selected entries", permissions=["change"])
    def disable_jobs(self, request: HttpRequest, queryset: QuerySet[Entry]) -> None:
        outcome = operations.disable(self._job_names(queryset), admin_actor(request))
        for row in DisabledJob.objects.filter(job_name__in=outcome.done):
            audit.admin_log(
                admin_actor(request),
                [row],
                "addition",
                f"Disabled the job{outcome.notes[row.job_name]}.",
            )
        report_outcome(self, request, outcome)

    @admin.action(description="Enable the jobs of selected entries", permissions=["change"])
    def enable_jobs(self, request: HttpRequest, queryset: QuerySet[Entry]) -> None:
        enable_jobs(self, request, self._job_names(queryset))

    @admin.action(description="Run selected deferred entries now", permissions=["change"])
    def run_now(self, request: HttpRequest, queryset: QuerySet[Entry]) -> None:
        selected = list(queryset.only("pk", "job_name", "state"))
        outcome = operations.run_now([entry.pk for entry in selected], admin_actor(request))
        done = set(outcome.done)
        audit.admin_log(
            admin_actor(request),
            [e for e in selected if e.pk in done],
            "change",
            "Made pending now.",
        )
        report_outcome(self, request, outcome)

    @admin.action(
        description="Cancel every waiting entry of the selected entries' jobs",
        permissions=["cancel"],
    )
    def cancel_jobs_waiting(
        self, request: HttpRequest, queryset: QuerySet[Entry]
    ) -> TemplateResponse | None:
        """Counted first on a confirmation page; entries a worker holds are left alone."""
        return cancel_waiting(
            self,
            request,
            queryset,
            action="cancel_jobs_waiting",
            what="these jobs",
            targets={name: {"job": name} for name in self._job_names(queryset)},
        )

    @admin.action(description="Cancel selected entries", permissions=["cancel"])
    def cancel_entries(self, request: HttpRequest, queryset: QuerySet[Entry]) -> None:
        selected = list(queryset.only("pk", "job_name", "state"))
        outcome = operations.cancel([entry.pk for entry in selected], admin_actor(request))
        audit.log_cancels(admin_actor(request), selected, outcome, "in the admin")
        report_outcome(self, request, outcome)


def enable_jobs(
    model_admin: admin.ModelAdmin[Any], request: HttpRequest, names: Sequence[str]
) -> None:
    """Enable ``names`` through ``operations.enable`` and log it against each ``DisabledJob``
    row removed."""
    rows = {row.job_name: row for row in DisabledJob.objects.filter(job_name__in=list(names))}
    outcome = operations.enable(names, admin_actor(request))
    for name in outcome.done:
        audit.admin_log(
            admin_actor(request), [rows[name]], "deletion", f"Enabled the job{outcome.notes[name]}."
        )
    report_outcome(model_admin, request, outcome)


@admin.register(DisabledJob)
class DisabledJobAdmin(ReadOnlyAdmin):
    """Jobs switched off. Read-only, with one action: enable, as the entries' action does."""

    list_display = ("job_name", "disabled_at_short")
    search_fields = ("job_name",)
    ordering = ("job_name",)
    actions = ("enable_selected_jobs",)
    disabled_at_short = time_column("disabled_at", "disabled at")

    def has_enable_permission(self, request: HttpRequest) -> bool:
        # The same permission as the entries' "enable job" action: it changes entries' states.
        return request.user.has_perm(permissions.CHANGE_ENTRY)

    @admin.action(description="Enable selected jobs", permissions=["enable"])
    def enable_selected_jobs(self, request: HttpRequest, queryset: QuerySet[DisabledJob]) -> None:
        enable_jobs(self, request, sorted(queryset.values_list("job_name", flat=True)))
