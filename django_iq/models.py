"""The models: Queue, Entry, GroupLock, EntryError, Worker, CronJob, LeaderLease, DisabledJob,
RunOutcome, QueueMinute, QueueTotal, JobMinute, OperatorAction, UniqueKey, EntryDependency,
Batch and ApiToken."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models, router
from django.db.models import BaseConstraint, Q
from django.utils import timezone

from django_iq.bounds import EARLIEST_RUN_AT, END_REASON_MAX_CHARS, LATEST_RUN_AT
from django_iq.indexes import PartialIndex
from django_iq.managers import (
    ApiTokenManager,
    BatchManager,
    CronJobManager,
    EntryDependencyManager,
    EntryErrorManager,
    EntryManager,
    GroupLockManager,
    JobLimitManager,
    JobMinuteManager,
    LeaderLeaseManager,
    OperatorActionManager,
    QueueDepthMinuteManager,
    QueueLatencyMinuteManager,
    QueueManager,
    QueueMinuteManager,
    QueueTotalManager,
    RunOutcomeManager,
    UniqueKeyManager,
    WorkerManager,
)
from django_iq.schedule import (
    MAX_EVERY_SECONDS,
    MIN_EVERY_SECONDS,
    describe,
    validate_at,
    validate_every_seconds,
    validate_kind,
    validate_schedule,
    validate_timezone,
)
from django_iq.states import (
    MAX_PRIORITY,
    MIN_PRIORITY,
    EntryState,
    OutcomeStatus,
)


class Queue(models.Model):
    """A named stream of entries, paused or served, with a weight for the scheduler's fairness."""

    name = models.CharField(max_length=100, unique=True)
    weight = models.PositiveIntegerField(
        default=1, help_text="Queue priority: a queue of weight 2 gets twice the share of weight 1."
    )
    is_paused = models.BooleanField(default=False, help_text="A paused queue is not served.")
    max_concurrency = models.PositiveIntegerField(
        null=True, blank=True, help_text="Most entries of this queue running at once, cluster-wide."
    )
    alert_waiting_seconds = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Raise an alarm when entries of this queue have waited this many seconds and "
        "no live worker serves it or nothing started in it for as long. Empty: "
        "ALERT_WAITING_SECONDS.",
    )
    created_at = models.DateTimeField(default=timezone.now)

    objects = QueueManager()

    class Meta:
        ordering = ("name",)
        permissions = [("pause_queue", "Can pause and resume queues")]
        constraints = [
            models.CheckConstraint(condition=Q(weight__gte=1), name="iq_queue_weight_min"),
            models.CheckConstraint(
                condition=Q(max_concurrency__isnull=True) | Q(max_concurrency__gte=1),
                name="iq_queue_concurrency_min",
            ),
            models.CheckConstraint(
                condition=Q(alert_waiting_seconds__isnull=True) | Q(alert_waiting_seconds__gte=1),
                name="iq_queue_alert_min",
            ),
        ]

    def __str__(self) -> str:
        return self.name


