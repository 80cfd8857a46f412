"""A running job's progress: ``set_progress()`` inside a job, ``progress()`` anywhere.

What it promises: the last report of a run is never lost while its entry is there. Each report
is checked before anything is written (``InvalidArgument``), then written at once if the run
has not written one (nor started) in the last ``PROGRESS_INTERVAL_SECONDS`` and the job is
outside a transaction; otherwise it is held in the run's context (``JobContext.progress``),
replacing the report held before it. A worker's heartbeat writes the held reports whose
interval has passed (``flush_held``, which never waits), and the worker writes the one still
held once the run can no longer be timed out, before its outcome (``end_run``), unless the run
succeeded: its entry goes with its success.

What it does not: keep a report once its entry has ended (the row is gone; its outcome
records say how it ended), or write anything for a job that never reports. A report made
inside a transaction waits for the heartbeat or the end of the run: written in the job's
transaction, it would be rolled back with it and hold the entry's row until the commit. So does
a report of a coroutine job, whose event loop may not run the ORM.

Why writing is safe: every write is ``Entry.objects.report_progress``, one ``UPDATE`` of the
entry's row on condition that the run still holds its group lock. Writes of one run happen
one at a time (``HeldProgress.write_lock``), each of the newest report, so an older report
never overwrites a newer one; no lock is held across a query that another thread waits for.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db import DatabaseError, connections, router
from django.utils import timezone

from django_iq.appmodels import iq
from django_iq.bounds import text_problem
from django_iq.conf import iq_settings
from django_iq.context import HeldProgress, current, running_contexts
from django_iq.exceptions import EntryNotFound, InvalidArgument, NotInJob
from django_iq.logs import get_logger
from django_iq.wording import duration

if TYPE_CHECKING:
    from django_iq.models import Entry

logger = get_logger(__name__)

# The longest note a report may carry (the column's size).
NOTE_MAX_CHARS = 200


@dataclass(frozen=True)
class Progress:
    """The last progress a job reported: ``done`` of ``total`` (None: a total not known), a
    ``note`` ("" without one), and ``reported_at``, when the job reported it. Numbers are
    stored as floats: 3 is read back as 3.0."""

    done: float
    total: float | None
    note: str
    reported_at: datetime

    @property
    def percent(self) -> float | None:
        """``done`` as a percentage of ``total``; None without a total, or with a total of 0."""
        if not self.total:
            return None
        return 100.0 * self.done / self.total

    @classmethod
    def stored(
        cls, done: float | None, total: float | None, note: str, reported_at: datetime | None
    ) -> Progress | None:
        """The report an entry's ``progress_*`` columns hold; None before the first."""
        if done is None or reported_at is None:
            return None
        return cls(done=done, total=total, note=note or "", reported_at=reported_at)

    @classmethod
    def of(cls, entry: Entry) -> Progress | None:
        """The report an ``Entry`` as loaded holds (no query); None before the first."""
        return cls.stored(
            entry.progress_done, entry.progress_total, entry.progress_note, entry.progress_at
        )

    def as_dict(self) -> dict[str, Any]:
        """The report as JSON answers give it (``reported_at`` a ``datetime``, which Django's
        ``JsonResponse`` writes in ISO 8601): ``done``, ``total``, ``percent``, ``note``,
        ``reported_at``."""
        return {
            "done": self.done,
            "total": self.total,
            "percent": self.percent,
            "note": self.note,
            "reported_at": self.reported_at,
        }

    def shown(self, now: datetime) -> str:
        """The report as people read it, on every surface: ``"40 of 100 (40%) — rows,
        reported 3 s ago"``."""
        return f"{self}, reported {duration((now - self.reported_at).total_seconds())} ago"

    def __str__(self) -> str:
        shown = f"{self.done:g}"
        if self.total is not None:
            shown += f" of {self.total:g}"
            if self.percent is not None:
                shown += f" ({self.percent:.0f}%)"
        return f"{shown} — {self.note}" if self.note else shown


def set_progress(done: float, total: float | None = None, note: str = "") -> None:
    """Report how far the running job got: ``done`` units of ``total`` (None: unknown), with a
    ``note`` of at most ``NOTE_MAX_CHARS`` characters.

    Numbers are ints or floats, finite, not negative, and ``done`` is at most ``total``.
    Raise ``InvalidArgument`` for anything else, and ``NotInJob`` outside a job; nothing is
    written then. Cheap to call often: see the module docstring for when it writes.
    """
    report = _checked(done, total, note)
    context = current()
    if context is None:
        raise NotInJob(
            "set_progress() was called outside a job: only a job run by a worker (or by "
            "django_iq.testing.run_jobs) has progress to report"
        )
    hold = context.progress
    now = time.monotonic()
    with hold.lock:
        hold.held = report
        due = _due(hold.written_at, now)
    # A write already under way (the heartbeat's) leaves this report held for the next one.
    if due and _may_write_here() and hold.write_lock.acquire(blocking=False):
        try:
            _write_newest(hold, now)
        finally:
            hold.write_lock.release()


