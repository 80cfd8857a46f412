"""Waiting for entries to end: ``wait()`` and ``as_completed()``, and their async twins
``await_()`` and ``aas_completed()``.

An entry has ended when its row is gone: it succeeded (a ``succeeded`` outcome record), failed
for good (a final error record), was cancelled or expired (a ``cancelled`` or ``expired``
outcome record). The row and
its records change in one transaction, so a look that finds the row gone (one query) and then
reads the records (a second) always finds how it ended.

How a waiter learns that it should look again:

- On PostgreSQL (``LISTEN_NOTIFY`` on, outside a transaction), one listening connection per
  process, opened on the first wait and kept (``Hub``), hears ``ENDED_CHANNEL``. The waiter
  flags its entries (``Entry.awaited``) before its first look; the success that deletes a
  flagged entry sends ``NOTIFY`` with its id, and a final failure or a cancel always does. A
  look every ``NOTIFIED_RECHECK_SECONDS`` covers a notification lost with a dropped
  connection.
- Elsewhere, and until the listener has heard its own probe, it looks again with back-off:
  ``POLL_FIRST_SECONDS``, growing by half each time up to ``POLL_MAX_SECONDS``.

Inside a transaction a waiter sees what that transaction sees: on MariaDB (REPEATABLE READ) no
later commit at all. Wait outside ``transaction.atomic()``.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from asgiref.sync import sync_to_async
from django.db import DEFAULT_DB_ALIAS, connections, router

from django_iq.context import current
from django_iq.exceptions import (
    EntryNotFound,
    InvalidArgument,
    JobCancelled,
    JobExpired,
    JobFailed,
    WaitRefused,
    WaitTimeout,
)
from django_iq.models import Entry, EntryError, RunOutcome
from django_iq.registry import catalog
from django_iq.states import OutcomeStatus
from django_iq.wait_listener import Hub

POLL_FIRST_SECONDS = 0.01
POLL_MAX_SECONDS = 1.0
NOTIFIED_RECHECK_SECONDS = 5.0
# Ids per query (SQLite allows 999 parameters).
CHUNK = 500


@dataclass(frozen=True)
class EntryOutcome:
    """How an entry ended.

    ``status`` is ``"succeeded"``, ``"failed"``, ``"cancelled"`` or ``"expired"``. ``return_value`` is the
    job's return value as stored (JSON; a value too big or not storable is an object saying so,
    see docs/howto/outcomes.md); ``exception_class`` and ``message`` are those of a failure's
    last attempt. ``attempt`` counts the attempts, ``finished_at`` is when it ended.
    """

    entry_id: int
    status: str
    return_value: Any = None
    job_name: str = ""
    exception_class: str = ""
    message: str = ""
    attempt: int | None = None
    finished_at: datetime | None = None

    @property
    def succeeded(self) -> bool:
        return self.status == OutcomeStatus.SUCCEEDED

    def result(self) -> Any:
        """The return value; for an entry that did not succeed, raise what ``wait()`` raises
        (``JobFailed``, ``JobCancelled``, ``JobExpired``)."""
        if self.status == OutcomeStatus.CANCELLED:
            raise JobCancelled(self)
        if self.status == OutcomeStatus.EXPIRED:
            raise JobExpired(self)
        if self.status != OutcomeStatus.SUCCEEDED:
            raise JobFailed(self)
        return self.return_value


def wait(entry: Entry | int, timeout: float | None = None) -> Any:
    """Wait for ``entry`` (an ``Entry`` or its id) to end and return its job's return value.

    Raise ``JobFailed`` after a final failure, ``JobCancelled`` after a cancel, ``JobExpired``
    for an entry that expired before it started (or started again, after failed attempts),
    ``WaitTimeout`` (a ``TimeoutError``) when ``timeout`` seconds pass first, ``EntryNotFound``
    for an id with no entry and no records, ``WaitRefused`` inside a job of the same queue."""
    for outcome in as_completed([entry], timeout=timeout):
        return outcome.result()
    raise AssertionError("as_completed() ended without the entry")  # pragma: no cover


def as_completed(
    entries: Iterable[Entry | int], timeout: float | None = None
) -> Iterator[EntryOutcome]:
    """Yield an ``EntryOutcome`` for each of ``entries`` (``Entry`` objects or ids) as it ends,
    in the order they end (those already ended first). Failures and cancels are yielded, not
    raised. Raise ``WaitTimeout`` when ``timeout`` seconds pass with some still running, and
    the errors of ``wait()`` for bad input."""
    waiter = _Waiter(entries, timeout)
    try:
        while True:
            waiter.woken.clear()
            yield from waiter.look()
            if not waiter.pending:
                return
            waiter.woken.wait(waiter.pause())
    finally:
        waiter.close()


async def await_(entry: Entry | int, timeout: float | None = None) -> Any:
    """``wait()`` for async code (``await`` is a keyword, hence the trailing underscore): the
    event loop is never blocked; the looks run as Django runs sync code from async views."""
    async for outcome in aas_completed([entry], timeout=timeout):
        return outcome.result()
    raise AssertionError("aas_completed() ended without the entry")  # pragma: no cover


async def aas_completed(
    entries: Iterable[Entry | int], timeout: float | None = None
) -> AsyncIterator[EntryOutcome]:
    """``as_completed()`` for async code."""
    waiter = await sync_to_async(_Waiter)(entries, timeout)
    loop = asyncio.get_running_loop()
    woken = asyncio.Event()

    def wake() -> None:
        loop.call_soon_threadsafe(woken.set)

    waiter.on_wake = wake
    try:
        while True:
            woken.clear()
            for outcome in await sync_to_async(lambda: list(waiter.look()))():
                yield outcome
            if not waiter.pending:
                return
            pause = waiter.pause()  # raises WaitTimeout (a TimeoutError) past the deadline
            try:
                await asyncio.wait_for(woken.wait(), pause)
            except TimeoutError:
                pass
    finally:
        waiter.close()


def entry_ids(entries: Iterable[Entry | int]) -> list[int]:
    """The ids of ``entries`` (``Entry`` objects or ids), in order, each once."""
    if isinstance(entries, (str, bytes)) or not isinstance(entries, Iterable):
        raise InvalidArgument(f"expected entries or entry ids, got {type(entries).__name__}")
    ids: dict[int, None] = {}
    for item in entries:
        if isinstance(item, Entry):
            if item.pk is None:
                raise InvalidArgument("an Entry that was never saved has no id to wait for")
            ids[int(item.pk)] = None
        elif isinstance(item, int) and not isinstance(item, bool) and item > 0:
            ids[item] = None
        else:
            raise InvalidArgument(f"not an entry or an entry id: {item!r}")
    return list(ids)


def _deadline(timeout: float | None) -> float | None:
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise InvalidArgument(f"timeout must be a number of seconds or None, not {timeout!r}")
    if not math.isfinite(timeout) or timeout < 0:
        raise InvalidArgument(f"timeout must be a finite number of seconds >= 0, not {timeout!r}")
    return time.monotonic() + timeout


class _Waiter:
    """The entries one call waits for, the looks at them, and the pauses between looks."""

    def __init__(self, entries: Iterable[Entry | int], timeout: float | None) -> None:
        self.ids = entry_ids(entries)
        self.timeout = timeout
        self.deadline = _deadline(timeout)
        self.pending = set(self.ids)
        self.using = router.db_for_write(Entry) or DEFAULT_DB_ALIAS
        self.woken = threading.Event()
        self.on_wake: Callable[[], None] = self.woken.set
        self.backoff = POLL_FIRST_SECONDS
        self._refuse(_alive(self.ids, self.using))
        self.hub = None
        if self.ids and not connections[self.using].in_atomic_block:
            self.hub = Hub.for_process()
        if self.hub is not None:
            self.hub.register(self.ids, self._wake)
            # Before the first look: a success after it sends the notification.
            Entry.objects.mark_awaited(self.ids)

    def _wake(self) -> None:
        self.on_wake()

    def look(self) -> Iterator[EntryOutcome]:
        """The outcomes of the entries that ended since the last look, in the order they
        ended."""
        alive = _alive(sorted(self.pending), self.using)
        gone = [pk for pk in self.pending if pk not in alive]
        ended = _ended(gone, self.using)
        missing = [pk for pk in gone if pk not in ended]
        if missing:
            raise EntryNotFound(sorted(missing))
        self.pending.difference_update(ended)
        if self.hub is not None:
            self.hub.unregister(ended, self._wake)
        return iter(sorted(ended.values(), key=_end_order))

    def _refuse(self, alive: dict[int, tuple[str, str]]) -> None:
        """Refuse, before anything is written, entries that cannot be waited for."""
        context = current()
        if context is not None:
            mine = sorted(pk for pk, (queue, _) in alive.items() if queue == context.queue)
            if mine:
                raise WaitRefused(
                    f"{context.job_name} (entry {context.entry_id}) waits for entry {mine[0]} "
                    f"of its own queue {context.queue!r}: with every processing thread of its "
                    "workers waiting so, that entry could never start. Enqueue it on another "
                    "queue, or chain it with using(after=...)"
                )
        silent = sorted({job for _, job in alive.values() if not catalog.keeps_outcomes(job)})
        if silent:
            raise InvalidArgument(
                f"job {silent[0]} keeps no outcome records (keep_outcomes=False): how its "
                "entries end cannot be read back, so they cannot be waited for"
            )

    def pause(self) -> float:
        """Seconds until the next look; raise ``WaitTimeout`` once the deadline has passed."""
        if self.hub is not None and self.hub.listener.delivers:
            pause = NOTIFIED_RECHECK_SECONDS
        else:
            pause = self.backoff
            self.backoff = min(POLL_MAX_SECONDS, self.backoff * 1.5)
        if self.deadline is not None:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise WaitTimeout(sorted(self.pending), float(self.timeout or 0))
            pause = min(pause, left)
        return pause

    def close(self) -> None:
        if self.hub is not None:
            self.hub.unregister(self.pending, self._wake)


def _end_order(outcome: EntryOutcome) -> tuple[float, int]:
    at = outcome.finished_at.timestamp() if outcome.finished_at else 0.0
    return at, outcome.entry_id


def _chunks(ids: list[int]) -> Iterator[list[int]]:
    for start in range(0, len(ids), CHUNK):
        yield ids[start : start + CHUNK]


def _alive(ids: list[int], using: str) -> dict[int, tuple[str, str]]:
    """Of ``ids``, the entries still there: id -> (queue, job name)."""
    alive: dict[int, tuple[str, str]] = {}
    for chunk in _chunks(ids):
        rows = Entry.objects.using(using).filter(pk__in=chunk)
        for pk, queue, job in rows.values_list("pk", "queue_id", "job_name"):
            alive[pk] = (str(queue), str(job))
    return alive


def _ended(ids: list[int], using: str) -> dict[int, EntryOutcome]:
    """How the entries ``ids`` (rows gone) ended, from their final error records and their
    latest outcome records; ids with neither are left out."""
    ended: dict[int, EntryOutcome] = {}
    for chunk in _chunks(sorted(ids)):
        finals = EntryError.objects.using(using).filter(entry_id__in=chunk, is_final=True)
        for error in finals.order_by("pk"):
            ended[error.entry_id] = EntryOutcome(
                entry_id=error.entry_id,
                status=OutcomeStatus.FAILED.value,
                job_name=error.job_name,
                exception_class=error.exception_class,
                message=error.message,
                attempt=error.attempt,
                finished_at=error.failed_at,
            )
        rest = [pk for pk in chunk if pk not in ended]
        if not rest:
            continue
        latest: dict[int, RunOutcome] = {}
        for record in RunOutcome.objects.using(using).filter(entry_id__in=rest).order_by("pk"):
            latest[record.entry_id] = record
        for pk, record in latest.items():
            ended[pk] = _from_record(record)
    return ended


def _from_record(record: RunOutcome) -> EntryOutcome:
    status = str(record.status)
    message = ""
    if status not in (OutcomeStatus.SUCCEEDED, OutcomeStatus.CANCELLED, OutcomeStatus.EXPIRED):
        # A failure whose error record is gone (pruned first): its traceback's last line.
        status = OutcomeStatus.FAILED.value
        lines = record.traceback.strip().splitlines()
        message = lines[-1].partition(": ")[2] if lines else ""
    return EntryOutcome(
        entry_id=record.entry_id,
        status=status,
        return_value=record.return_value if status == OutcomeStatus.SUCCEEDED else None,
        job_name=record.job_name,
        exception_class=record.exception_class,
        message=message,
        attempt=record.attempt,
        finished_at=record.finished_at,
    )
