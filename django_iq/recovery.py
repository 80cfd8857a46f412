"""Recovery: find entries locked by a dead, silent or forgetful worker and make them runnable."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django_iq.conf import iq_settings
from django_iq.cron import Fence
from django_iq.models import GroupLock, Worker

logger = logging.getLogger(__name__)


@dataclass
class RecoveryPass:
    """What one recovery pass found and did, lock key to outcome."""

    recovered: dict[str, str] = field(default_factory=dict)


def diagnose(lock: GroupLock, silent_ids: set[int], heartbeat_margin: timedelta) -> str | None:
    """Return why ``lock`` is stuck, or None if its worker is alive and holds it.

    A lock is stuck when its worker is gone (no row, stopped, or silent past
    ``WORKER_SILENT_AFTER_SECONDS``), or alive but no longer reporting the lock in heartbeats
    that came well after the lock was taken.
    """
    worker = lock.worker
    if worker is None:
        return f"Lock {lock.key} has no worker: its worker stopped or was removed."
    if worker.stopped_at is not None:
        return f"Worker {worker.name} stopped at {worker.stopped_at.isoformat()} holding lock {lock.key}."
    if worker.pk in silent_ids:
        return (
            f"Worker {worker.name} was found dead: last heartbeat at {worker.heartbeat_at.isoformat()}, "
            f"silent for more than {iq_settings.WORKER_SILENT_AFTER_SECONDS}s."
        )
    if worker.held_at is not None and lock.locked_at < worker.held_at - heartbeat_margin:
        if lock.pk not in set(worker.held_lock_ids or []):
            return (
                f"Worker {worker.name} is alive but no longer holds lock {lock.key} "
                f"(not in its report at {worker.held_at.isoformat()})."
            )
    return None


class RecoveryDuty:
    """Detect stuck locks, diagnose their workers, release them and count the attempt."""

    name = "recovery"

    @property
    def interval_seconds(self) -> float:
        return float(iq_settings.RECOVERY_INTERVAL_SECONDS)

    def run_once(self, now: datetime, fence: Fence) -> RecoveryPass:
        result = RecoveryPass()
        silent = Worker.objects.silent(iq_settings.WORKER_SILENT_AFTER_SECONDS)
        silent_ids = set(silent.values_list("pk", flat=True))
        # Two heartbeats' grace between taking a lock and having to report it.
        margin = timedelta(seconds=2 * iq_settings.HEARTBEAT_INTERVAL_SECONDS)
        for lock in GroupLock.objects.select_related("worker").order_by("key"):
            reason = diagnose(lock, silent_ids, margin)
            if reason is None:
                continue
            logger.warning("stuck lock=%s worker=%s: %s", lock.key, lock.worker_id, reason)
            with fence():
                # Diagnose again with the lock row locked: since it was read, it may have been
                # finished or released, or adopted by its worker registering again.
                current = GroupLock.objects.select_for_update().filter(pk=lock.pk).first()
                if current is None:
                    continue
                now_silent = set(
                    silent.filter(pk=current.worker_id).values_list("pk", flat=True)
                    if current.worker_id is not None
                    else []
                )
                reason = diagnose(current, now_silent, margin)
                if reason is None:
                    logger.info("lock=%s is held again by worker=%s", lock.key, current.worker_id)
                    continue
                lock = current
                outcome = GroupLock.objects.recover(
                    lock, reason, decay_step=iq_settings.PRIORITY_DECAY_STEP, now=now
                )
            result.recovered[lock.key] = outcome
            logger.info("recovered lock=%s entry=%s outcome=%s", lock.key, lock.entry_id, outcome)
        if silent_ids:
            with fence():
                marked = Worker.objects.mark_stopped(
                    Worker.objects.filter(pk__in=silent_ids), died=True
                )
            if marked:
                logger.info("marked silent workers dead count=%s", marked)
        return result
