"""The CronJob admin: cron jobs added and edited with every input checked (one schedule of
three kinds, a registered job the arguments fit, a queue, a priority), saved through the
operations layer; the next fire times, the last run and how it ended, a job switched off;
enable, disable and run now."""

from __future__ import annotations

import inspect
from datetime import datetime, timedelta
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db.models import Exists, Field, OuterRef, QuerySet
from django.forms.fields import InvalidJSONInput
from django.http import HttpRequest
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from django_iq import audit, operations
from django_iq.admin.common import (
    IQModelAdmin,
    admin_actor,
    cut,
    cut_column,
    job_column,
    report_outcome,
    short_time,
    time_column,
)
from django_iq.bounds import MAX_ARGUMENT_DEPTH
from django_iq.conf import iq_settings
from django_iq.exceptions import InvalidJobArguments, InvalidSchedule, JobNotRegistered
from django_iq.models import CronJob, DisabledJob
from django_iq.registry import catalog, get_job
from django_iq.schedule import every_seconds_of, next_fire_time
from django_iq.serialization import validate_arguments
from django_iq.states import MAX_PRIORITY, MIN_PRIORITY, OutcomeStatus

# Fire times listed after next_run_at.
NEXT_FIRES = 3


def next_fires(cron_job: CronJob, now: datetime) -> list[datetime]:
    """``next_run_at`` followed by the ``NEXT_FIRES`` fire times after it (after ``now`` when
    the cron job has no entry yet), as many as there are; a one-off's one time until it fired;
    empty for a disabled cron job, a one-off that fired or a schedule that ended."""
    if not cron_job.is_enabled or cron_job.is_done:
        return []
    if cron_job.run_once_at is not None:
        return [cron_job.run_once_at]
    fires = [cron_job.next_run_at] if cron_job.next_run_at else []
    after = cron_job.next_run_at or now
    for _ in range(NEXT_FIRES):
        if cron_job.every_seconds is not None:
            after += timedelta(seconds=cron_job.every_seconds)
        else:
            try:
                after = next_fire_time(cron_job.schedule, cron_job.timezone, after)
            except InvalidSchedule:
                if fires:
                    break  # the schedule's last fire times: the leader ends it after them
                raise
        fires.append(after)
    return fires


class ArgumentsField(forms.JSONField):
    """A JSON field for job arguments whose text the JSON parser cannot read for its size is
    refused on the field, as other bad JSON is: text nested deeper than the parser recurses,
    or an integer of more digits than Python converts (``sys.get_int_max_str_digits``)."""

    def to_python(self, value: Any) -> Any:
        try:
            return super().to_python(value)
        except RecursionError:
            raise ValidationError(
                "The JSON is nested too deeply to read; arguments nest at most "
                f"{MAX_ARGUMENT_DEPTH} lists or dicts."
            ) from None
        except ValueError as exc:  # an integer past Python's digit limit
            raise ValidationError(f"Enter valid JSON: {exc}.") from None

    def bound_data(self, data: Any, initial: Any) -> Any:
        # The form shown again with its errors keeps the text as it was typed.
        try:
            return super().bound_data(data, initial)
        except (RecursionError, ValueError):
            return InvalidJSONInput(data)


class CronJobForm(forms.ModelForm):
    """Checks at the boundary what the leader or a worker would otherwise fail on: exactly one
    schedule, valid (by ``CronJob.clean``; the interval's duration here); a registered job;
    JSON arguments the job's signature accepts."""

    class Meta:
        model = CronJob
        fields = (
            "name",
            "schedule",
            "every_seconds",
            "run_once_at",
            "timezone",
            "job_name",
            "args",
            "kwargs",
            "queue",
            "priority",
        )
        labels = {"run_once_at": "At"}
        help_texts = {
            "run_once_at": "One time instead of a schedule: the job runs once, then "
            "the cron job is done."
        }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        seconds = self.initial.get("every_seconds")
        if "every_seconds" in self.fields and isinstance(seconds, int):
            # Stored as seconds, shown and compared as a duration.
            self.initial["every_seconds"] = timedelta(seconds=seconds)

    def clean_every_seconds(self) -> int | None:
        every: timedelta | int | None = self.cleaned_data.get("every_seconds")
        if every is None:
            return None
        if isinstance(every, int):  # the form outside the admin: seconds (CronJob.clean checks)
            return every
        try:
            return every_seconds_of(every)
        except ValueError as exc:
            raise ValidationError(str(exc)) from exc

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
            args, kwargs = cleaned["args"] or [], cleaned["kwargs"] or {}
            try:
                validate_arguments(args, kwargs)
            except InvalidJobArguments as exc:
                raise ValidationError(str(exc)) from exc
            if "job_name" in cleaned and isinstance(args, list) and isinstance(kwargs, dict):
                _check_call(cleaned["job_name"], args, kwargs)
        return cleaned


