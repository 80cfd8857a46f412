"""Cron jobs: sync from settings, one entry per enabled cron job, run now."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db import IntegrityError, models, router, transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from django_iq import signals
from django_iq.appmodels import iq
from django_iq.conf import iq_settings
from django_iq.options import JobCatalog
from django_iq.schedule import next_fire_time
from django_iq.states import WAITING, EntryState

if TYPE_CHECKING:
    from django_iq.models import (
        CronJob,
        Entry,
    )


class CronJobManager(models.Manager["CronJob"]):
    """Cron jobs and the one entry each enabled cron job keeps."""

    def set_enabled(self, ids: Iterable[int], enabled: bool) -> int:
        """Enable or disable cron jobs; the leader adds or removes their entry on its next pass.

        Return how many changed.
        """
        return self.filter(pk__in=list(ids)).exclude(is_enabled=enabled).update(is_enabled=enabled)

    def run_now(self, cron_job: CronJob, jobs: JobCatalog, now: datetime | None = None) -> bool:
        """Make the cron job's waiting entry ``pending`` now, creating it if it has none.

        Return False if the cron job is disabled or its entry is already pending or running.
        """
        now = now or timezone.now()
        if not cron_job.is_enabled:
            return False
        with transaction.atomic(using=router.db_for_write(iq.Entry)):
            if not iq.Entry.objects.filter(cron_job=cron_job).exists():
                self.schedule_next(cron_job, now, jobs.max_attempts_of(cron_job.job_name))
            return (
                iq.Entry.objects.filter(cron_job=cron_job, state=EntryState.INITIAL).update(
                    state=EntryState.PENDING, run_at=now
                )
                > 0
            )

    def sync_declared(
        self, declared: dict[str, dict[str, Any]], jobs: JobCatalog
    ) -> tuple[int, int]:
        """Make declared cron jobs match ``declared`` (``DJANGO_IQ["CRON"]``), with queues
        defaulting to each job's own; return (created or changed, removed). Whether a job is
        enabled is left to the operator."""
        changed = 0
        for name, spec in declared.items():
            fields = {
                "schedule": spec["schedule"],
                "timezone": spec.get("timezone", "UTC"),
                "job_name": spec["job"],
                "args": list(spec.get("args", [])),
                "kwargs": dict(spec.get("kwargs", {})),
                "queue_id": iq.Queue.objects.ensure(
                    spec.get("queue") or jobs.queue_of(spec["job"]), jobs
                ).name,
                "priority": spec.get("priority", iq_settings.DEFAULT_PRIORITY),
                "is_declared": True,
            }
            row = self.filter(name=name).first()
            if row is None:
                self.create(name=name, **fields)
                changed += 1
            elif any(getattr(row, key) != value for key, value in fields.items()):
                schedule_changed = (
                    row.schedule != fields["schedule"] or row.timezone != fields["timezone"]
                )
                for key, value in fields.items():
                    setattr(row, key, value)
                row.save()
                if schedule_changed:
                    iq.Entry.objects.filter(cron_job=row, state=EntryState.INITIAL).delete()
                changed += 1
        stale = self.filter(is_declared=True).exclude(name__in=list(declared))
        iq.Entry.objects.filter(cron_job__in=stale, state=EntryState.INITIAL).delete()
        removed = stale.delete()[0]
        return changed, removed

    def ensure_entries(self, now: datetime, jobs: JobCatalog) -> int:
        """Give every enabled cron job without an entry one, ``initial`` until its next fire
        time; remove the waiting entry of a disabled one. Return entries created."""
        for cron_job in self.filter(is_enabled=False, entry__isnull=False):
            iq.Entry.objects.filter(cron_job=cron_job, state__in=WAITING).exclude(
                Exists(iq.GroupLock.objects.filter(key=OuterRef("lock_key")))
            ).delete()
        created = 0
        for cron_job in self.filter(is_enabled=True, entry__isnull=True):
            if self.schedule_next(cron_job, now, jobs.max_attempts_of(cron_job.job_name)):
                created += 1
        return created

    def schedule_next(
        self, cron_job: CronJob | int, now: datetime, max_attempts: int
    ) -> Entry | None:
        """Create the cron job's entry for its first fire time after ``now``, with
        ``max_attempts`` (its job's).

        Fires missed while nothing ran are not replayed: the next entry is always for the next
        fire time from now, so a missed period runs once (the overdue entry), not N times.
        """
        if isinstance(cron_job, int):
            found = self.filter(pk=cron_job).first()
            if found is None:
                return None
            cron_job = found
        if not cron_job.is_enabled:
            return None
        run_at = next_fire_time(cron_job.schedule, cron_job.timezone, now)
        entry = iq.Entry(
            queue_id=cron_job.queue_id,
            job_name=cron_job.job_name,
            args=cron_job.args,
            kwargs=cron_job.kwargs,
            priority=cron_job.priority,
            state=EntryState.INITIAL,
            lock_key=f"cron:{cron_job.pk}",
            run_at=run_at,
            max_attempts=max_attempts,
            enqueued_at=now,
            cron_job=cron_job,
        )
        try:
            with transaction.atomic(using=router.db_for_write(iq.Entry)):
                entry.save(force_insert=True)
        except IntegrityError:
            return None  # it already has its entry: the unique cron_job column says so
        self.filter(pk=cron_job.pk).update(next_run_at=run_at)
        signals.send(signals.entry_enqueued, iq.Entry, entry=entry)
        return entry

    def reschedule(
        self, cron_job: CronJob, jobs: JobCatalog, now: datetime | None = None
    ) -> Entry | None:
        """Replace the cron job's waiting entry with one built from its current fields, after
        an edit of its schedule, time zone, job, arguments, queue or priority.

        An entry already pending or running is left alone; the change applies from the next
        fire. Return the new entry, or None if none was created.
        """
        now = now or timezone.now()
        with transaction.atomic(using=router.db_for_write(iq.Entry)):
            iq.Entry.objects.filter(cron_job=cron_job, state=EntryState.INITIAL).delete()
            return self.schedule_next(cron_job, now, jobs.max_attempts_of(cron_job.job_name))

    def remove(self, cron_jobs: Iterable[CronJob]) -> int:
        """Delete cron jobs and their entries not running yet; return how many were deleted.

        A running entry finishes and is not rescheduled. A cron job declared in
        ``DJANGO_IQ["CRON"]`` comes back at the leader's next pass while it stays declared.
        """
        ids = [cron_job.pk for cron_job in cron_jobs]
        with transaction.atomic(using=router.db_for_write(self.model)):
            iq.Entry.objects.filter(cron_job_id__in=ids).exclude(
                Exists(iq.GroupLock.objects.filter(key=OuterRef("lock_key")))
            ).delete()
            _, deleted = self.filter(pk__in=ids).delete()
        return deleted.get(self.model._meta.label, 0)
