"""The CronJob admin: schedules validated on save, the next fire times, enable, disable and run
now through the manager."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django import forms
from django.contrib import admin
from django.contrib.admin.models import CHANGE
from django.core.exceptions import ValidationError
from django.db.models import Field, QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.html import format_html_join
from django.utils.safestring import SafeString

from django_iq import operations
from django_iq.admin.common import IQModelAdmin, admin_actor, log_objects, report_outcome
from django_iq.exceptions import InvalidJobArguments, JobNotRegistered
from django_iq.models import CronJob
from django_iq.registry import catalog, get_job
from django_iq.schedule import next_fire_time
from django_iq.serialization import validate_arguments
from django_iq.states import MAX_PRIORITY, MIN_PRIORITY

# Fire times listed after next_run_at.
NEXT_FIRES = 3
# Fields the waiting entry is built from: changing one replaces that entry.
ENTRY_FIELDS = ("schedule", "timezone", "job_name", "args", "kwargs", "queue", "priority")


def next_fires(cron_job: CronJob, now: datetime) -> list[datetime]:
    """``next_run_at`` followed by the ``NEXT_FIRES`` fire times after it (after ``now`` when
    the cron job has no entry yet); empty for a disabled cron job."""
    if not cron_job.is_enabled:
        return []
    fires = [cron_job.next_run_at] if cron_job.next_run_at else []
    after = cron_job.next_run_at or now
    for _ in range(NEXT_FIRES):
        after = next_fire_time(cron_job.schedule, cron_job.timezone, after)
        fires.append(after)
    return fires


class CronJobForm(forms.ModelForm):
    """Checks at the boundary what the worker would otherwise fail on: the job is registered
    and the arguments are JSON a job can take. The schedule is checked by ``CronJob.clean``."""

    class Meta:
        model = CronJob
        fields = ("name", "schedule", "timezone", "job_name", "args", "kwargs", "queue", "priority")

    def clean_job_name(self) -> str:
        name: str = self.cleaned_data["job_name"]
        try:
            get_job(name)
        except JobNotRegistered as exc:
            raise ValidationError(str(exc)) from exc
        return name

    def clean(self) -> dict[str, Any]:
        cleaned: dict[str, Any] = super().clean() or {}
        if "args" in cleaned and "kwargs" in cleaned:
            try:
                validate_arguments(cleaned["args"] or [], cleaned["kwargs"] or {})
            except InvalidJobArguments as exc:
                raise ValidationError(str(exc)) from exc
        return cleaned


@admin.register(CronJob)
class CronJobAdmin(IQModelAdmin):
    form = CronJobForm
    list_display = (
        "name",
        "schedule",
        "timezone",
        "job_name",
        "queue_name",
        "is_enabled",
        "is_declared",
        "last_run_at",
        "next_runs",
    )
    list_filter = ("is_enabled", "is_declared", "queue")
    search_fields = ("name", "job_name")
    actions = ("enable_cron_jobs", "disable_cron_jobs", "run_cron_jobs_now")
    # is_enabled changes through the actions only; the rest is kept by the leader.
    state_fields = ("is_enabled", "is_declared", "last_run_at", "next_run_at", "next_runs")

    def get_fields(self, request: HttpRequest, obj: CronJob | None = None) -> tuple[str, ...]:
        return (*CronJobForm.Meta.fields, *self.state_fields)

    def get_readonly_fields(
        self, request: HttpRequest, obj: CronJob | None = None
    ) -> tuple[str, ...]:
        if obj is not None and obj.is_declared:
            # The leader rewrites declared cron jobs from DJANGO_IQ["CRON"] on every pass.
            return (*CronJobForm.Meta.fields, *self.state_fields)
        return self.state_fields

    def formfield_for_dbfield(
        self, db_field: Field[Any, Any], request: HttpRequest, **kwargs: Any
    ) -> forms.Field | None:
        if db_field.name == "priority":
            kwargs.update(min_value=MIN_PRIORITY, max_value=MAX_PRIORITY)
        return super().formfield_for_dbfield(db_field, request, **kwargs)

    def save_model(
        self, request: HttpRequest, obj: CronJob, form: forms.ModelForm[CronJob], change: bool
    ) -> None:
        if change:
            # Only what the form changed: the leader writes next_run_at and last_run_at meanwhile.
            obj.save(update_fields=form.changed_data)
        else:
            obj.save()
        if not change or set(form.changed_data) & set(ENTRY_FIELDS):
            CronJob.objects.reschedule(obj, catalog)

    def delete_model(self, request: HttpRequest, obj: CronJob) -> None:
        operations.delete_cron_jobs([obj], admin_actor(request))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[CronJob]) -> None:
        operations.delete_cron_jobs(queryset, admin_actor(request))

    @admin.display(description="queue", ordering="queue_id")
    def queue_name(self, cron_job: CronJob) -> str:
        return str(cron_job.queue_id)

    @admin.display(description="next runs")
    def next_runs(self, cron_job: CronJob) -> SafeString | str:
        try:
            fires = next_fires(cron_job, timezone.now())
        except (ValueError, KeyError):
            return "invalid schedule"
        if not fires:
            return "disabled"
        return format_html_join(
            "",
            "<div>{}</div>",
            ((f"{timezone.localtime(fire):%Y-%m-%d %H:%M %Z}",) for fire in fires),
        )

    # -- actions -----------------------------------------------------------------------------

    @admin.action(description="Enable selected cron jobs", permissions=["change"])
    def enable_cron_jobs(self, request: HttpRequest, queryset: QuerySet[CronJob]) -> None:
        self._set_enabled(request, queryset, enabled=True)

    @admin.action(description="Disable selected cron jobs", permissions=["change"])
    def disable_cron_jobs(self, request: HttpRequest, queryset: QuerySet[CronJob]) -> None:
        self._set_enabled(request, queryset, enabled=False)

    def _set_enabled(
        self, request: HttpRequest, queryset: QuerySet[CronJob], *, enabled: bool
    ) -> None:
        chosen = {cron_job.name: cron_job for cron_job in queryset}
        outcome = operations.set_cron_enabled(chosen.values(), enabled, admin_actor(request))
        verb = "Enabled" if enabled else "Disabled"
        log_objects(request, [chosen[n] for n in outcome.done], f"{verb} the cron job.", CHANGE)
        report_outcome(self, request, outcome)

    @admin.action(description="Run selected cron jobs now", permissions=["change"])
    def run_cron_jobs_now(self, request: HttpRequest, queryset: QuerySet[CronJob]) -> None:
        chosen = {cron_job.name: cron_job for cron_job in queryset}
        outcome = operations.run_cron_now(chosen.values(), admin_actor(request))
        log_objects(
            request, [chosen[n] for n in outcome.done], "Made its entry pending now.", CHANGE
        )
        report_outcome(self, request, outcome)