def flush_held() -> int:
    """Write the held report of each run going on in this process whose interval has passed
    since its last write (a worker's heartbeat calls this); return how many were written.
    Never waits: a run whose own write is under way, or whose entry row another transaction
    has locked, is left for the next heartbeat or the end of the run."""
    written = 0
    for context in running_contexts():
        hold = context.progress
        now = time.monotonic()
        with hold.lock:
            if hold.held is None or not _due(hold.written_at, now):
                continue
        if not hold.write_lock.acquire(blocking=False):
            continue
        try:
            written += _write_newest(hold, now, skip_locked=True)
        finally:
            hold.write_lock.release()
    return written


def end_run(hold: HeldProgress, write: bool = True) -> None:
    """The run ended: write the report it still holds, after any write under way (a worker
    calls this once the run can no longer be timed out, before its outcome). ``write`` is
    False where the row has no use for it (the run succeeded: its entry is about to go) or
    the worker may not write for the run (cut off from the database, or given up)."""
    with hold.write_lock:
        if write:
            _write_newest(hold, time.monotonic())
        with hold.lock:
            hold.held = None


def progress(entry: Entry | int) -> Progress | None:
    """The last progress reported for ``entry`` (an ``Entry`` or its id), as written.

    None before its first report, and once the entry has ended (the row is gone; ``wait()``
    and ``as_completed()`` read how it ended). A retried entry shows its last attempt's
    report until the new attempt reports. Raise ``EntryNotFound`` for an id that names no
    entry and no ended entry's records, and ``InvalidArgument`` for anything but an entry or
    an id.
    """
    entry_id = _entry_id(entry)
    db = router.db_for_write(iq.Entry)
    row = (
        iq.Entry.objects.using(db)
        .filter(pk=entry_id)
        .values_list("progress_done", "progress_total", "progress_note", "progress_at")
        .first()
    )
    if row is None:
        if not _has_ended(entry_id, db):
            raise EntryNotFound([entry_id])
        return None
    return Progress.stored(*row)


def _checked(done: object, total: object, note: object) -> Progress:
    done_number = _number(done, "done")
    total_number = None if total is None else _number(total, "total")
    if total_number is not None and done_number > total_number:
        raise InvalidArgument(
            f"set_progress(): done ({done_number:g}) is more than total ({total_number:g}); "
            "pass a total at least as large, or None when it is not known"
        )
    if not isinstance(note, str):
        raise InvalidArgument(f"set_progress(): note must be a str, not {type(note).__name__}")
    if len(note) > NOTE_MAX_CHARS:
        raise InvalidArgument(
            f"set_progress(): note is {len(note)} characters long; at most {NOTE_MAX_CHARS} "
            "are kept, so shorten it"
        )
    problem = text_problem(note)
    if problem is not None:
        raise InvalidArgument(f"set_progress(): note {problem}; no database stores it")
    return Progress(done_number, total_number, note, timezone.now())


def _number(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgument(
            f"set_progress(): {name} must be an int or a float, not {value!r:.80}"
        )
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number) or number < 0:
        raise InvalidArgument(
            f"set_progress(): {name} must be a finite number of 0 or more, not {value!r:.80}"
        )
    return number


def _entry_id(entry: object) -> int:
    if isinstance(entry, iq.Entry):
        if entry.pk is None:
            raise InvalidArgument("an Entry that was never saved has no progress")
        return int(entry.pk)
    if isinstance(entry, int) and not isinstance(entry, bool) and entry > 0:
        return entry
    raise InvalidArgument(f"not an entry or an entry id: {entry!r:.80}")


def _due(written_at: float | None, now: float) -> bool:
    return written_at is None or now - written_at >= iq_settings.PROGRESS_INTERVAL_SECONDS


def _may_write_here() -> bool:
    """Whether the job's thread may write its report itself: not inside a transaction, and
    not in a coroutine job's event loop (where the ORM may not run)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return not connections[router.db_for_write(iq.Entry)].in_atomic_block
    return False


def _write_newest(hold: HeldProgress, now: float, *, skip_locked: bool = False) -> bool:
    """Write the newest report ``hold`` holds (``write_lock`` held by the caller, ``lock`` taken
    only to read and clear it); an attempt counts as the interval's write even when the
    database refused it, so that a database that is away is not asked again at every report.
    Return whether it was written; if not, it stays held, for a later heartbeat or the end of
    the run."""
    with hold.lock:
        report = hold.held
        if report is None:
            return False
        before, hold.written_at = hold.written_at, now
    try:
        written = iq.Entry.objects.report_progress(
            hold.entry_id,
            hold.lock_id,
            done=report.done,
            total=report.total,
            note=report.note,
            reported_at=report.reported_at,
            skip_locked=skip_locked,
        )
    except DatabaseError:
        # Progress is shown, never acted on: a report the database refused must not fail the
        # job or its heartbeat.
        logger.warning(
            "could not write progress entry=%s job=%s",
            hold.entry_id,
            hold.job_name,
            exc_info=True,
        )
        return False
    if written is None:  # the row was locked: left held, tried again at the next heartbeat
        with hold.lock:
            if hold.written_at == now:
                hold.written_at = before
        return False
    with hold.lock:
        if hold.held is report:  # not replaced meanwhile by a newer one
            hold.held = None
    return True


def _has_ended(entry_id: int, db: str) -> bool:
    """Whether ``entry_id`` names an entry that ended: an outcome or a final error record."""
    return (
        iq.RunOutcome.objects.using(db).filter(entry_id=entry_id).exists()
        or iq.EntryError.objects.using(db).filter(entry_id=entry_id, is_final=True).exists()
    )