class Entry(models.Model):
    """One call of a registered job waiting to run: deleted when it succeeds or finally fails."""

    # Not indexed on its own: iq_entry_queue_state_idx leads with the queue.
    queue = models.ForeignKey(
        Queue,
        to_field="name",
        on_delete=models.PROTECT,
        related_name="entries",
        db_column="queue",
        db_index=False,
    )
    job_name = models.CharField(max_length=200)
    args = models.JSONField(default=list, blank=True)
    kwargs = models.JSONField(default=dict, blank=True)
    priority = models.SmallIntegerField(default=0)
    state = models.CharField(max_length=8, choices=EntryState.choices, default=EntryState.PENDING)
    # NULL, not "", means "not grouped", so that no empty-string group could ever be shared.
    group_key = models.CharField(max_length=200, null=True, blank=True)  # noqa: DJ001
    # The GroupLock key covering this entry: its group key, or a key of its own when ungrouped.
    lock_key = models.CharField(max_length=200)
    run_at = models.DateTimeField(default=timezone.now)
    attempts = models.PositiveIntegerField(default=0, help_text="Attempts that ended in failure.")
    max_attempts = models.PositiveIntegerField(default=3)
    # With a database default too: rows written by hand (and by older code) need not name it.
    snoozes = models.PositiveIntegerField(
        default=0,
        db_default=0,
        help_text="Runs that raised Snooze: put back without counting an attempt.",
    )
    enqueued_at = models.DateTimeField(default=timezone.now)
    # Set on the one entry of a cron job; unique, so a cron job can never have two entries.
    cron_job = models.OneToOneField(
        "CronJob", null=True, blank=True, on_delete=models.SET_NULL, related_name="entry"
    )
    # The Django Tasks result id of an entry enqueued through the Tasks backend.
    result_id = models.CharField(max_length=32, null=True, blank=True)  # noqa: DJ001
    # Unique jobs: while an entry holds this key, enqueueing another with it returns this one.
    # NULL (no key) repeats freely; the database's unique constraint decides between racers.
    unique_key = models.CharField(max_length=200, null=True, blank=True, unique=True)
    # Seconds a run may take before JobTimeout is raised in it; None: DEFAULT_TIMEOUT_SECONDS.
    timeout_seconds = models.FloatField(null=True, blank=True)
    # Parent entries (``using(after=...)``) not ended yet; the entry is ``blocked`` until 0.
    blockers = models.PositiveIntegerField(default=0, db_default=0)
    # The Batch this entry was enqueued in (``django_iq.batch()``); NULL for most entries.
    batch_id = models.BigIntegerField(null=True, blank=True)
    # The parents named in ``using(after=...)`` (entry ids, in order), kept after they end so
    # that the job can read their return values (``django_iq.current().parents``); NULL for
    # entries enqueued without ``after``.
    parent_ids = models.JSONField(null=True, blank=True)
    # Set by ``django_iq.wait()`` on PostgreSQL: the success that deletes the entry then sends
    # NOTIFY on ENDED_CHANNEL, which wakes the waiter (no other success pays for one).
    awaited = models.BooleanField(default=False, db_default=False)
    # An entry not started by then never runs (``expires``): a worker that comes to it, or the
    # leader's expiry duty, ends it as ``expired``. NULL: no expiry.
    expires_at = models.DateTimeField(null=True, blank=True)
    # Set by ``django_iq.cancel()`` on an entry a worker held (running, or waiting in its
    # claim): the worker stops it (``JobCancelled``) or ends it before it starts.
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    # The values of the job's keys (@job(concurrency_key=..., rate_limit_key=...)) its cap and
    # rate limit count per value of; "" for a job without them.
    concurrency_key = models.CharField(max_length=200, blank=True, default="", db_default="")
    rate_limit_key = models.CharField(max_length=200, blank=True, default="", db_default="")
    # The last progress its job reported (``django_iq.set_progress``), written at most once per
    # ``PROGRESS_INTERVAL_SECONDS`` by the run (``Entry.objects.report_progress``). Floats:
    # whole counts and fractions alike. ``progress_at`` is when the job reported it; NULL until
    # the first report. A retry keeps the last attempt's report until the new one reports.
    progress_done = models.FloatField(null=True, blank=True)
    progress_total = models.FloatField(null=True, blank=True)
    progress_note = models.CharField(max_length=200, blank=True, default="", db_default="")
    progress_at = models.DateTimeField(null=True, blank=True)
    # The trace context of the code that enqueued it (W3C ``traceparent``), stored only while a
    # tracer is installed and a trace is active (django_iq/tracing.py): its runs join that trace.
    traceparent = models.CharField(max_length=55, null=True, blank=True)  # noqa: DJ001

    # Set on an entry that ``enqueue()`` returned instead of writing a new one (unique jobs).
    is_duplicate = False

    objects = EntryManager()

    class Meta:
        verbose_name_plural = "entries"
        permissions = [("cancel_entry", "Can cancel entries")]
        constraints = [
            models.CheckConstraint(
                condition=Q(priority__gte=MIN_PRIORITY) & Q(priority__lte=MAX_PRIORITY),
                name="iq_entry_priority_range",
            ),
            models.CheckConstraint(
                condition=Q(state__in=EntryState.values), name="iq_entry_state_valid"
            ),
            models.CheckConstraint(condition=Q(max_attempts__gte=1), name="iq_entry_attempts_min"),
            # What every database reads back (see bounds.py): a row written by hand with a
            # time outside is refused by the database instead of poisoning every reader.
            models.CheckConstraint(
                condition=Q(run_at__gte=EARLIEST_RUN_AT) & Q(run_at__lte=LATEST_RUN_AT),
                name="iq_entry_run_at_range",
            ),
        ]
        indexes = [
            # The claim query: ready entries of one queue by priority, then FIFO. Partial where
            # the database can (finished and deferred rows then cost the claim nothing).
            PartialIndex(
                fields=["queue", "-priority", "id"],
                where=Q(state=EntryState.PENDING),
                name="iq_entry_ready_idx",
            ),
            # Promotion of deferred entries whose run_at has come.
            PartialIndex(
                fields=["run_at"], where=Q(state=EntryState.INITIAL), name="iq_entry_due_idx"
            ),
            # The Tasks backend's get_result() of an entry still queued; plain jobs have none.
            PartialIndex(
                fields=["result_id"],
                where=Q(result_id__isnull=False),
                name="iq_entry_result_idx",
            ),
            # The claim on MariaDB, per-queue state counts and the queue's foreign key. In the
            # claim's order too, so that no plan can read a whole queue and sort it: with
            # statistics taken before a burst of enqueues, PostgreSQL expects one row and would
            # otherwise take any index on the queue and sort.
            models.Index(
                fields=["queue", "state", "-priority", "id"], name="iq_entry_queue_state_idx"
            ),
            # "Is this entry's group locked?" and the group's siblings.
            models.Index(fields=["lock_key"], name="iq_entry_lock_idx"),
            # disable(job) / enable(job), per-job counts, and the claim of a job with a cap or
            # a rate limit: its ready entries of one queue in claim order.
            models.Index(
                fields=["job_name", "state", "queue", "-priority", "id"],
                name="iq_entry_job_state_idx",
            ),
            # The leader's expiry duty: entries past their expiry, the longest expired first.
            PartialIndex(
                fields=["expires_at"],
                where=Q(expires_at__isnull=False),
                name="iq_entry_expires_idx",
            ),
            # A batch's members still waiting or running (the admin's link from a batch).
            PartialIndex(
                fields=["batch_id"], where=Q(batch_id__isnull=False), name="iq_entry_batch_idx"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.job_name} #{self.pk} ({self.state})"


class UniqueKey(models.Model):
    """A unique key enqueued with a window (``unique_for``): taken while an entry holds it, then
    until ``expires_at``, ``window`` after that entry finished; pruned once that has passed."""

    key = models.CharField(max_length=200, unique=True)
    # NULL while an entry holds the key (or held it and was cancelled, which frees it).
    expires_at = models.DateTimeField(null=True, blank=True)
    # Kept with the key by the enqueue that took it: the entry's finish adds it to the time.
    window = models.DurationField()

    objects = UniqueKeyManager()

    class Meta:
        # Pruning of keys whose window has passed, oldest first.
        indexes = [models.Index(fields=["expires_at"], name="iq_uniquekey_expires_idx")]

    def __str__(self) -> str:
        return f"unique key {self.key} (until {self.expires_at or 'its entry finishes'})"


class DisabledJob(models.Model):
    """A job switched off: its entries are ``disabled`` and none of them is claimed."""

    job_name = models.CharField(max_length=200, unique=True)
    disabled_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.job_name} (disabled)"


