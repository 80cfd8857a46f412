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

# Inferred: a pending entry whose group lock is held, one whose lock is free, and an entry that
# failed for good (a final error record not requeued).
COMPUTING, AWAITING_COMPUTE, FAILED = "computing", "awaiting_compute", "failed"
# Every state a queue's counts report, in display order.
COUNTED_STATES = (*EntryState.values, COMPUTING, AWAITING_COMPUTE, FAILED)
# How people read each counted state (the design calls awaiting_compute "awaitingCompute").
# Machines (JSON, Prometheus labels, HTML data attributes, column keys) use the names above.
STATE_LABELS = {
    EntryState.INITIAL.value: "initial",
    EntryState.PENDING.value: "pending",
    EntryState.DISABLED.value: "disabled",
    EntryState.BLOCKED.value: "blocked",
    COMPUTING: "computing",
    AWAITING_COMPUTE: "awaiting compute",
    FAILED: "failed",
}


def entry_state_label(state: str, is_running: bool) -> str:
    """How people read an entry's state: a pending entry is computing while a live worker runs
    it (``is_running``: its group lock's tracked entry), and awaiting compute otherwise (its
    group's other entries wait behind the running one)."""
    if state == EntryState.PENDING:
        return STATE_LABELS[COMPUTING if is_running else AWAITING_COMPUTE]
    return STATE_LABELS.get(state, state)


class OutcomeStatus(models.TextChoices):
    """How one run ended, as its outcome record says."""

    SUCCEEDED = "succeeded", "succeeded"
    FAILED = "failed", "failed"
    TIMED_OUT = "timed_out", "timed out"
    CANCELLED = "cancelled", "cancelled"
    # The job raised Snooze: put back without counting an attempt.
    SNOOZED = "snoozed", "snoozed"


def group_lock_key(group_key: str) -> str:
    """The lock key every entry of group ``group_key`` shares."""
    return f"g:{group_key}"


def lock_key_for(group_key: str | None) -> str:
    """A new entry's lock key: its group's, or one of its own when it is not grouped."""
    return group_lock_key(group_key) if group_key else f"e:{os.urandom(16).hex()}"
