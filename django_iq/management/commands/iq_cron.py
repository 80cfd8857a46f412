"""``manage.py iq_cron list | enable NAME... | disable NAME... | run-now NAME...``."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.core.serializers.json import DjangoJSONEncoder

from django_iq import operations
from django_iq.conf import iq_settings
from django_iq.exceptions import JobNotRegistered
from django_iq.management.output import format_time, render_table
from django_iq.managers.cron import declared_fields
from django_iq.models import CronJob, DisabledJob, Entry
from django_iq.registry import catalog
from django_iq.schedule import describe
from django_iq.wording import close_names


class Command(BaseCommand):
    help = "List django_iq cron jobs, enable or disable them, or run them now."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        listing = actions.add_parser(
            "list", help="List cron jobs: schedule, status, next run, last run and its outcome."
        )
        listing.add_argument("--json", action="store_true", help="Print a JSON document.")
        for action, text in (
            ("enable", "Enable cron jobs: the leader gives each its next entry."),
            ("disable", "Disable cron jobs: their waiting entry is removed by the leader."),
            ("run-now", "Make each cron job's waiting entry pending now."),
        ):
            sub = actions.add_parser(action, help=text)
            sub.add_argument("names", nargs="+", metavar="NAME", help="Cron job names.")

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"]
        if action == "list":
            self._list(as_json=options["json"])
            return
        cron_jobs = _find(list(dict.fromkeys(options["names"])))
        if action == "run-now":
            self._run_now(cron_jobs, options["verbosity"])
        else:
            self._set_enabled(cron_jobs, action == "enable", options["verbosity"])

    def _list(self, *, as_json: bool) -> None:
        cron_jobs = list(CronJob.objects.order_by("name"))
        # What DJANGO_IQ["CRON"] declares that the leader has not stored (it syncs the
        # settings it started with).
        drift = CronJob.objects.declared_drift(iq_settings.CRON, catalog)
        disabled_jobs = set(
            DisabledJob.objects.filter(job_name__in={c.job_name for c in cron_jobs}).values_list(
                "job_name", flat=True
            )
        )
        entries: dict[int, str] = dict(
            Entry.objects.filter(cron_job__isnull=False).values_list("cron_job_id", "state")
        )
        running = set(
            Entry.objects.computing()
            .filter(cron_job__isnull=False)
            .values_list("cron_job_id", flat=True)
        )
        # initial (waiting for next_run_at), pending, running, disabled, or None.
        entry_state = {c.pk: "running" if c.pk in running else entries.get(c.pk) for c in cron_jobs}
        if as_json:
            rows = [
                {
                    "name": c.name,
                    "schedule": c.schedule,
                    "every_seconds": c.every_seconds,
                    "at": c.run_once_at,
                    "timezone": c.timezone,
                    "job": c.job_name,
                    "queue": c.queue_id,
                    "priority": c.priority,
                    "is_enabled": c.is_enabled,
                    "is_declared": c.is_declared,
                    "is_done": c.is_done,
                    "job_disabled": c.job_name in disabled_jobs,
                    "entry_state": entry_state[c.pk],
                    "next_run_at": c.next_run_at,
                    "fired_at": c.fired_at,
                    "ended_at": c.ended_at,
                    "end_reason": c.end_reason or None,
                    "last_run_at": c.last_run_at,
                    "last_outcome": c.last_outcome or None,
                    "last_entry_id": c.last_entry_id,
                }
                for c in cron_jobs
            ]
            document = {"cron_jobs": rows, "settings_differ": asdict(drift)}
            self.stdout.write(json.dumps(document, cls=DjangoJSONEncoder, indent=2))
            return
        if not cron_jobs and not drift:
            self.stdout.write('No cron jobs. Declare them in DJANGO_IQ["CRON"] or in the admin.')
            return
        columns = [
            "NAME",
            "SCHEDULE",
            "TIMEZONE",
            "JOB",
            "QUEUE",
            "STATUS",
            "ENTRY",
            "NEXT RUN",
            "LAST RUN",
            "LAST OUTCOME",
        ]
        table = [
            [
                c.name,
                c.describe(),
                c.timezone,
                c.job_name,
                c.queue_id,
                c.status(c.job_name in disabled_jobs),
                entry_state[c.pk] or "-",
                f"ended: {c.end_reason}"
                if c.ended_at
                else format_time(c.next_run_at)
                if c.next_run_at
                else "-",
                format_time(c.last_run_at) if c.last_run_at else "-",
                c.last_outcome or "-",
            ]
            for c in cron_jobs
        ]
        table += [_not_loaded_row(name, iq_settings.CRON[name]) for name in drift.not_loaded]
        table.sort(key=lambda row: row[0])
        self.stdout.write(render_table(columns, table))
        for line in drift.lines():
            self.stdout.write(line)

    def _set_enabled(self, cron_jobs: list[CronJob], enabled: bool, verbosity: int) -> None:
        outcome = operations.set_cron_enabled(
            cron_jobs, enabled, operations.Actor.of_command("iq_cron")
        )
        if verbosity:
            self.stdout.write(outcome.message)

    def _run_now(self, cron_jobs: list[CronJob], verbosity: int) -> None:
        disabled = [c.name for c in cron_jobs if not c.is_enabled]
        if disabled:
            raise CommandError(
                f"Disabled cron {'job' if len(disabled) == 1 else 'jobs'} {', '.join(disabled)} "
                f"cannot run; enable first: manage.py iq_cron enable {' '.join(disabled)}"
            )
        outcome = operations.run_cron_now(cron_jobs, operations.Actor.of_command("iq_cron"))
        if verbosity:
            self.stdout.write(outcome.message)


def _not_loaded_row(name: str, spec: dict[str, Any]) -> list[str]:
    """A table row for a cron job the settings declare and the leader has not stored yet."""
    fields = declared_fields(spec)
    try:
        queue = spec.get("queue") or catalog.queue_of(spec["job"])
    except JobNotRegistered:
        queue = "-"
    described = describe(fields["schedule"], fields["every_seconds"], fields["run_once_at"])
    return [
        name,
        described,
        fields["timezone"],
        spec["job"],
        queue,
        "not loaded",
        "-",
        "-",
        "-",
        "-",
    ]


def _find(names: list[str]) -> list[CronJob]:
    """Return the cron jobs named, in order; raise CommandError naming any that is unknown."""
    found = {c.name: c for c in CronJob.objects.filter(name__in=names)}
    unknown = [name for name in names if name not in found]
    if not unknown:
        return [found[name] for name in names]
    known = list(CronJob.objects.order_by("name").values_list("name", flat=True))
    problems = []
    for name in unknown:
        if name in iq_settings.CRON:
            problems.append(
                f'{name!r} is declared in DJANGO_IQ["CRON"] but the leader has not created it '
                "yet (is manage.py runleader running?)"
            )
            continue
        close = close_names(name, known)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        problems.append(f"{name!r} is not a cron job{hint}")
    raise CommandError(f"{'; '.join(problems)}. Cron jobs: {', '.join(known) or 'none'}.")