class EntryDependency(models.Model):
    """Entry ``child_id`` waits for entry ``parent_id`` to end (``using(after=...)``). Deleted
    when the parent ends, in the transaction that writes the parent's outcome."""

    parent_id = models.BigIntegerField(db_index=True)
    child_id = models.BigIntegerField(db_index=True)
    # on_parent_failure="run": the child runs even if this parent fails for good.
    run_on_failure = models.BooleanField(default=False)

    objects = EntryDependencyManager()

    class Meta:
        verbose_name_plural = "entry dependencies"

    def __str__(self) -> str:
        return f"entry {self.child_id} after entry {self.parent_id}"


class Batch(models.Model):
    """Entries enqueued in one ``with django_iq.batch(on_complete=...)`` block, and the entry of
    ``on_complete`` that waits for every one of them to end (see ``managers/batches.py``)."""

    on_complete = models.CharField(max_length=200)
    # Members enqueued, and those of them that ended without success (final failure, cancel,
    # ParentFailed), each added in the transaction that enqueued or ended them.
    total = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)
    # When the block was left; NULL while it is open (the callback waits for that too).
    closed_at = models.DateTimeField(null=True, blank=True)
    # When the callback first ran, every member having ended.
    completed_at = models.DateTimeField(null=True, blank=True)
    # The callback's entry: found by id when it runs, to add the counts to its arguments.
    callback_entry_id = models.BigIntegerField(null=True, blank=True, unique=True)

    objects = BatchManager()

    class Meta:
        verbose_name_plural = "batches"
        # The admin's list, newest first.
        indexes = [models.Index(fields=["created_at"], name="iq_batch_created_idx")]

    def __str__(self) -> str:
        return f"batch {self.pk} ({self.on_complete})"


class JobLimit(models.Model):
    """A job's caps and rate limit, as the workers that run it declare them (``@job``): claims of
    the job lock this row, so that they count running entries and recent starts one at a time."""

    job_name = models.CharField(max_length=200, unique=True)
    max_concurrency = models.PositiveIntegerField(null=True, blank=True)
    max_concurrency_per_node = models.PositiveIntegerField(null=True, blank=True)
    rate_count = models.PositiveIntegerField(null=True, blank=True)
    rate_period_seconds = models.FloatField(null=True, blank=True)
    # max_concurrency / the rate limit count each value of the job's key on its own.
    concurrency_keyed = models.BooleanField(default=False, db_default=False)
    rate_keyed = models.BooleanField(default=False, db_default=False)
    updated_at = models.DateTimeField(default=timezone.now)

    objects = JobLimitManager()

    class Meta:
        ordering = ("job_name",)

    def __str__(self) -> str:
        return f"limits of {self.job_name}"


