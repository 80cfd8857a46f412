"""Cron jobs: sync from settings, one entry per enabled cron job (a one-off's when its time
comes), operators' edits, run now."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db import IntegrityError, models, router, transaction
from django.db.models import Exists, F, OuterRef
from django.utils import timezone

from django_iq import signals, tracing
from django_iq.appmodels import iq
from django_iq.bounds import END_REASON_MAX_CHARS
from django_iq.conf import iq_settings
from django_iq.exceptions import InvalidJobArguments, InvalidSchedule, JobNotRegistered
from django_iq.logs import get_logger
from django_iq.options import JobCatalog
from django_iq.schedule import (
    every_seconds_of,
    next_fire_time,
    next_interval_time,
    validate_at,
    validate_declared_schedule,
)
from django_iq.states import WAITING, EntryState

if TYPE_CHECKING:
    from django_iq.models import (
        CronJob,
        Entry,
    )

# The fields a schedule is made of: changing one starts the cron job's fire times afresh.
SCHEDULE_FIELDS = ("schedule", "timezone", "every_seconds", "run_once_at")
# Fields the waiting entry is built from: changing one replaces that entry.
ENTRY_FIELDS = (*SCHEDULE_FIELDS, "job_name", "args", "kwargs", "queue", "priority")
# How the reason begins when a declared cron job's declaration is refused.
DECLARED_REFUSED = "DJANGO_IQ['CRON'] declares it with a schedule that cannot be used:"
# A schedule starting afresh: not fired, not ended, no fire time computed yet.
AFRESH = {"next_run_at": None, "fired_at": None, "ended_at": None, "end_reason": ""}

# Logged under the name operators configure for cron: django_iq.cron.
logger = get_logger("django_iq.cron")


def next_run_of(cron_job: CronJob, after: datetime) -> datetime | None:
    """The cron job's first fire time after ``after``: an interval's stays on the grid of its
    last fire (``next_run_at``); a one-off's is its time until it fired, then None.

    Raise ``InvalidSchedule`` if the schedule has no fire time to come (a row written before
    schedules were checked, or by hand): a cron expression whose year ran out or that never
    fires, a one-off time out of range.
    """
    if cron_job.run_once_at is not None:
        if cron_job.fired_at is not None:
            return None
        return validate_at(cron_job.run_once_at)
    if cron_job.every_seconds is not None:
        return next_interval_time(cron_job.next_run_at, cron_job.every_seconds, after)
    return next_fire_time(cron_job.schedule, cron_job.timezone, after)


def limit_keys_of(cron_job: CronJob, jobs: JobCatalog) -> tuple[str, str]:
    """The concurrency key and rate limit key of the cron job's call (its arguments never
    change, so every entry of it has the same). A key that cannot be taken from them is logged
    and left empty: the entry is then counted with the job's other entries without a key."""
    try:
        return jobs.limit_keys_of(cron_job.job_name, cron_job.args, cron_job.kwargs)
    except InvalidJobArguments as exc:
        logger.warning("cron job keys refused name=%s: %s", cron_job.name, exc)
        return "", ""


def declared_fields(spec: dict[str, Any]) -> dict[str, Any]:
    """The schedule fields of a ``DJANGO_IQ["CRON"]`` entry (validated by the system checks)."""
    every = spec.get("every")
    return {
        "schedule": spec.get("schedule") or "",
        "timezone": spec.get("timezone", "UTC"),
        "every_seconds": every_seconds_of(every) if every is not None else None,
        "run_once_at": spec.get("at"),
    }


def row_fields(spec: dict[str, Any], queue: str) -> dict[str, Any]:
    """The fields of a declared cron job's row, from its ``DJANGO_IQ["CRON"]`` entry."""
    return {
        **declared_fields(spec),
        "job_name": spec["job"],
        "args": list(spec.get("args", [])),
        "kwargs": dict(spec.get("kwargs", {})),
        "queue_id": queue,
        "priority": spec.get("priority", iq_settings.DEFAULT_PRIORITY),
        "is_declared": True,
    }


def _differs(row: CronJob, fields: dict[str, Any]) -> bool:
    return any(getattr(row, key) != value for key, value in fields.items())


def _was_refused(row: CronJob) -> bool:
    """Whether the row ended because its declaration was refused: it is armed again once the
    declaration is valid, even if it is declared as it was before."""
    return row.ended_at is not None and row.end_reason.startswith(DECLARED_REFUSED)


