"""Entries: enqueue, claim, promote, cancel, disable and enable (how attempts end in ``attempts.py``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING, Any

from django.db import IntegrityError, connections, models, router, transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from django_iq import signals
from django_iq.appmodels import iq
from django_iq.bounds import resolve_run_at
from django_iq.conf import iq_settings
from django_iq.dbconn import reachable
from django_iq.exceptions import InvalidJobOptions, QueueNotFound
from django_iq.managers.attempts import Failure
from django_iq.managers.batches import OpenBatch, open_batch
from django_iq.managers.common import ENQUEUE_BATCH_SIZE, atomic_retrying, lock_in_order
from django_iq.managers.compaction import EntryCompactionManager
from django_iq.managers.dependencies import PARENT_FAILED
from django_iq.managers.outcome_records import keeps_outcomes
from django_iq.options import JobCatalog, JobLimits, JobOptions
from django_iq.queries import (
    COPY_ENQUEUE_MIN_ROWS,
    claim_in_one_statement,
    enqueue_by_copy,
    enqueue_in_one_statement,
    insert_group_locks,
    lock_live_worker,
    notify_ready,
    supports_single_statement_claim,
    supports_single_statement_enqueue,
)
from django_iq.serialization import call_pair, validate_arguments
from django_iq.states import WAITING, EntryState, lock_key_for

if TYPE_CHECKING:
    from django_iq.models import Entry, Worker


# A unique entry whose key is freed and taken again between our tries is tried this often.
UNIQUE_ENQUEUE_TRIES = 5


@dataclass
class Claim:
    """Entries claimed under one group lock: they run in order, in one processing thread."""

    lock_id: int
    lock_key: str
    queue: str
    entries: list[Entry] = field(default_factory=list)


_FIELD_DEFAULTS: dict[Any, list[tuple[str, Callable[[], Any]]]] = {}


def _field_defaults(model: Any) -> list[tuple[str, Callable[[], Any]]]:
    """``(attname, default)`` of ``model``'s concrete fields, in order (found once); each
    default is called for a value of its own, as Django does."""
    defaults = _FIELD_DEFAULTS.get(model)
    if defaults is None:
        defaults = _FIELD_DEFAULTS[model] = [
            (f.attname, (lambda: None) if f.primary_key else f.get_default)
            for f in model._meta.concrete_fields
        ]
    return defaults


def _unsave(entry: Entry) -> None:
    """Make ``entry`` unsaved again: its insert was refused or rolled back."""
    entry.pk = None
    entry._state.adding, entry._state.db = True, None


def lock_held() -> Exists:
    """True for an entry whose group lock exists (whoever holds it)."""
    return Exists(iq.GroupLock.objects.filter(key=OuterRef("lock_key")))


def lock_held_by_live_worker() -> Exists:
    """True for an entry whose group lock is held by a live worker (``WorkerManager.live``)."""
    return Exists(
        iq.GroupLock.objects.filter(
            key=OuterRef("lock_key"), worker__in=iq.Worker.objects.live().values("pk")
        )
    )


def lock_running_it() -> Exists:
    """True for an entry its group lock's live worker is running (or about to run next): the
    lock's tracked entry (``GroupLock.entry_id``). The group's other pending entries wait behind
    it."""
    return Exists(
        iq.GroupLock.objects.filter(
            key=OuterRef("lock_key"),
            entry_id=OuterRef("pk"),
            worker__in=iq.Worker.objects.live().values("pk"),
        )
    )


class EntryQuerySet(models.QuerySet["Entry"]):
    def initial(self) -> EntryQuerySet:
        return self.filter(state=EntryState.INITIAL)

    def pending(self) -> EntryQuerySet:
        return self.filter(state=EntryState.PENDING)

    def disabled(self) -> EntryQuerySet:
        return self.filter(state=EntryState.DISABLED)

    def blocked(self) -> EntryQuerySet:
        """Entries waiting for their parent entries (``using(after=...)``)."""
        return self.filter(state=EntryState.BLOCKED)

    def computing(self) -> EntryQuerySet:
        """Pending entries whose group lock is held by a live worker: it has them (running,
        waiting in its prefetch, or waiting behind their group's running entry)."""
        return self.pending().filter(lock_held_by_live_worker())

    def locked_by_dead_workers(self) -> EntryQuerySet:
        """Pending entries whose group lock exists but whose worker is not live (stopped,
        declared dead, silent, or gone): neither running nor claimable until recovery
        releases the lock. None outside the moments between a death and its recovery."""
        return self.pending().filter(lock_held()).exclude(lock_held_by_live_worker())

    def awaiting_compute(self) -> EntryQuerySet:
        """Pending entries with no lock: ready, waiting for a processing thread."""
        return self.pending().filter(~lock_held())

    def running(self) -> EntryQuerySet:
        """Computing entries a live worker is running: each live lock's tracked entry (the
        ``running`` count)."""
        return self.pending().filter(lock_running_it())

    def due(self, now: datetime) -> EntryQuerySet:
        """Deferred entries whose run_at has come."""
        return self.initial().filter(run_at__lte=now)


class EntryManager(EntryCompactionManager):
    """State changes of entries, plus the queryset's state filters. The outcomes of runs
    (complete, complete_many, fail) are in ``attempts.py``, compaction in ``compaction.py``."""

    def get_queryset(self) -> EntryQuerySet:
        return EntryQuerySet(self.model, using=self._db)

    def _on(self, db: str) -> EntryQuerySet:
        return self.get_queryset().using(db)

    def initial(self) -> EntryQuerySet:
        return self.get_queryset().initial()

    def pending(self) -> EntryQuerySet:
        return self.get_queryset().pending()

    def disabled(self) -> EntryQuerySet:
        return self.get_queryset().disabled()

    def blocked(self) -> EntryQuerySet:
        return self.get_queryset().blocked()

    def computing(self) -> EntryQuerySet:
        return self.get_queryset().computing()

    def awaiting_compute(self) -> EntryQuerySet:
        return self.get_queryset().awaiting_compute()

    def locked_by_dead_workers(self) -> EntryQuerySet:
        return self.get_queryset().locked_by_dead_workers()

    def running(self) -> EntryQuerySet:
        return self.get_queryset().running()

    def due(self, now: datetime) -> EntryQuerySet:
        return self.get_queryset().due(now)

    # -- enqueue -----------------------------------------------------------------------------

    def _build(
        self,
        job_name: str,
        args: Sequence[Any],
        kwargs: dict[str, Any],
        options: JobOptions,
        now: datetime,
        run_at: datetime,
        group_key: str | None = None,
    ) -> Entry:
        """Build an unsaved entry from arguments already checked by ``validate_arguments``;
        ``group_key`` (taken from the call) replaces the options' one."""
        group_key = group_key if group_key is not None else options.group_key
        values = {
            "queue_id": options.queue_name,
            "job_name": job_name,
            "args": list(args),
            "kwargs": kwargs,
            "priority": options.effective_priority,
            "state": EntryState.INITIAL if run_at > now else EntryState.PENDING,
            "group_key": group_key,
            "lock_key": lock_key_for(group_key),
            "run_at": run_at,
            "max_attempts": options.effective_max_attempts,
            "enqueued_at": now,
            "unique_key": options.unique_key_for(job_name, args, kwargs),
            "timeout_seconds": options.timeout,
        }
        # Positional, in field order: Django's fast path (no keyword matching per field).
        model: Callable[..., Entry] = self.model
        return model(
            *[
                values[name] if name in values else default()
                for name, default in _field_defaults(self.model)
            ]
        )

    def enqueue(
        self,
        job_name: str,
        args: Sequence[Any],
        kwargs: dict[str, Any],
        options: JobOptions,
        *,
        jobs: JobCatalog | None = None,
    ) -> Entry:
        """Validate and insert one entry; raise before writing anything if input is bad.

        Inside ``transaction.atomic()`` the entry is invisible to workers until commit.
        """
        (entry,) = self.enqueue_many(job_name, [(args, kwargs)], options, jobs=jobs)
        return entry

    def enqueue_many(
        self,
        job_name: str,
        calls: Iterable[tuple[Sequence[Any], dict[str, Any]]],
        options: JobOptions,
        *,
        jobs: JobCatalog | None = None,
        result_ids: Sequence[str] = (),
        group_keys: Sequence[str | None] = (),
    ) -> list[Entry]:
        """Validate every call first, then insert them in batches of 1,000, in one transaction.

        The queue must exist or be declared (in settings, or by one of ``jobs``: the registry
        passes itself). ``result_ids``, one per call, are the entries' Django Tasks result ids
        (the Tasks backend). ``group_keys``, one per call, are the group keys taken
        from the calls (``@job(group_by=...)``), in place of the options' one.

        On PostgreSQL a batch is one statement (see ``queries.enqueue_in_one_statement``): a
        single enqueue costs one round trip, and each pending entry notifies the workers
        listening on its queue when the transaction commits.
        """
        now = timezone.now()
        db = router.db_for_write(self.model)
        # Every call is validated before anything is written: a refused enqueue writes nothing.
        validated = [
            validate_arguments(*call_pair(index, call)) for index, call in enumerate(calls)
        ]
        run_at = resolve_run_at(options.run_at, now)
        keys = list(group_keys) or [None] * len(validated)
        entries = [
            self._build(job_name, args, kwargs, options, now, run_at, key)
            for (args, kwargs), key in zip(validated, keys, strict=True)
        ]
        for entry, result_id in zip(entries, result_ids, strict=False):
            entry.result_id = result_id
        if not entries:
            return []
        batch = self._batch_of(db, entries)
        join = partial(iq.Batch.objects.add_members, batch) if batch is not None else None
        if any(entry.unique_key is not None for entry in entries):
            with reachable(db, "nothing was enqueued"), self._batch_transaction(db, batch):
                entries = [
                    self._insert_unique(
                        db, job_name, options.queue_name, entry, jobs, options.unique_for
                    )
                    for entry in entries
                ]
                if join is not None:
                    # A duplicate is an entry enqueued before: it does not join the batch.
                    join([entry for entry in entries if not entry.is_duplicate])
            for entry in entries:
                if not entry.is_duplicate:
                    signals.send(signals.entry_enqueued, self.model, entry=entry)
            return entries
        with reachable(db, "nothing was enqueued"), self._batch_transaction(db, batch):
            if options.after is not None:
                self._insert_after(db, job_name, options, entries, jobs, join)
            else:
                if supports_single_statement_enqueue(db):
                    self._insert_in_statements(db, job_name, options.queue_name, entries, jobs)
                else:
                    self._insert_with_orm(db, job_name, options.queue_name, entries, jobs)
                if join is not None:
                    join(entries)
        for entry in entries:
            signals.send(signals.entry_enqueued, self.model, entry=entry)
        return entries

    def _batch_of(self, db: str, entries: Sequence[Entry]) -> OpenBatch | None:
        """The batch whose block is open here (``django_iq.batch()``), its id set on the
        ``entries`` about to be written; None outside a batch's block."""
        batch = open_batch()
        if batch is None:
            return None
        if batch.using != db:
            raise InvalidJobOptions(
                f"Entries written to database {db!r} cannot join batch {batch.pk}, whose "
                f"entries are in {batch.using!r}; enqueue them outside the batch's block."
            )
        for entry in entries:
            entry.batch_id = batch.pk
        return batch

    def _batch_transaction(self, db: str, batch: OpenBatch | None) -> AbstractContextManager[Any]:
        """A batch's members are written with their links to its callback, all or nothing."""
        return transaction.atomic(using=db) if batch is not None else nullcontext()

    def enqueue_blocked(
        self,
        db: str,
        job_name: str,
        kwargs: dict[str, Any],
        options: JobOptions,
        *,
        jobs: JobCatalog | None = None,
    ) -> Entry:
        """Insert one entry of ``job_name`` (``kwargs`` are checked here) ``blocked`` by one
        blocker that is no entry (a batch's open block; ``EntryDependencyManager.release``
        takes it away), in the caller's transaction."""
        now = timezone.now()
        args, checked = validate_arguments((), kwargs)
        entry = self._build(
            job_name, args, checked, options, now, resolve_run_at(options.run_at, now)
        )
        entry.state, entry.blockers = EntryState.BLOCKED, 1
        self._insert_with_orm(db, job_name, options.queue_name, [entry], jobs)
        signals.send(signals.entry_enqueued, self.model, entry=entry)
        return entry

    def _insert_in_statements(
        self,
        db: str,
        job_name: str,
        queue: str,
        entries: list[Entry],
        jobs: JobCatalog | None,
    ) -> None:
        size = ENQUEUE_BATCH_SIZE

        def insert(start: int) -> bool:
            batch = entries[start : start + size]
            rows = enqueue_in_one_statement(db, queue, job_name, batch)
            return took(batch, rows)

        def took(batch: list[Entry], rows: list[tuple[int, str]] | None) -> bool:
            if rows is None:
                return False
            for entry, (pk, state) in zip(batch, rows, strict=True):
                entry.pk, entry.state = pk, state
                entry._state.adding, entry._state.db = False, db
            return True

        def insert_all() -> bool:
            if len(entries) <= size:
                return insert(0)
            if len(entries) >= COPY_ENQUEUE_MIN_ROWS:
                with transaction.atomic(using=db):
                    return took(entries, enqueue_by_copy(db, queue, job_name, entries))
            with transaction.atomic(using=db):
                for start in range(0, len(entries), size):
                    if not insert(start):
                        return False
            return True

        if not insert_all():
            # The queue has no row yet: create it if it is declared (or refuse), then insert.
            iq.Queue.objects.db_manager(db).ensure(queue, jobs)
            if not insert_all():
                raise QueueNotFound(f"Queue {queue!r} was deleted while entries were enqueued.")

    def _insert_unique(
        self,
        db: str,
        job_name: str,
        queue: str,
        entry: Entry,
        jobs: JobCatalog | None,
        window: timedelta | None = None,
    ) -> Entry:
        """Insert ``entry`` unless an entry holding its unique key exists; return the one
        written, or the one that was there (``is_duplicate``). The database's unique constraint
        decides between concurrent callers; a key freed meanwhile (its entry finished) is
        tried again.

        With a ``window`` (``unique_for``), the key also stays taken for that long after its
        entry finished: ``entry`` then comes back unsaved (pk None) as the duplicate.
        """
        write = partial(self._write_unless_taken, db, job_name, queue, entry, jobs)
        for _ in range(UNIQUE_ENQUEUE_TRIES):
            written = (
                write() if window is None else self._write_taking_key(db, entry, window, write)
            )
            if written is None:
                entry.is_duplicate = True
                return entry
            if written:
                return entry
            existing = self._holding(db, str(entry.unique_key))
            if existing is not None:
                existing.is_duplicate = True
                return existing
            # Neither written nor taken: the queue has no row yet (create it if it is
            # declared, or refuse), or the entry holding the key finished meanwhile.
            iq.Queue.objects.db_manager(db).ensure(queue, jobs)
        raise QueueNotFound(f"Queue {queue!r} was deleted while an entry was enqueued.")

    def _write_unless_taken(
        self, db: str, job_name: str, queue: str, entry: Entry, jobs: JobCatalog | None
    ) -> bool:
        """Write ``entry`` unless its unique key is taken (or, on PostgreSQL, its queue has no
        row); return whether it was written."""
        if not supports_single_statement_enqueue(db):
            return self._save_unless_taken(db, job_name, queue, entry, jobs)
        rows = enqueue_in_one_statement(db, queue, job_name, [entry], unique=True)
        if not rows:
            return False
        ((entry.pk, entry.state),) = rows
        entry._state.adding, entry._state.db = False, db
        return True

    def _write_taking_key(
        self, db: str, entry: Entry, window: timedelta, write: Callable[[], bool]
    ) -> bool | None:
        """``write()`` ``entry`` and take its key's row for ``window``, in one transaction;
        return None, with nothing written, while the key's window runs, else what ``write``
        returned.

        The entry comes first, then the key's row, the order in which a finish removes an entry
        and starts its window: an enqueue waiting on a finishing entry's key (the unique
        constraint) goes on once the window is committed, and then finds it.
        """
        keys = iq.UniqueKey.objects.db_manager(db)
        key = str(entry.unique_key)

        def write_and_take() -> bool | None:
            _unsave(entry)
            # A plain read first: inside a running window nothing is written at all.
            if keys.window_running(key):
                return None
            if not write():
                return False
            if keys.take(key, window):
                return True
            transaction.set_rollback(True, using=db)
            return None

        # Run again if it loses a deadlock: on MariaDB, inserts of one key waiting for the
        # delete of the entry that held it (or for an insert rolled back here) take shared
        # locks on it and then wait on each other; the losers, run again, find the window.
        written = atomic_retrying(db, write_and_take, "enqueue")
        if written is None:
            _unsave(entry)
        return written

    def _save_unless_taken(
        self, db: str, job_name: str, queue: str, entry: Entry, jobs: JobCatalog | None
    ) -> bool:
        iq.Queue.objects.db_manager(db).ensure(queue, jobs)
        if iq.DisabledJob.objects.using(db).filter(job_name=job_name).exists():
            entry.state = EntryState.DISABLED
        try:
            with transaction.atomic(using=db):
                entry.save(force_insert=True, using=db)
        except IntegrityError:
            _unsave(entry)
            return False
        return True

    def _holding(self, db: str, unique_key: str) -> Entry | None:
        """The entry holding ``unique_key``, as committed now. Inside a transaction on MariaDB
        set to repeatable read (Django's default there is read committed) a plain read sees the
        transaction's snapshot, which may predate the entry that refused ours: a locking read
        sees past it (its row lock ends with the caller's transaction)."""
        rows = self._on(db).filter(unique_key=unique_key)
        if connections[db].vendor != "mysql" or not connections[db].in_atomic_block:
            return rows.first()
        return rows.select_for_update().first()

    def _insert_after(
        self,
        db: str,
        job_name: str,
        options: JobOptions,
        entries: list[Entry],
        jobs: JobCatalog | None,
        join: Callable[[list[Entry]], None] | None = None,
    ) -> None:
        """Insert ``entries`` waiting for their parents (``options.after``), with the edges, in
        one transaction. A parent that had already failed for good ends them at once as final
        ``ParentFailed`` failures, unless ``on_parent_failure="run"``. ``join`` (a batch's)
        takes the entries as soon as they are written, before any of them can end."""
        run_anyway = options.on_parent_failure == "run"

        def insert() -> None:
            self._insert_with_orm(db, job_name, options.queue_name, entries, jobs)
            if join is not None:
                join(entries)

        def write() -> None:
            failed = iq.EntryDependency.objects.attach(
                db, entries, options.after or (), run_anyway, insert
            )
            if failed and not run_anyway:
                now = timezone.now()
                failure = Failure(
                    exception_class=PARENT_FAILED,
                    message=f"Parent entry {failed[0]} had failed for good before this entry "
                    "was enqueued with using(after=...).",
                    final=True,
                    ran=False,
                )
                for entry in entries:
                    self.end_attempt(entry, failure, now=now, using=db, jobs=jobs)

        with transaction.atomic(using=db):
            write()

    def _insert_with_orm(
        self,
        db: str,
        job_name: str,
        queue: str,
        entries: list[Entry],
        jobs: JobCatalog | None,
    ) -> None:
        iq.Queue.objects.db_manager(db).ensure(queue, jobs)
        if iq.DisabledJob.objects.using(db).filter(job_name=job_name).exists():
            for entry in entries:
                entry.state = EntryState.DISABLED
        self._on(db).bulk_create(entries, batch_size=ENQUEUE_BATCH_SIZE)

    # -- claim -------------------------------------------------------------------------------

    def claim(
        self,
        worker: Worker | None,
        limit: int,
        queue: str,
        *,
        is_capped: bool | None = None,
        job_names: Sequence[str] | None = None,
        limited: tuple[str, JobLimits] | None = None,
    ) -> list[Claim]:
        """Claim up to ``limit`` ready entries of ``queue`` for ``worker`` by creating group locks.

        Entries come by priority (highest first), then FIFO. Each claim holds one lock; entries
        sharing a lock key selected together run in the same claim. One transaction: the entries
        are read ``FOR UPDATE SKIP LOCKED`` (SQLite serializes writers instead), then the locks
        are inserted; a key another worker locked meanwhile is skipped, so no entry is claimed
        twice. Paused queues and disabled jobs yield nothing.

        ``is_capped=False`` (the scheduler knows the queue has no ``max_concurrency``) lets
        PostgreSQL claim in a single statement, one round trip; the statement re-checks that
        the queue is neither paused nor capped.

        A claim for ``worker`` holds its row with a shared lock and claims nothing if the
        worker is stopped (declared dead) or silent past ``WORKER_SILENT_AFTER_SECONDS``: no
        lock is ever taken under a dead worker's row. Each lock's ``locked_at`` is the
        database's clock once the claim holds every row lock it waited for.

        ``job_names`` (a worker's registered jobs) limits the claim to entries of those jobs:
        an entry no worker knows is never attempted, it waits.

        ``limited=(job name, its limits as registered here)`` claims entries of that one job
        under its caps and rate limit (``JobLimit``): the job's row is locked, so claims of the
        job count its running claims and recent starts one at a time, on every database; each
        lock records the job. Limited jobs must be left out of ``job_names`` of other claims.
        """
        db = router.db_for_write(self.model)
        worker_id = worker.pk if worker is not None else None
        silent_after = iq_settings.WORKER_SILENT_AFTER_SECONDS
        if is_capped is False and limited is None and supports_single_statement_claim(db):
            claims: dict[str, Claim] = {}
            for entry, lock_id in claim_in_one_statement(
                db, queue, worker_id, limit, silent_after, job_names
            ):
                claim = claims.setdefault(entry.lock_key, Claim(lock_id, entry.lock_key, queue))
                claim.entries.append(entry)
            return list(claims.values())
        with transaction.atomic(using=db):
            queue_row = (
                iq.Queue.objects.using(db)
                .filter(name=queue)
                .values("is_paused", "max_concurrency")
                .first()
            )
            if queue_row is None or queue_row["is_paused"]:
                return []
            if queue_row["max_concurrency"]:
                # Serialize claimers of a capped queue so the cap holds cluster-wide. A row lock
                # does not block readers: queues stay readable at all times.
                iq.Queue.objects.using(db).select_for_update().filter(name=queue).values_list(
                    "pk"
                ).first()
                running = iq.GroupLock.objects.using(db).filter(queue_id=queue).count()
                limit = min(limit, queue_row["max_concurrency"] - running)
                if limit <= 0:
                    return []
            rated = False  # a rate-limited job's claims record their starts
            if limited is not None:
                # After the queue row, like every claim of a capped queue: one lock order.
                node = worker.host if worker is not None else None
                room, rated = iq.JobLimit.objects.room(db, limited[0], node, limited[1])
                limit = min(limit, room)
                if limit <= 0:
                    return []
            # After the queue row: a claim waiting for a capped queue does not hold its
            # worker's row meanwhile (which would hold up the worker's heartbeat).
            if worker_id is not None and not lock_live_worker(db, worker_id, silent_after):
                return []
            ready = self._on(db).filter(state=EntryState.PENDING, queue_id=queue)
            if limited is not None:
                ready = ready.filter(job_name=limited[0])
            elif job_names is not None:
                ready = ready.filter(job_name__in=list(job_names))
            candidates = list(
                ready.exclude(Exists(iq.GroupLock.objects.filter(key=OuterRef("lock_key"))))
                .exclude(Exists(iq.DisabledJob.objects.filter(job_name=OuterRef("job_name"))))
                .order_by("-priority", "pk")
                .select_for_update(skip_locked=True)[:limit]
            )
            if not candidates:
                return []
            first_entry: dict[str, int] = {}
            for entry in candidates:
                first_entry.setdefault(entry.lock_key, entry.pk)
            job_name = limited[0] if limited is not None else None
            taken = insert_group_locks(db, first_entry, queue, worker_id, job_name)
            if job_name is not None and rated:
                started = sum(entry.lock_key in taken for entry in candidates)
                iq.JobLimit.objects.record_starts(db, job_name, started)
        claims = {}
        for entry in candidates:
            if entry.lock_key in taken:
                claim = claims.setdefault(
                    entry.lock_key, Claim(taken[entry.lock_key], entry.lock_key, queue)
                )
                claim.entries.append(entry)
        return list(claims.values())

    def promote_due(self, now: datetime | None = None, limit: int = 1000) -> int:
        """Make deferred entries whose run_at has come ``pending``; return how many."""
        now = now or timezone.now()
        db = router.db_for_write(self.model)
        with transaction.atomic(using=db):
            due = list(
                self._on(db)
                .due(now)
                .order_by("run_at")
                .select_for_update(skip_locked=True)
                .values_list("pk", "queue_id")[:limit]
            )
            if not due:
                return 0
            promoted = (
                self._on(db)
                .filter(pk__in=[pk for pk, _ in due], state=EntryState.INITIAL)
                .update(state=EntryState.PENDING)
            )
            notify_ready(db, [queue for _, queue in due])
            return promoted

    def run_now(self, ids: Iterable[int]) -> int:
        """Make deferred entries ``pending`` at once; return how many changed."""
        db = router.db_for_write(self.model)
        wanted = list(ids)

        def write() -> int:
            locked = lock_in_order(self._on(db).filter(state=EntryState.INITIAL), wanted)
            rows = self._on(db).filter(pk__in=locked)
            changed = rows.update(state=EntryState.PENDING, run_at=timezone.now())
            if changed:
                notify_ready(db, list(rows.values_list("queue_id", flat=True).distinct()))
            return changed

        return atomic_retrying(db, write, "run_now")

    def cancel(self, ids: Iterable[int], jobs: JobCatalog | None = None) -> tuple[int, int]:
        """Delete the given entries unless a worker is running them.

        Return ``(cancelled, skipped)``: entries whose group lock is held are refused, since a
        worker is computing them. Who cancelled is the caller's to record (the admin and the API
        write Django's admin log).
        """
        cancelled, refused = self.cancel_returning(ids, jobs)
        return len(cancelled), len(refused)

    def cancel_returning(
        self, ids: Iterable[int], jobs: JobCatalog | None = None
    ) -> tuple[list[Entry], list[int]]:
        """Cancel as ``cancel`` does; return the entries deleted and the ids refused as running.

        For callers that record what they cancelled (the API writes an admin log entry per
        entry). The rows are locked first and the group locks read after, in a statement of its
        own: a claim committed meanwhile is seen and its entries are refused, and no worker can
        claim a locked row before the delete (SQLite serializes writers instead). Ids that match
        no entry are in neither list. Each cancelled entry leaves a ``cancelled`` outcome record
        (unless its job keeps none, as ``jobs`` tells).
        """
        db = router.db_for_write(self.model)
        wanted = sorted(set(ids))

        def write() -> tuple[list[Entry], list[int]]:
            rows = list(self._on(db).filter(pk__in=wanted).order_by("pk").select_for_update())
            held = set(
                iq.GroupLock.objects.using(db)
                .filter(key__in={entry.lock_key for entry in rows})
                .values_list("key", flat=True)
            )
            cancelled = [entry for entry in rows if entry.lock_key not in held]
            if cancelled:
                self._on(db).filter(pk__in=[entry.pk for entry in cancelled]).delete()
                iq.Batch.objects.members_failed(db, [entry.batch_id for entry in cancelled])
                iq.EntryDependency.objects.parents_ended(
                    db, [entry.pk for entry in cancelled], failure="was cancelled"
                )
                now = timezone.now()
                iq.RunOutcome.objects.db_manager(db).record_cancelled(
                    [e for e in cancelled if keeps_outcomes(e, jobs)], now
                )
            return cancelled, [entry.pk for entry in rows if entry.lock_key in held]

        return atomic_retrying(db, write, "cancel")

    def waiting_times(self) -> dict[str, tuple[datetime, datetime]]:
        """Per queue, of its entries awaiting compute: the oldest enqueue time, and since when
        the longest-waiting one has been ready (enqueued, or due, or retried, whichever came
        last). One query."""
        from django.db.models import Min
        from django.db.models.functions import Greatest

        rows = (
            self.get_queryset()
            .awaiting_compute()
            .values("queue")
            .annotate(oldest=Min("enqueued_at"), ready=Min(Greatest("enqueued_at", "run_at")))
            .order_by()
            .values_list("queue", "oldest", "ready")
        )
        return {str(queue): (oldest, ready) for queue, oldest, ready in rows}

    # -- disable / enable --------------------------------------------------------------------

    def disable(self, job_name: str) -> int:
        """Stop claiming ``job_name``: its entries, and any enqueued later, become ``disabled``.

        Entries already running finish. Return how many entries were disabled.
        """
        db = router.db_for_write(self.model)

        def write() -> int:
            iq.DisabledJob.objects.using(db).get_or_create(job_name=job_name)
            waiting = self._on(db).filter(job_name=job_name, state__in=WAITING)
            return (
                self._on(db).filter(pk__in=lock_in_order(waiting)).update(state=EntryState.DISABLED)
            )

        return atomic_retrying(db, write, "disable")

    def enable(self, job_name: str, now: datetime | None = None) -> int:
        """Claim ``job_name`` again: each disabled entry returns to ``initial`` or ``pending``
        by its own run_at, with its own priority. Return how many entries were enabled."""
        now = now or timezone.now()
        db = router.db_for_write(self.model)

        def write() -> int:
            iq.DisabledJob.objects.using(db).filter(job_name=job_name).delete()
            ids = lock_in_order(self._on(db).filter(job_name=job_name, state=EntryState.DISABLED))
            rows = self._on(db).filter(pk__in=ids)
            # Entries still waiting for parents (using(after=...)) go back to waiting for them.
            rows.filter(blockers__gt=0).update(state=EntryState.BLOCKED)
            rows = rows.filter(blockers=0)
            deferred = rows.filter(run_at__gt=now).update(state=EntryState.INITIAL)
            ready = rows.filter(run_at__lte=now)
            pending = ready.update(state=EntryState.PENDING)
            if pending:
                notify_ready(db, list(ready.values_list("queue_id", flat=True).distinct()))
            return deferred + pending

        return atomic_retrying(db, write, "enable")