class JobStart(models.Model):
    """An entry of a rate-limited job claimed at ``started_at`` (the database's clock): the
    claim counts these over the last period."""

    job_name = models.CharField(max_length=200)
    started_at = models.DateTimeField()
    # The entry's rate limit key, for a job limited per key; "" otherwise.
    rate_limit_key = models.CharField(max_length=200, blank=True, default="", db_default="")

    class Meta:
        indexes = [
            models.Index(fields=["job_name", "started_at"], name="iq_jobstart_idx"),
            # A rate limit per key counts the starts of the keys a claim reads.
            models.Index(
                fields=["job_name", "rate_limit_key", "started_at"], name="iq_jobstart_key_idx"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.job_name} at {self.started_at.isoformat()}"


class Worker(models.Model):
    """A runworker or runleader process: identity, heartbeat and current load."""

    class Role(models.TextChoices):
        WORKER = "worker", "worker"
        LEADER = "leader", "leader"

    # ``<--name or node name>:<pid>:<random part>`` (a leader's with ":leader"): unique by
    # construction, so processes of one name and pid (each PID 1 in a container) never share it.
    name = models.CharField(max_length=200, unique=True)
    role = models.CharField(max_length=8, choices=Role.choices, default=Role.WORKER)
    host = models.CharField(max_length=255)
    pid = models.PositiveIntegerField()
    queues = models.JSONField(default=list, blank=True, help_text="Queues served; empty means all.")
    # The jobs registered in the process: a worker claims entries of these only.
    job_names = models.JSONField(default=list, blank=True, db_default=[])
    processing_threads = models.PositiveIntegerField(default=0)
    busy_threads = models.PositiveIntegerField(default=0)
    cpu_percent = models.FloatField(default=0)
    memory_percent = models.FloatField(default=0)
    is_throttled = models.BooleanField(default=False)
    started_at = models.DateTimeField(default=timezone.now)
    heartbeat_at = models.DateTimeField(default=timezone.now)
    stopped_at = models.DateTimeField(null=True, blank=True)
    # False for a process that exited cleanly; True when it was found dead (silent, or seen to
    # exit by its supervisor) and marked stopped by someone else.
    died = models.BooleanField(default=False)
    # The group locks this worker held at ``held_at`` (its own clock), reported with each
    # heartbeat; recovery releases a lock its live worker has stopped reporting.
    held_lock_ids = models.JSONField(default=list, blank=True)
    held_at = models.DateTimeField(null=True, blank=True)
    # The database sessions ([session id, start]) a worker left open when it exited at once
    # with a run stuck past its timeout: their statements may still run in the server, so
    # whoever releases its locks ends them first (``WorkerManager.end_sessions``).
    sessions = models.JSONField(default=list, blank=True, db_default=[])

    objects = WorkerManager()

    class Meta:
        indexes = [models.Index(fields=["heartbeat_at"], name="iq_worker_heartbeat_idx")]

    def __str__(self) -> str:
        return f"{self.role} {self.name}"


class GroupLock(models.Model):
    """The claim on every entry sharing ``key``: while it exists, those entries run in one place."""

    key = models.CharField(max_length=200, unique=True)
    queue = models.ForeignKey(
        Queue, to_field="name", on_delete=models.CASCADE, related_name="locks", db_column="queue"
    )
    worker = models.ForeignKey(
        Worker, null=True, blank=True, on_delete=models.SET_NULL, related_name="locks"
    )
    locked_at = models.DateTimeField(default=timezone.now)
    # The first entry of the claim: the one recovery counts an attempt on if the worker dies.
    entry_id = models.BigIntegerField(null=True, blank=True)
    # The job of a claim under a cap (its entries are of that job alone); NULL otherwise.
    job_name = models.CharField(max_length=200, null=True, blank=True)  # noqa: DJ001
    # The concurrency key of a claim of a job capped per key (its first entry's): counted
    # against that key's cap while the lock lives; "" otherwise.
    concurrency_key = models.CharField(max_length=200, blank=True, default="", db_default="")

    objects = GroupLockManager()

    def __str__(self) -> str:
        return f"lock {self.key}"


class EntryError(models.Model):
    """A failed attempt: what ran, where, and why; the final one keeps enough to requeue it."""

    entry_id = models.BigIntegerField(db_index=True)
    queue = models.ForeignKey(
        Queue, to_field="name", on_delete=models.CASCADE, related_name="errors", db_column="queue"
    )
    job_name = models.CharField(max_length=200)
    args = models.JSONField(default=list, blank=True)
    kwargs = models.JSONField(default=dict, blank=True)
    priority = models.SmallIntegerField(default=0)
    group_key = models.CharField(max_length=200, null=True, blank=True)  # noqa: DJ001
    max_attempts = models.PositiveIntegerField(default=1)
    attempt = models.PositiveIntegerField()
    exception_class = models.CharField(max_length=255)
    message = models.TextField(blank=True)
    traceback = models.TextField(blank=True)
    worker_name = models.CharField(max_length=200, blank=True)
    enqueued_at = models.DateTimeField(default=timezone.now)
    failed_at = models.DateTimeField(default=timezone.now)
    # True when this attempt was the last: the entry left the queue and shows as failed.
    is_final = models.BooleanField(default=False)
    requeued_at = models.DateTimeField(null=True, blank=True)

    objects = EntryErrorManager()

    class Meta:
        ordering = ("-failed_at",)
        permissions = [("requeue_entryerror", "Can requeue failed entries")]
        indexes = [
            # Failed counts per queue and the admin's list of failures still to handle.
            models.Index(fields=["queue", "is_final", "requeued_at"], name="iq_error_failed_idx"),
            models.Index(fields=["failed_at"], name="iq_error_failed_at_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.job_name} #{self.entry_id} attempt {self.attempt}: {self.exception_class}"


# Checked by CronJob.clean() with a message naming the fault, and by the database.
SCHEDULE_CONSTRAINTS = ("iq_cron_one_schedule", "iq_cron_every_range")


class CronJob(models.Model):
    """A job run on a schedule: a cron expression, an interval (``every_seconds``) or one time
    (``run_once_at``), exactly one of them. The leader keeps one entry for it while enabled (a
    one-off gets its entry when its time comes, and is then done: ``fired_at``)."""

    name = models.CharField(max_length=200, unique=True)
    schedule = models.CharField(
        max_length=100,
        blank=True,
        help_text='A cron expression, e.g. "*/5 * * * *"; empty for an interval or a one-off.',
    )
    timezone = models.CharField(max_length=64, default="UTC")
    # Fires every this many seconds, on the grid of its first fire (no drift, no backlog).
    every_seconds = models.PositiveIntegerField(null=True, blank=True)
    # Fires once, at this time.
    run_once_at = models.DateTimeField(null=True, blank=True)
    # When a one-off fired (its entry was made), written with that entry in the leader's fenced
    # transaction: set, it never fires again.
    fired_at = models.DateTimeField(null=True, blank=True)
    # When a schedule was found to have no fire time to come (a year field that ran out, a day
    # that never comes, a row written by hand), and why: set, the cron job is done and gets no
    # entry until its schedule is changed.
    ended_at = models.DateTimeField(null=True, blank=True)
    end_reason = models.CharField(max_length=END_REASON_MAX_CHARS, blank=True)
    job_name = models.CharField(max_length=200)
    args = models.JSONField(default=list, blank=True)
    kwargs = models.JSONField(default=dict, blank=True)
    queue = models.ForeignKey(
        Queue,
        to_field="name",
        on_delete=models.PROTECT,
        related_name="cron_jobs",
        db_column="queue",
    )
    priority = models.SmallIntegerField(default=0)
    is_enabled = models.BooleanField(default=True)
    # True for cron jobs declared in DJANGO_IQ["CRON"]: the leader keeps them in step with it.
    is_declared = models.BooleanField(default=False)
    last_run_at = models.DateTimeField(null=True, blank=True)
    # How the last run ended and its entry (its RunOutcome and EntryError rows carry that id),
    # written with the run's end: the lists read them from this row, without a join.
    last_outcome = models.CharField(max_length=10, choices=OutcomeStatus.choices, blank=True)
    last_entry_id = models.BigIntegerField(null=True, blank=True)
    next_run_at = models.DateTimeField(null=True, blank=True)

    objects = CronJobManager()

    class Meta:
        ordering = ("name",)
        constraints = [
            models.CheckConstraint(
                condition=Q(priority__gte=MIN_PRIORITY) & Q(priority__lte=MAX_PRIORITY),
                name="iq_cron_priority_range",
            ),
            # Exactly one kind of schedule: a cron expression, an interval or one time.
            models.CheckConstraint(
                condition=(
                    ~Q(schedule="") & Q(every_seconds__isnull=True) & Q(run_once_at__isnull=True)
                )
                | (Q(schedule="") & Q(every_seconds__isnull=False) & Q(run_once_at__isnull=True))
                | (Q(schedule="") & Q(every_seconds__isnull=True) & Q(run_once_at__isnull=False)),
                name="iq_cron_one_schedule",
            ),
            models.CheckConstraint(
                condition=Q(every_seconds__isnull=True)
                | (
                    Q(every_seconds__gte=MIN_EVERY_SECONDS)
                    & Q(every_seconds__lte=MAX_EVERY_SECONDS)
                ),
                name="iq_cron_every_range",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.describe()})"

    def save(self, *args: Any, **kwargs: Any) -> None:
        self.validate_schedule_fields()
        super().save(*args, **kwargs)

    def get_constraints(self) -> list[tuple[type[models.Model], Sequence[BaseConstraint]]]:
        # clean() reports a broken schedule constraint naming what was given; only the database
        # needs to check these again.
        return [
            (model, [c for c in constraints if c.name not in SCHEDULE_CONSTRAINTS])
            for model, constraints in super().get_constraints()
        ]

    def describe(self) -> str:
        """The schedule in words: the cron expression, ``every 5m`` or ``once at ...``."""
        return describe(self.schedule, self.every_seconds, self.run_once_at)

    @property
    def is_done(self) -> bool:
        """A one-off that fired, or a schedule with no fire time to come: it never fires again
        (until its schedule is changed)."""
        return self.ended_at is not None or (
            self.run_once_at is not None and self.fired_at is not None
        )

    def status(self, job_disabled: bool) -> str:
        """``enabled``, ``disabled`` or ``done`` (a one-off that fired, or a schedule that ended:
        ``end_reason`` says why), followed by ``, job disabled`` when the job it runs is
        switched off (its entries then wait)."""
        state = "done" if self.is_done else "enabled" if self.is_enabled else "disabled"
        return f"{state}, job disabled" if job_disabled else state

    def validate_schedule_fields(self) -> None:
        """Raise ``ValueError`` unless the cron job has exactly one valid schedule."""
        validate_kind(self.schedule, self.every_seconds, self.run_once_at)
        if self.schedule:
            validate_schedule(self.schedule, self.timezone)
        else:
            validate_timezone(self.timezone)
        if self.every_seconds is not None:
            validate_every_seconds(self.every_seconds)
        if self.run_once_at is not None:
            validate_at(self.run_once_at)

    def clean(self) -> None:
        """Raise ``ValidationError`` on the field at fault (the form shows it there)."""
        from django.core.exceptions import NON_FIELD_ERRORS, ValidationError

        checks: list[tuple[str, Any]] = [
            (
                NON_FIELD_ERRORS,
                lambda: validate_kind(self.schedule, self.every_seconds, self.run_once_at),
            ),
            ("timezone", lambda: validate_timezone(self.timezone)),
        ]
        if self.schedule:
            checks.append(("schedule", lambda: validate_schedule(self.schedule, "UTC")))
        if self.every_seconds is not None:
            checks.append(("every_seconds", lambda: validate_every_seconds(self.every_seconds)))
        if self.run_once_at is not None:
            checks.append(("run_once_at", lambda: validate_at(self.run_once_at)))
        errors: dict[str, str] = {}
        for field, check in checks:
            try:
                check()
            except ValueError as exc:
                errors.setdefault(field, str(exc))
        if errors:
            raise ValidationError(errors)


class LeaderLease(models.Model):
    """The single leadership lease: who holds it, under which epoch, until when (database time)."""

    name = models.CharField(max_length=50, primary_key=True)
    holder = models.CharField(max_length=200, blank=True)
    # Increases with every change of holder: a leader acts only while its epoch is current.
    epoch = models.PositiveBigIntegerField(default=0)
    expires_at = models.DateTimeField(default=timezone.now)
    acquired_at = models.DateTimeField(null=True, blank=True)

    objects = LeaderLeaseManager()

    def __str__(self) -> str:
        return f"lease {self.name}: {self.holder or '-'} (epoch {self.epoch})"


class RunOutcome(models.Model):
    """One run that ended: what ran, on which worker, how long, and how it ended (its return
    value, or its exception). Written with the run's acknowledgement or failure, in the same
    transaction; kept for ``OUTCOME_RETENTION_SECONDS`` after it finished."""

    entry_id = models.BigIntegerField()
    # The Django Tasks result of the entry, for entries enqueued through the Tasks backend.
    result_id = models.CharField(max_length=32, null=True, blank=True)  # noqa: DJ001
    job_name = models.CharField(max_length=200)
    queue = models.CharField(max_length=100)
    args = models.JSONField(default=list, blank=True)
    kwargs = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=10, choices=OutcomeStatus.choices)
    attempt = models.PositiveIntegerField()
    # The job's return value (JSON); over OUTCOME_MAX_RETURN_BYTES, a marker saying so.
    return_value = models.JSONField(null=True, blank=True, encoder=DjangoJSONEncoder)
    exception_class = models.CharField(max_length=255, blank=True)
    traceback = models.TextField(blank=True)
    worker_name = models.CharField(max_length=200, blank=True)
    # None for an entry that ended without running (cancelled while it waited).
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField()
    enqueued_at = models.DateTimeField(null=True, blank=True)
    duration_seconds = models.FloatField(null=True, blank=True)

    objects = RunOutcomeManager()

    class Meta:
        ordering = ("-id",)
        indexes = [
            # A job's recent runs; pruning by age; a Tasks result's runs; an entry's runs
            # (``wait()``, a child's parents).
            models.Index(fields=["job_name", "finished_at"], name="iq_outcome_job_idx"),
            models.Index(fields=["entry_id"], name="iq_outcome_entry_idx"),
            models.Index(fields=["finished_at"], name="iq_outcome_finished_idx"),
            PartialIndex(
                fields=["result_id"],
                where=Q(result_id__isnull=False),
                name="iq_outcome_result_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.job_name} #{self.entry_id} attempt {self.attempt}: {self.status}"


class QueueMinute(models.Model):
    """Work finished per queue per minute (UTC), added to by workers with each heartbeat (and
    entries merged away, by compaction); the
    dashboard's throughput and failure charts read it. Pruned after METRICS_RETENTION_SECONDS."""

    queue = models.CharField(max_length=100)
    minute = models.DateTimeField()
    done = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)
    busy_seconds = models.FloatField(default=0)
    # Waiting entries merged away by compaction (a group of n entries folded into one adds n - 1).
    merged = models.PositiveIntegerField(default=0)

    objects = QueueMinuteManager()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["queue", "minute"], name="iq_minute_unique")]
        indexes = [models.Index(fields=["minute"], name="iq_minute_idx")]

    def __str__(self) -> str:
        return f"{self.queue} {self.minute:%Y-%m-%d %H:%M}: {self.done} done, {self.failed} failed"


class QueueTotal(models.Model):
    """Work finished per queue since the queue's first job: monotonic counters and a duration
    histogram for the Prometheus endpoint. Added to with each worker heartbeat, never pruned."""

    queue = models.CharField(max_length=100, unique=True)
    done = models.PositiveBigIntegerField(default=0)
    failed = models.PositiveBigIntegerField(default=0)
    busy_seconds = models.FloatField(default=0)
    # Cumulative histogram: jobs that took at most DURATION_BUCKETS_SECONDS[i] seconds.
    le_0_01 = models.PositiveBigIntegerField(default=0)
    le_0_1 = models.PositiveBigIntegerField(default=0)
    le_1 = models.PositiveBigIntegerField(default=0)
    le_10 = models.PositiveBigIntegerField(default=0)
    le_60 = models.PositiveBigIntegerField(default=0)
    le_600 = models.PositiveBigIntegerField(default=0)
    # Waiting entries merged away by compaction, added to in the compaction's transaction.
    merged = models.PositiveBigIntegerField(default=0)

    objects = QueueTotalManager()

    def __str__(self) -> str:
        return f"{self.queue}: {self.done} done, {self.failed} failed"


class JobMinute(models.Model):
    """Runs of a job that ended per minute (UTC) and duration bucket, and the failures among
    them (every attempt that ended without success, timeouts included): one row per bucket
    that has runs, added to by workers with each heartbeat, in the transaction that adds their
    QueueMinute counts. The last hour's per-job statistics read it (``JobMinute.objects
    .last_hour``); buckets are those of ``managers.jobstats``. Pruned after
    METRICS_RETENTION_SECONDS."""

    job_name = models.CharField(max_length=200)
    minute = models.DateTimeField()
    bucket = models.PositiveSmallIntegerField()
    runs = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)

    objects = JobMinuteManager()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["job_name", "minute", "bucket"], name="iq_job_minute_unique"
            )
        ]
        indexes = [models.Index(fields=["minute"], name="iq_job_minute_idx")]

    def __str__(self) -> str:
        return (
            f"{self.job_name} {self.minute:%Y-%m-%d %H:%M} bucket {self.bucket}: {self.runs} runs"
        )