@dataclass(frozen=True)
class CronDrift:
    """Declared cron jobs (``DJANGO_IQ["CRON"]``) the stored ones do not match yet, by name."""

    # Declared, not stored: they start once a leader (re)starts with these settings.
    not_loaded: list[str]
    # Stored with another schedule, job, arguments, queue or priority than declared.
    changed: list[str]
    # Stored as declared, no longer declared: a (re)started leader removes them.
    not_declared: list[str]

    def __bool__(self) -> bool:
        return bool(self.not_loaded or self.changed or self.not_declared)

    def lines(self) -> list[str]:
        """What differs, a sentence each, saying that a leader (re)start applies it."""
        found = []
        if self.not_loaded:
            found.append(
                "The settings declare cron jobs the leader has not loaded yet: "
                f"{', '.join(self.not_loaded)}; they start once a leader (re)starts with "
                "these settings."
            )
        if self.changed:
            found.append(
                "The settings declare other schedules, jobs, arguments, queues or priorities "
                f"than the leader has stored for: {', '.join(self.changed)}; they change once "
                "a leader (re)starts with these settings."
            )
        if self.not_declared:
            found.append(
                "The leader still has cron jobs the settings no longer declare: "
                f"{', '.join(self.not_declared)}; they are removed once a leader (re)starts "
                "with these settings."
            )
        return found


