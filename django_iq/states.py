"""The states of entries and task results, the states inferred from them, the priority bounds
and the group-lock key rule: the bottom of the package, importing nothing of it."""

from __future__ import annotations

import os

from django.db import models

MIN_PRIORITY, MAX_PRIORITY = -100, 100


class EntryState(models.TextChoices):
    """Stored entry states; computing, awaiting_compute and failed are inferred."""

    INITIAL = "initial", "initial"
    PENDING = "pending", "pending"
    DISABLED = "disabled", "disabled"
    # Waiting for parent entries (``using(after=...)``): claimable once every one has ended.
    BLOCKED = "blocked", "blocked"


# Entries that will run unless something changes: deferred or ready.
WAITING = (EntryState.INITIAL, EntryState.PENDING)

# Inferred, one meaning on every surface (the admin, the dashboard, iq_status, the API,
# Prometheus): computing is a pending entry whose group lock a live worker holds (running,
# claimed and waiting in its worker's prefetch, or waiting behind its group's running entry);
# awaiting compute is a pending entry with no lock; failed is an entry that failed for good (a
# final error record not requeued). Running counts the computing entries a live worker is
# running now (each live lock's tracked entry): a part of computing, with a name of its own.
COMPUTING, RUNNING, AWAITING_COMPUTE, FAILED = "computing", "running", "awaiting_compute", "failed"
# Every state a queue's counts report, in display order.
COUNTED_STATES = (*EntryState.values, COMPUTING, RUNNING, AWAITING_COMPUTE, FAILED)
# How people read each counted state (the design calls awaiting_compute "awaitingCompute").
# Machines (JSON, Prometheus labels, HTML data attributes, column keys) use the names above.
STATE_LABELS = {
    EntryState.INITIAL.value: "initial",
    EntryState.PENDING.value: "pending",
    EntryState.DISABLED.value: "disabled",
    EntryState.BLOCKED.value: "blocked",
    COMPUTING: "computing",
    RUNNING: "running",
    AWAITING_COMPUTE: "awaiting compute",
    FAILED: "failed",
}


def entry_state(state: str, locked: bool, locked_by_live_worker: bool) -> str:
    """An entry's state as every surface names it: a pending entry is ``computing`` while a
    live worker holds its group lock and ``awaiting_compute`` with no lock; one whose lock's
    worker is not live is neither (it stays ``pending`` until recovery releases the lock).
    Other states are the stored ones."""
    if state != EntryState.PENDING:
        return state
    if locked_by_live_worker:
        return COMPUTING
    return state if locked else AWAITING_COMPUTE


def entry_state_label(
    state: str, locked: bool, locked_by_live_worker: bool, is_running: bool = False
) -> str:
    """How people read an entry's state (``entry_state`` in words); a computing entry its
    worker is running now (``is_running``: its group lock's tracked entry) says so."""
    name = entry_state(state, locked, locked_by_live_worker)
    label = STATE_LABELS.get(name, name)
    return f"{label} (running)" if name == COMPUTING and is_running else label


class OutcomeStatus(models.TextChoices):
    """How one run ended, as its outcome record says."""

    SUCCEEDED = "succeeded", "succeeded"
    FAILED = "failed", "failed"
    TIMED_OUT = "timed_out", "timed out"
    CANCELLED = "cancelled", "cancelled"
    # Not started before its expiry (``expires``): ended without running.
    EXPIRED = "expired", "expired"
    # The job raised Snooze: put back without counting an attempt.
    SNOOZED = "snoozed", "snoozed"


def group_lock_key(group_key: str) -> str:
    """The lock key every entry of group ``group_key`` shares."""
    return f"g:{group_key}"


def lock_key_for(group_key: str | None) -> str:
    """A new entry's lock key: its group's, or one of its own when it is not grouped."""
    return group_lock_key(group_key) if group_key else f"e:{os.urandom(16).hex()}"


# The states of a worker's or leader's process, one wording on every surface (the admin, the
# dashboard, iq_status, the HTTP API, Prometheus).
WORKER_LIVE = "live"  # a heartbeat within WORKER_SILENT_AFTER_SECONDS, not stopped
WORKER_STOPPED = "stopped"  # exited, and marked itself stopped
WORKER_DEAD = "dead"  # silent past WORKER_SILENT_AFTER_SECONDS, or declared dead by recovery
WORKER_STATES = (WORKER_LIVE, WORKER_STOPPED, WORKER_DEAD)


def worker_state(*, is_live: bool, stopped: bool, died: bool) -> str:
    """``live``, ``stopped`` or ``dead`` (``WORKER_STATES``) of a process's row: ``is_live``
    as ``Worker.objects.live()`` decides, ``stopped`` its ``stopped_at`` set, ``died`` its row
    marked by recovery."""
    if stopped:
        return WORKER_DEAD if died else WORKER_STOPPED
    return WORKER_LIVE if is_live else WORKER_DEAD


def worker_state_label(*, is_live: bool, stopped: bool, died: bool) -> str:
    """The state with why a process is dead: ``dead (silent)`` while no heartbeat came within
    the silence limit and recovery has not declared it yet, ``dead (declared dead)`` after."""
    state = worker_state(is_live=is_live, stopped=stopped, died=died)
    if state != WORKER_DEAD:
        return state
    return f"{WORKER_DEAD} (declared dead)" if died else f"{WORKER_DEAD} (silent)"