class QueueLatencyMinute(models.Model):
    """Runs started per queue, minute (UTC) and enqueue-to-start latency bucket (the buckets of
    ``managers.jobstats``): one row per bucket that has starts, added to by workers with each
    heartbeat, in the transaction that adds their QueueMinute counts. The dashboard's latency
    chart reads it. Pruned after METRICS_RETENTION_SECONDS."""

    queue = models.CharField(max_length=100)
    minute = models.DateTimeField()
    bucket = models.PositiveSmallIntegerField()
    starts = models.PositiveIntegerField(default=0)

    objects = QueueLatencyMinuteManager()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["queue", "minute", "bucket"], name="iq_latency_minute_unique"
            )
        ]
        # The chart reads a window of minutes; pruning deletes the oldest.
        indexes = [models.Index(fields=["minute"], name="iq_latency_minute_idx")]

    def __str__(self) -> str:
        return f"{self.queue} {self.minute:%Y-%m-%d %H:%M} bucket {self.bucket}: {self.starts}"


class QueueDepthMinute(models.Model):
    """A queue's depth as the leader sampled it once in a minute (UTC): entries ready and
    waiting for a thread, running, and deferred. The first sample of a minute stays. The
    dashboard's depth chart reads it. Pruned after METRICS_RETENTION_SECONDS."""

    queue = models.CharField(max_length=100)
    minute = models.DateTimeField()
    ready = models.PositiveIntegerField(default=0)
    running = models.PositiveIntegerField(default=0)
    deferred = models.PositiveIntegerField(default=0)

    objects = QueueDepthMinuteManager()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["queue", "minute"], name="iq_depth_minute_unique")
        ]
        # The chart reads a window of minutes; pruning deletes the oldest.
        indexes = [models.Index(fields=["minute"], name="iq_depth_minute_idx")]

    def __str__(self) -> str:
        return f"{self.queue} {self.minute:%Y-%m-%d %H:%M}: {self.ready} ready"