def _when(fire: datetime | None) -> str:
    """A fire time to the second, always: a schedule may fire between minutes (``every 10s``),
    and one column of times reads best in one format."""
    if fire is None:
        return "-"
    return f"{timezone.localtime(fire):%Y-%m-%d %H:%M:%S %Z}"


def _check_call(job_name: str, args: list[Any], kwargs: dict[str, Any]) -> None:
    """Raise ``ValidationError`` if the job's function cannot take ``args`` and ``kwargs``."""
    func = get_job(job_name).func
    try:
        inspect.signature(func).bind(*args, **kwargs)
    except TypeError as exc:
        raise ValidationError(
            f"{job_name} cannot be called with args {args!r} and kwargs {kwargs!r}: {exc}. "
            f"Its signature is {job_name.rsplit('.', 1)[-1]}{inspect.signature(func)}."
        ) from exc
    except ValueError:
        pass  # no signature to read (a builtin): the worker reports a bad call


@admin.register(CronJob)
class CronJobAdmin(IQModelAdmin):
    form = CronJobForm
    # The list shows the next fire time (the following ones in its title); the queue and where
    # the cron job comes from are filters, and shown with the rest on its page.
    list_display = (
        "cron_name",
        "schedule_text",
        "job",
        "status",
        "next_run",
        "last_run",
        "last_outcome_link",
    )
    list_filter = ("is_enabled", "is_declared", "queue")
    search_fields = ("name", "job_name")
    actions = ("enable_cron_jobs", "disable_cron_jobs", "run_cron_jobs_now")
    # is_enabled changes through the actions only; the rest is kept by the leader.
    state_fields = (
        "status",
        "origin",
        "fired_at_display",
        "ended",
        "next_run_at_display",
        "next_runs",
        "last_run_at_display",
        "last_outcome_link",
    )

    cron_name = cut_column("name", "name", "narrow")
    job = job_column("job_name")
    last_run = time_column("last_run_at", "last run")

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> Any:
        # The leader syncs the CRON setting it started with: say what it has not loaded yet.
        if request.method == "GET":
            for line in CronJob.objects.declared_drift(iq_settings.CRON, catalog).lines():
                messages.warning(request, line)
        return super().changelist_view(request, extra_context)

    def get_queryset(self, request: HttpRequest) -> QuerySet[CronJob]:
        # Whether each row's job is switched off, in the list's one query.
        queryset: QuerySet[CronJob] = super().get_queryset(request)
        return queryset.annotate(
            job_disabled=Exists(DisabledJob.objects.filter(job_name=OuterRef("job_name")))
        )

    def get_fields(self, request: HttpRequest, obj: CronJob | None = None) -> tuple[str, ...]:
        if obj is None:
            # Nothing to tell yet of a cron job being added: no fire times, no runs.
            return CronJobForm.Meta.fields
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
        if db_field.name in ("args", "kwargs"):
            kwargs["form_class"] = ArgumentsField
        if db_field.name == "every_seconds":
            # Stored as whole seconds, entered as a duration (CronJobForm converts it). Made
            # here, not declared on the form, so that it is left out where it is read-only.
            return forms.DurationField(
                label="Every",
                required=False,
                help_text='An interval instead of a cron expression: "00:05:00" (5 minutes), '
                '"1 00:00:00" (a day); whole seconds, at least 1.',
            )
        return super().formfield_for_dbfield(db_field, request, **kwargs)

    def save_model(
        self, request: HttpRequest, obj: CronJob, form: forms.ModelForm[CronJob], change: bool
    ) -> None:
        operations.save_cron_job(obj, form.changed_data, admin_actor(request), created=not change)

    def delete_model(self, request: HttpRequest, obj: CronJob) -> None:
        operations.delete_cron_jobs([obj], admin_actor(request))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[CronJob]) -> None:
        operations.delete_cron_jobs(queryset, admin_actor(request))

    @admin.display(description="queue", ordering="queue_id")
    def queue_name(self, cron_job: CronJob) -> SafeString | str:
        return cut(cron_job.queue_id, "narrow")

    @admin.display(description="schedule", ordering="schedule")
    def schedule_text(self, cron_job: CronJob) -> SafeString | str:
        """The schedule in words, with the time zone a cron expression is read in."""
        if cron_job.schedule and cron_job.timezone != "UTC":
            return format_html(
                '{}<br><span class="iq-muted">{}</span>',
                cut(cron_job.describe(), "narrow"),
                cut(cron_job.timezone, "narrow"),
            )
        return cut(cron_job.describe(), "narrow")

    @admin.display(description="from", ordering="is_declared")
    def origin(self, cron_job: CronJob) -> str:
        """Where the cron job comes from: ``settings`` (declared in ``DJANGO_IQ["CRON"]``, kept
        as declared by the leader) or ``admin`` (added here or by ``iq_cron``)."""
        return "settings" if cron_job.is_declared else "admin"

    @admin.display(description="next run at")
    def next_run_at_display(self, cron_job: CronJob) -> str:
        return _when(cron_job.next_run_at)

    @admin.display(description="fired at")
    def fired_at_display(self, cron_job: CronJob) -> str:
        return _when(cron_job.fired_at)

    @admin.display(description="ended")
    def ended(self, cron_job: CronJob) -> str:
        """When and why a schedule ended (it had no fire time to come), or ``-``."""
        if cron_job.ended_at is None:
            return "-"
        return f"{_when(cron_job.ended_at)}: {cron_job.end_reason}"

    @admin.display(description="last run at")
    def last_run_at_display(self, cron_job: CronJob) -> str:
        return _when(cron_job.last_run_at)

    @admin.display(description="status")
    def status(self, cron_job: CronJob) -> SafeString:
        """``enabled``, ``disabled`` or ``done`` (a one-off that fired), and whether the job it
        runs is switched off (its entries then wait, whatever the cron job says), on a line of
        its own."""
        job_disabled = getattr(cron_job, "job_disabled", None)
        if job_disabled is None:  # an object read without the list's annotation
            job_disabled = DisabledJob.objects.filter(job_name=cron_job.job_name).exists()
        state, _, job_state = cron_job.status(job_disabled).partition(", ")
        if not job_state:
            return format_html('<span class="iq-time">{}</span>', state)
        return format_html('<span class="iq-time">{},<br>{}</span>', state, job_state)

    @admin.display(description="next runs")
    def next_runs(self, cron_job: CronJob) -> SafeString | str:
        """The next fire times, each to the second."""
        fires = self._fires(cron_job)
        if isinstance(fires, str):
            return fires
        return format_html_join("", "<div>{}</div>", ((_when(fire),) for fire in fires))

    @admin.display(description="next run", ordering="next_run_at")
    def next_run(self, cron_job: CronJob) -> SafeString | str:
        """The next fire time, short; the following ones, to the second, in its title."""
        fires = self._fires(cron_job)
        if isinstance(fires, str):
            return fires
        return short_time(fires[0], "Next runs: " + ", ".join(_when(fire) for fire in fires))

    @staticmethod
    def _fires(cron_job: CronJob) -> list[datetime] | SafeString | str:
        """The next fire times, or why there are none (an ended schedule's reason, whole in
        the title)."""
        if cron_job.ended_at is not None:
            return cut(f"ended: {cron_job.end_reason}", "narrow")
        try:
            fires = next_fires(cron_job, timezone.now())
        except (ValueError, KeyError):
            return "no fire time"
        if not fires:
            return "done" if cron_job.is_done else "disabled"
        return fires

    @admin.display(description="last outcome", ordering="last_outcome")
    def last_outcome_link(self, cron_job: CronJob) -> SafeString | str:
        """How the last run ended, linked to its outcome records (a success) or its error
        records (a failure), found by the entry id the row keeps: no query per row."""
        if not cron_job.last_outcome or cron_job.last_entry_id is None:
            return "-"
        records = (
            "admin:django_iq_runoutcome_changelist"
            if cron_job.last_outcome == OutcomeStatus.SUCCEEDED
            else "admin:django_iq_entryerror_changelist"
        )
        return format_html(
            '<a href="{}?entry_id={}">{}</a>',
            reverse(records),
            cron_job.last_entry_id,
            cron_job.get_last_outcome_display(),
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
        audit.admin_log(
            admin_actor(request),
            [chosen[n] for n in outcome.done],
            "change",
            f"{verb} the cron job.",
        )
        report_outcome(self, request, outcome)

    @admin.action(description="Run selected cron jobs now", permissions=["change"])
    def run_cron_jobs_now(self, request: HttpRequest, queryset: QuerySet[CronJob]) -> None:
        chosen = {cron_job.name: cron_job for cron_job in queryset}
        outcome = operations.run_cron_now(chosen.values(), admin_actor(request))
        audit.admin_log(
            admin_actor(request),
            [chosen[n] for n in outcome.done],
            "change",
            "Made its entry pending now.",
        )
        report_outcome(self, request, outcome)