class CronJobManager(models.Manager["CronJob"]):
    """Cron jobs and the one entry each enabled cron job keeps."""

    def set_enabled(self, ids: Iterable[int], enabled: bool) -> int:
        """Enable or disable cron jobs; the leader adds or removes their entry on its next pass.

        Return how many changed.
        """
        return self.filter(pk__in=list(ids)).exclude(is_enabled=enabled).update(is_enabled=enabled)

    def run_now(self, cron_job: CronJob, jobs: JobCatalog, now: datetime | None = None) -> bool:
        """Make the cron job's waiting entry ``pending`` now, creating it if it has none (a
        one-off that has not fired fires now, and is then done).

        Return False if the cron job is disabled, a one-off that already fired, or its entry
        is already pending or running.
        """
        now = now or timezone.now()
        if not cron_job.is_enabled or cron_job.is_done:
            return False
        with transaction.atomic(using=router.db_for_write(iq.Entry)):
            if not iq.Entry.objects.filter(cron_job=cron_job).exists():
                self.schedule_next(
                    cron_job,
                    now,
                    jobs.max_attempts_of(cron_job.job_name),
                    fire_now=True,
                    limit_keys=limit_keys_of(cron_job, jobs),
                )
            return (
                iq.Entry.objects.filter(cron_job=cron_job, state=EntryState.INITIAL).update(
                    state=EntryState.PENDING, run_at=now
                )
                > 0
            )

    def sync_declared(
        self, declared: dict[str, dict[str, Any]], jobs: JobCatalog, now: datetime | None = None
    ) -> tuple[int, int, dict[str, str]]:
        """Make declared cron jobs match ``declared`` (``DJANGO_IQ["CRON"]``), with queues
        defaulting to each job's own; return (created or changed, removed, refused). Whether a
        job is enabled is left to the operator. A changed schedule starts afresh (see
        ``reschedule``).

        A declared schedule that cannot be used (``manage.py check`` refuses it; a leader
        started past the checks still gets here) is refused, by name with the reason, and the
        other declared cron jobs are synced: its row, if one was stored, ends with the reason
        (its waiting entry removed) until the declaration is fixed.
        """
        now = now or timezone.now()
        changed = 0
        refused: dict[str, str] = {}
        for name, spec in declared.items():
            try:
                validate_declared_schedule(spec, now)
            except InvalidSchedule as exc:
                refused[name] = f"{DECLARED_REFUSED} {exc}"
                self._refuse_declared(name, now, refused[name])
                continue
            fields = row_fields(spec, spec.get("queue") or jobs.queue_of(spec["job"]))
            fields["queue_id"] = iq.Queue.objects.ensure(fields["queue_id"], jobs).name
            row = self.filter(name=name).first()
            if row is None:
                self.create(name=name, **fields)
                changed += 1
                continue
            was_refused = _was_refused(row)
            if was_refused or _differs(row, fields):
                schedule_changed = was_refused or any(
                    getattr(row, key) != fields[key] for key in SCHEDULE_FIELDS
                )
                for key, value in fields.items():
                    setattr(row, key, value)
                if schedule_changed:
                    _start_afresh(row)
                row.save()
                if schedule_changed:
                    iq.Entry.objects.filter(cron_job=row, state=EntryState.INITIAL).delete()
                changed += 1
        stale = self.filter(is_declared=True).exclude(name__in=list(declared))
        iq.Entry.objects.filter(cron_job__in=stale, state=EntryState.INITIAL).delete()
        removed = stale.delete()[0]
        return changed, removed, refused

    def declared_drift(self, declared: dict[str, dict[str, Any]], jobs: JobCatalog) -> CronDrift:
        """How ``declared`` (``DJANGO_IQ["CRON"]`` as this process reads it) differs from the
        declared cron jobs stored: the leader syncs its own settings, read when it started, so
        a changed ``CRON`` shows here until a leader (re)starts with it. Declarations
        ``manage.py check`` refuses are left out: the leader refuses them too."""
        stored = {row.name: row for row in self.filter(name__in=list(declared))}
        not_loaded, changed = [], []
        for name, spec in declared.items():
            if not isinstance(spec, dict) or "job" not in spec:
                continue
            try:
                validate_declared_schedule(spec)
            except InvalidSchedule:
                continue
            row = stored.get(name)
            if row is None:
                not_loaded.append(name)
                continue
            try:
                queue = spec.get("queue") or jobs.queue_of(spec["job"])
            except JobNotRegistered:
                queue = row.queue_id
            if _was_refused(row) or _differs(row, row_fields(spec, queue)):
                changed.append(name)
        not_declared = self.filter(is_declared=True).exclude(name__in=list(declared))
        return CronDrift(
            sorted(not_loaded), sorted(changed), sorted(not_declared.values_list("name", flat=True))
        )

    def _refuse_declared(self, name: str, now: datetime, reason: str) -> None:
        """End the stored row of a declared cron job whose declaration is refused, removing
        its waiting entry; a row already ended is left as it is."""
        row = self.filter(name=name, is_declared=True, ended_at__isnull=True).first()
        if row is not None:
            iq.Entry.objects.filter(cron_job=row, state=EntryState.INITIAL).delete()
            self._end(row, now, reason)

    def ensure_entries(self, now: datetime, jobs: JobCatalog) -> int:
        """Give every enabled cron job without an entry one, ``initial`` until its next fire
        time (a one-off only once its time has come); remove the waiting entry of a disabled
        one. Return entries created."""
        for cron_job in self.filter(is_enabled=False, entry__isnull=False):
            iq.Entry.objects.filter(cron_job=cron_job, state__in=WAITING).exclude(
                Exists(iq.GroupLock.objects.filter(key=OuterRef("lock_key")))
            ).delete()
        created = 0
        waiting = (
            self.filter(is_enabled=True, entry__isnull=True)
            # Done one-offs and ended schedules never fire again; future one-offs already show
            # their time.
            .exclude(run_once_at__isnull=False, fired_at__isnull=False)
            .exclude(ended_at__isnull=False)
            .exclude(run_once_at__gt=now, next_run_at=F("run_once_at"))
        )
        for cron_job in waiting:
            max_attempts = jobs.max_attempts_of(cron_job.job_name)
            keys = limit_keys_of(cron_job, jobs)
            if self.schedule_next(cron_job, now, max_attempts, limit_keys=keys):
                created += 1
        return created

    def schedule_next(
        self,
        cron_job: CronJob | int,
        now: datetime,
        max_attempts: int,
        *,
        fire_now: bool = False,
        limit_keys: tuple[str, str] = ("", ""),
    ) -> Entry | None:
        """Create the cron job's entry for its first fire time after ``now``, with
        ``max_attempts`` (its job's) and ``limit_keys`` (its concurrency key and rate limit
        key: ``limit_keys_of``).

        Fires missed while nothing ran are not replayed: the next entry is always for the next
        fire time from now, so a missed period runs once (the overdue entry), not N times. A
        one-off gets its entry only when its time has come (or ``fire_now``), marked fired in
        the same transaction; before that only ``next_run_at`` shows its time.
        """
        if isinstance(cron_job, int):
            found = self.filter(pk=cron_job).first()
            if found is None:
                return None
            cron_job = found
        if not cron_job.is_enabled or cron_job.ended_at is not None:
            return None
        try:
            run_at = next_run_of(cron_job, now)
        except InvalidSchedule as exc:
            self._end(cron_job, now, str(exc))
            return None
        if run_at is None:
            return None
        one_off = cron_job.run_once_at is not None
        if one_off and run_at > now and not fire_now:
            if cron_job.next_run_at != run_at:
                self.filter(pk=cron_job.pk).update(next_run_at=run_at)
            return None
        entry = iq.Entry(
            queue_id=cron_job.queue_id,
            job_name=cron_job.job_name,
            args=cron_job.args,
            kwargs=cron_job.kwargs,
            priority=cron_job.priority,
            state=EntryState.INITIAL,
            lock_key=f"cron:{cron_job.pk}",
            run_at=min(run_at, now) if one_off else run_at,
            max_attempts=max_attempts,
            enqueued_at=now,
            cron_job=cron_job,
            concurrency_key=limit_keys[0],
            rate_limit_key=limit_keys[1],
        )
        # Traced as an enqueue of the leader's: the entry's runs join the trace it starts.
        with tracing.enqueueing(cron_job.job_name, str(cron_job.queue_id), 1) as sending:
            entry.traceparent = sending.traceparent
            try:
                with transaction.atomic(using=router.db_for_write(iq.Entry)):
                    if one_off and not self._mark_fired(cron_job, now):
                        return None
                    entry.save(force_insert=True)
            except IntegrityError:
                return None  # it already has its entry: the unique cron_job column says so
            sending.sent([entry])
        if not one_off:
            self.filter(pk=cron_job.pk).update(next_run_at=run_at)
        signals.send(signals.entry_enqueued, iq.Entry, entry=entry)
        return entry

    def _end(self, cron_job: CronJob, now: datetime, reason: str) -> None:
        """End a cron job whose schedule has no fire time to come, saying why: it is done, as a
        one-off that fired is, and stays as a record until its schedule is changed (which
        starts it afresh) or it is deleted. Written in the caller's transaction (a worker's
        success or failure write, the leader's fence), never raised into it; logged once, by
        whoever ended it."""
        reason = reason[:END_REASON_MAX_CHARS]
        ended = self.filter(pk=cron_job.pk, ended_at__isnull=True).update(
            ended_at=now, end_reason=reason, next_run_at=None
        )
        cron_job.ended_at, cron_job.end_reason, cron_job.next_run_at = now, reason, None
        if ended:
            logger.warning("cron job ended name=%s: %s", cron_job.name, reason)

    def _mark_fired(self, cron_job: CronJob, now: datetime) -> bool:
        """Mark a one-off fired, by compare-and-set: of two writers racing (a leader and run
        now, or two leaders across a failover), only one sees its row change. The caller
        writes the entry in the same transaction (the leader's: its fence)."""
        return (
            self.filter(
                pk=cron_job.pk, fired_at__isnull=True, run_once_at=cron_job.run_once_at
            ).update(fired_at=now, next_run_at=None)
            > 0
        )

    def reschedule(
        self,
        cron_job: CronJob,
        jobs: JobCatalog,
        now: datetime | None = None,
        *,
        schedule_changed: bool = True,
    ) -> Entry | None:
        """Replace the cron job's waiting entry with one built from its current fields, after
        an edit of its schedule, time zone, job, arguments, queue or priority. A new schedule
        starts afresh: an interval one interval from now, a one-off (even one that fired) at
        its time.

        An entry already pending or running is left alone; the change applies from the next
        fire. Return the new entry, or None if none was created.
        """
        now = now or timezone.now()
        with transaction.atomic(using=router.db_for_write(iq.Entry)):
            iq.Entry.objects.filter(cron_job=cron_job, state=EntryState.INITIAL).delete()
            if schedule_changed:
                _start_afresh(cron_job)
                self.filter(pk=cron_job.pk).update(**AFRESH)
            return self.schedule_next(
                cron_job,
                now,
                jobs.max_attempts_of(cron_job.job_name),
                limit_keys=limit_keys_of(cron_job, jobs),
            )

    def save_edited(
        self, cron_job: CronJob, changed: Iterable[str], jobs: JobCatalog, *, created: bool
    ) -> list[str]:
        """Save a cron job an operator created or edited and replace its waiting entry if that
        is built from what changed. Of an edit, only the ``changed`` fields whose values differ
        from the stored row are written (the leader writes others meanwhile). Return them."""
        with transaction.atomic(using=router.db_for_write(self.model)):
            if created:
                cron_job.save(force_insert=True)
                self.reschedule(cron_job, jobs)
                return []
            stored = self.select_for_update().get(pk=cron_job.pk)
            fields = [
                field.name
                for field in self.model._meta.fields
                if field.name in set(changed)
                and getattr(stored, field.attname) != getattr(cron_job, field.attname)
            ]
            if fields:
                cron_job.save(update_fields=fields)
            if set(fields) & set(ENTRY_FIELDS):
                self.reschedule(
                    cron_job, jobs, schedule_changed=bool(set(fields) & set(SCHEDULE_FIELDS))
                )
            return fields

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


def _start_afresh(cron_job: CronJob) -> None:
    """A new schedule: an interval's grid starts again, a one-off may fire (at its new time),
    an ended schedule is read again."""
    for key, value in AFRESH.items():
        setattr(cron_job, key, value)