class Dashboard(Queue):
    """The operations dashboard's row in the admin index: a proxy with no data of its own,
    whose admin page is the dashboard."""

    class Meta:
        proxy = True
        verbose_name = "dashboard"
        verbose_name_plural = "dashboard"


class OperatorAction(models.Model):
    """One action an operator took (cancel, requeue, pause, resume, disable, enable, run now, delete)
    through the admin, the API or a command: who, through which door, on what, and what came
    of it. Written by ``django_iq.operations``; kept for ``AUDIT_RETENTION_SECONDS``."""

    class Door(models.TextChoices):
        ADMIN = "admin", "admin"
        API = "api", "API"
        COMMAND = "command", "command"

    at = models.DateTimeField(default=timezone.now)
    door = models.CharField(max_length=10, choices=Door.choices)
    # The user's name (admin, API) or the operating-system user running the command.
    actor = models.CharField(max_length=200)
    # The user's primary key for the admin and the API (empty for a command).
    user_pk = models.CharField(max_length=64, blank=True)
    action = models.CharField(max_length=30)
    target = models.CharField(max_length=500)
    done = models.PositiveIntegerField(default=0)
    skipped = models.PositiveIntegerField(default=0)
    not_found = models.PositiveIntegerField(default=0)
    message = models.TextField()

    objects = OperatorActionManager()

    class Meta:
        ordering = ("-at", "-id")
        indexes = [models.Index(fields=["at"], name="iq_operatoraction_at")]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.actor} ({self.door}): {self.message}"


