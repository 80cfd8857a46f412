"""Enqueue (``Entry.objects.enqueue``, ``enqueue_many``, ``enqueue_blocked``): every call is
validated before anything is written, then the entries go by one of four paths, a module each:

- ``statements``: PostgreSQL, one statement per batch of entries, ``COPY`` for big ones;
- ``orm``: Django's ORM (SQLite, MariaDB);
- ``unique``: entries holding a unique key, one at a time under the unique constraint;
- ``after``: entries waiting for their parents, written with the edges.

Entries enqueued inside a batch's block (``django_iq.batch()``) join it in the same transaction.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager, nullcontext
from functools import partial
from typing import TYPE_CHECKING, Any

from django.db import router, transaction
from django.utils import timezone

from django_iq import signals, tracing
from django_iq.appmodels import iq
from django_iq.bounds import resolve_run_at
from django_iq.dbconn import reachable
from django_iq.exceptions import InvalidJobOptions
from django_iq.managers.batches import OpenBatch, open_batch
from django_iq.managers.enqueue.after import insert_after
from django_iq.managers.enqueue.orm import insert_with_orm
from django_iq.managers.enqueue.rows import build_entry
from django_iq.managers.enqueue.statements import insert_in_statements
from django_iq.managers.enqueue.unique import insert_unique
from django_iq.options import JobCatalog, JobOptions
from django_iq.queries import supports_single_statement_enqueue
from django_iq.serialization import call_pair, validate_arguments
from django_iq.states import EntryState

if TYPE_CHECKING:
    from django_iq.managers.entries import EntryManager
    from django_iq.models import Entry


def enqueue(
    manager: EntryManager,
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
    (entry,) = enqueue_many(manager, job_name, [(args, kwargs)], options, jobs=jobs)
    return entry


def enqueue_many(
    manager: EntryManager,
    job_name: str,
    calls: Iterable[tuple[Sequence[Any], dict[str, Any]]],
    options: JobOptions,
    *,
    jobs: JobCatalog | None = None,
    result_ids: Sequence[str] = (),
    group_keys: Sequence[str | None] = (),
    limit_keys: Sequence[tuple[str, str]] = (),
) -> list[Entry]:
    """Validate every call first, then insert them in batches of 1,000, in one transaction.

    The queue must exist or be declared (in settings, or by one of ``jobs``: the registry
    passes itself). ``result_ids``, one per call, are the entries' Django Tasks result ids
    (the Tasks backend). ``group_keys``, one per call, are the group keys taken
    from the calls (``@job(group_by=...)``), in place of the options' one. ``limit_keys``, one
    per call, are its concurrency key and rate limit key (``@job(concurrency_key=...,
    rate_limit_key=...)``).

    On PostgreSQL a batch is one statement (see ``queries.enqueue_in_one_statement``): a
    single enqueue costs one round trip, and each pending entry notifies the workers
    listening on its queue when the transaction commits.
    """
    now = timezone.now()
    db = router.db_for_write(manager.model)
    # Every call is validated before anything is written: a refused enqueue writes nothing.
    validated = [validate_arguments(*call_pair(index, call)) for index, call in enumerate(calls)]
    run_at = resolve_run_at(options.run_at, now)
    keys = list(group_keys) or [None] * len(validated)
    entries = [
        build_entry(job_name, args, kwargs, options, now, run_at, key)
        for (args, kwargs), key in zip(validated, keys, strict=True)
    ]
    for entry, result_id in zip(entries, result_ids, strict=False):
        entry.result_id = result_id
    for entry, (concurrency_key, rate_limit_key) in zip(entries, limit_keys, strict=False):
        entry.concurrency_key, entry.rate_limit_key = concurrency_key, rate_limit_key
    if not entries:
        return []
    with tracing.enqueueing(job_name, options.queue_name, len(entries)) as sending:
        if sending.traceparent is not None:
            for entry in entries:
                entry.traceparent = sending.traceparent
        entries = _insert(manager, db, job_name, options, entries, jobs)
        sending.sent(entries)
    return entries


def _insert(
    manager: EntryManager,
    db: str,
    job_name: str,
    options: JobOptions,
    entries: list[Entry],
    jobs: JobCatalog | None,
) -> list[Entry]:
    """Write ``entries`` (built and checked) by the path that fits them; the entries returned
    (a unique job's duplicates among them)."""
    batch = _batch_of(db, entries)
    join = partial(iq.Batch.objects.add_members, batch) if batch is not None else None
    if any(entry.unique_key is not None for entry in entries):
        with reachable(db, "nothing was enqueued"), _batch_transaction(db, batch):
            entries = [
                insert_unique(db, job_name, options.queue_name, entry, jobs, options.unique_for)
                for entry in entries
            ]
            if join is not None:
                # A duplicate is an entry enqueued before: it does not join the batch.
                join([entry for entry in entries if not entry.is_duplicate])
        for entry in entries:
            if not entry.is_duplicate:
                signals.send(signals.entry_enqueued, manager.model, entry=entry)
        return entries
    with reachable(db, "nothing was enqueued"), _batch_transaction(db, batch):
        if options.after is not None:
            insert_after(manager, db, job_name, options, entries, jobs, join)
        else:
            if supports_single_statement_enqueue(db):
                insert_in_statements(db, job_name, options.queue_name, entries, jobs)
            else:
                insert_with_orm(db, job_name, options.queue_name, entries, jobs)
            if join is not None:
                join(entries)
    for entry in entries:
        signals.send(signals.entry_enqueued, manager.model, entry=entry)
    return entries


def _batch_of(db: str, entries: Sequence[Entry]) -> OpenBatch | None:
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


def _batch_transaction(db: str, batch: OpenBatch | None) -> AbstractContextManager[Any]:
    """A batch's members are written with their links to its callback, all or nothing."""
    return transaction.atomic(using=db) if batch is not None else nullcontext()


def enqueue_blocked(
    manager: EntryManager,
    db: str,
    job_name: str,
    kwargs: dict[str, Any],
    options: JobOptions,
    *,
    jobs: JobCatalog | None = None,
) -> Entry:
    """Insert one entry of ``job_name`` (``kwargs`` are checked here, and with ``jobs`` the
    keys of its limits taken from them) ``blocked`` by one blocker that is no entry (a batch's
    open block; ``EntryDependencyManager.release`` takes it away), in the caller's
    transaction."""
    now = timezone.now()
    args, checked = validate_arguments((), kwargs)
    entry = build_entry(job_name, args, checked, options, now, resolve_run_at(options.run_at, now))
    if jobs is not None:
        entry.concurrency_key, entry.rate_limit_key = jobs.limit_keys_of(job_name, args, checked)
    entry.state, entry.blockers = EntryState.BLOCKED, 1
    with tracing.enqueueing(job_name, options.queue_name, 1) as sending:
        entry.traceparent = sending.traceparent
        insert_with_orm(db, job_name, options.queue_name, [entry], jobs)
        sending.sent([entry])
    signals.send(signals.entry_enqueued, manager.model, entry=entry)
    return entry
