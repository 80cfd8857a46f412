"""Recovery: declare silent workers dead, then make the entries locked by dead, stopped or
forgetful workers runnable again.

The order is what makes it safe. A worker is declared dead by one conditional UPDATE that waits
for its row and re-checks its heartbeat there (``WorkerManager.declare_dead``); only locks of a
worker whose row says stopped (or that have no worker) are released, each after its row is
locked and the diagnosis made again. Claims hold their worker's row with a shared lock and
refuse a stopped or silent worker, so once a worker is declared dead it cannot take a new lock:
a lock recovery releases was taken before its worker went silent for the whole silence limit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django_iq.conf import iq_settings
from django_iq.duties.base import Fence
from django_iq.exceptions import LeadershipLost
from django_iq.logs import get_logger
from django_iq.models import Entry, GroupLock, Worker
from django_iq.registry import catalog

# Logged under the name operators configure: django_iq.recovery.
logger = get_logger("django_iq.recovery")


@dataclass
class RecoveryPass:
    """What one recovery pass found and did: lock key to outcome, workers declared dead, and
    rows it could not handle (key or worker id to the error), which it skipped."""

    recovered: dict[str, str] = field(default_factory=dict)
    declared_dead: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Stuck:
    """Why a lock is stuck, and whether releasing it counts an attempt of its entry."""

    reason: str
    counts_attempt: bool = True


def diagnose(lock: GroupLock, heartbeat_margin: timedelta) -> Stuck | None:
    """Return why ``lock`` is stuck, or None if its worker is alive and holds it.

    A lock is stuck when its worker is gone (no row, or a row marked stopped: it exited, or
    was declared dead): the job may have been running, so the release counts an attempt. Or
    its worker is alive but no longer reports the lock in a heartbeat stamped well after the
    lock was taken (both times are the database's): the worker is not running it (it never
    learned of the claim, or gave up writing a success), so the release counts no attempt.
    A worker that is merely silent is not diagnosed here: it must first be declared dead
    (see ``RecoveryDuty``).
    """
    worker = lock.worker
    if worker is None:
        return Stuck(f"Lock {lock.pk} has no worker: its worker stopped or was removed.")
    if worker.stopped_at is not None:
        if worker.sessions:
            # Its process left database sessions open (a run stuck past its timeout): a
            # statement of the run may still be going on in the server until they are ended.
            return None
        if worker.died:
            return Stuck(
                f"Worker {worker.name} was found dead: last heartbeat at "
                f"{worker.heartbeat_at.isoformat()}, silent for more than "
                f"{iq_settings.WORKER_SILENT_AFTER_SECONDS}s."
            )
        return Stuck(
            f"Worker {worker.name} stopped at {worker.stopped_at.isoformat()} "
            f"holding lock {lock.pk}."
        )
    if worker.held_at is not None and lock.locked_at < worker.held_at - heartbeat_margin:
        if lock.pk not in set(worker.held_lock_ids or []):
            return Stuck(
                f"Worker {worker.name} is alive but no longer holds lock {lock.pk} "
                f"(not in its report at {worker.held_at.isoformat()}).",
                counts_attempt=False,
            )
    return None


class RecoveryDuty:
    """Declare silent workers dead, then release stuck locks and count their attempts."""

    name = "recovery"

    @property
    def interval_seconds(self) -> float:
        return float(iq_settings.RECOVERY_INTERVAL_SECONDS)

    def run_once(self, now: datetime, fence: Fence) -> RecoveryPass:
        result = RecoveryPass()
        self._declare_silent_workers_dead(fence, result)
        self._end_sessions_of_dead_workers(result)
        # Two heartbeats' grace between taking a lock and having to report it.
        margin = timedelta(seconds=2 * iq_settings.HEARTBEAT_INTERVAL_SECONDS)
        for lock in GroupLock.objects.select_related("worker").order_by("key"):
            if diagnose(lock, margin) is None:
                continue
            try:
                outcome = self._recover(lock.pk, lock.entry_id, margin, now, fence)
            except LeadershipLost:
                raise
            except Exception as exc:  # one row it cannot handle must not stop the pass
                logger.exception("recovery skipped lock=%s entry=%s", lock.pk, lock.entry_id)
                result.skipped[lock.key] = _describe(exc)
                continue
            if outcome is not None:
                result.recovered[lock.key] = outcome
                logger.info(
                    "recovered lock=%s entry=%s outcome=%s", lock.pk, lock.entry_id, outcome
                )
        return result

    def _declare_silent_workers_dead(self, fence: Fence, result: RecoveryPass) -> None:
        silent_after = iq_settings.WORKER_SILENT_AFTER_SECONDS
        for worker_id, name in (
            Worker.objects.silent(silent_after).order_by("pk").values_list("pk", "name")
        ):
            # One fenced transaction per worker: the UPDATE may wait for the worker's own
            # heartbeat or claim, and then re-checks the heartbeat as they left it.
            try:
                with fence():
                    declared = Worker.objects.declare_dead(worker_id, silent_after)
            except LeadershipLost:
                raise
            except Exception as exc:  # one row it cannot handle must not stop the pass
                logger.exception("recovery skipped worker=%s", name)
                result.skipped[f"worker:{name}"] = _describe(exc)
                continue
            if declared:
                result.declared_dead.append(name)
                logger.warning("worker declared dead name=%s silent_after=%ss", name, silent_after)
            else:
                logger.info("worker is alive again name=%s", name)

    def _end_sessions_of_dead_workers(self, result: RecoveryPass) -> None:
        """End the database sessions that stopped workers' processes left open, so that their
        locks can be released: until then a statement of theirs may still commit.

        Sessions are told to end and looked at once, not waited for: one that takes its time
        to go is looked at again on the next pass, so it holds up neither the leader's other
        duties nor the renewal of its lease (the locks of that worker wait meanwhile)."""
        for worker in Worker.objects.filter(died=True).exclude(sessions=[]):
            try:
                over = Worker.objects.end_sessions(worker, wait_seconds=0.0)
            except Exception as exc:  # one row it cannot handle must not stop the pass
                logger.exception("recovery could not end the sessions of worker=%s", worker.name)
                result.skipped[f"sessions:{worker.name}"] = _describe(exc)
                continue
            if over:
                logger.info("ended the database sessions of worker=%s", worker.name)
            else:
                logger.info("database sessions of worker=%s still ending; next pass", worker.name)

    def _recover(
        self, lock_id: int, entry_id: int | None, margin: timedelta, now: datetime, fence: Fence
    ) -> str | None:
        """Lock the entry's row and the lock's row, diagnose again, and recover the lock if it
        is still stuck."""
        with fence():
            # The entry first, then the lock: the order of every writer of both (a success or
            # a failure), so recovery and a late outcome of the same claim cannot deadlock.
            if entry_id is not None:
                Entry.objects.filter(pk=entry_id).select_for_update().values_list("pk").first()
            # Diagnose again with the lock row locked: since it was read, it may have been
            # finished or released, or adopted by its worker registering again. The worker
            # row is then read without a lock, as the last heartbeat left it (a lock on it
            # too would make claims and heartbeats wait for recovery).
            current = GroupLock.objects.select_for_update().filter(pk=lock_id).first()
            if current is None:
                return None
            if current.entry_id != entry_id:
                logger.info("lock=%s moved on to entry=%s; next pass", current.pk, current.entry_id)
                return None
            stuck = diagnose(current, margin)
            if stuck is None:
                logger.info("lock=%s is held again by worker=%s", current.pk, current.worker_id)
                return None
            logger.warning(
                "stuck lock=%s worker=%s: %s", current.pk, current.worker_id, stuck.reason
            )
            if not stuck.counts_attempt:
                return "released" if GroupLock.objects.release([current.pk]) else None
            return GroupLock.objects.recover(
                current,
                stuck.reason,
                decay_step=iq_settings.PRIORITY_DECAY_STEP,
                now=now,
                jobs=catalog,
            )


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:500]