class ApiToken(models.Model):
    """A token a script or CI sends as ``Authorization: Bearer <token>`` to use the API (and
    the metrics) with ``user``'s permissions. Only the SHA-256 hash of the token is stored;
    made with ``ApiToken.objects.issue``, revoked through ``operations.revoke_tokens``."""

    name = models.CharField(max_length=100, help_text="What uses the token, e.g. nightly-ci.")
    # The primary key of the user the token acts as, as text: a reference, not a foreign key,
    # since the users may live in another database than django_iq's tables (DJANGO_IQ
    # ["DATABASE"]). ``user`` reads the user; a deleted user's tokens are revoked.
    user_pk = models.CharField(max_length=64, db_index=True, editable=False)
    # The token's first characters, in clear: enough to recognise it, far too few to use it.
    prefix = models.CharField(max_length=16, editable=False)
    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    # Written at most once a minute (LAST_USED_PRECISION in managers/tokens.py).
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    expires_at = models.DateTimeField(
        null=True, blank=True, help_text="Leave empty for a token that does not expire."
    )
    revoked_at = models.DateTimeField(null=True, blank=True, editable=False)
    # A new token waiting to be shown once: the token XOR a random pad its maker's session
    # holds (hex), until ``sealed_until``; empty once shown or past that time. Neither half
    # alone says anything of the token.
    sealed = models.CharField(max_length=256, blank=True, default="", editable=False)
    sealed_until = models.DateTimeField(null=True, blank=True, editable=False)

    objects = ApiTokenManager()

    class Meta:
        verbose_name = "API token"
        ordering = ("-created_at", "-id")

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def user(self) -> Any:
        """The user the token acts as (read from the users' database once), or None when that
        user is gone."""
        if "_user" not in self.__dict__:
            model = get_user_model()
            users = model._default_manager.db_manager(router.db_for_read(model))
            try:
                pk = model._meta.pk.to_python(self.user_pk)
            except ValidationError:
                pk = None
            self.__dict__["_user"] = users.filter(pk=pk).first() if pk is not None else None
        return self.__dict__["_user"]

    @user.setter
    def user(self, user: Any) -> None:
        self.user_pk = str(user.pk)
        self.__dict__["_user"] = user

    def status(self, now: Any = None) -> str:
        """``"revoked"``, ``"expired"`` or ``"active"`` at ``now`` (default: now)."""
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and self.expires_at <= (now or timezone.now()):
            return "expired"
        return "active"
