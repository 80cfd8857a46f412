"""Managers and querysets: the only writers of state (queues, entries, locks, errors, workers,
the lease, cron jobs, task results and unique keys), one module per model family."""

from django_iq.managers.attempts import Failure, Success
from django_iq.managers.audit import OperatorActionManager
from django_iq.managers.batches import BatchManager
from django_iq.managers.claims import Claim
from django_iq.managers.common import ENQUEUE_BATCH_SIZE
from django_iq.managers.cron import CronJobManager
from django_iq.managers.dependencies import EntryDependencyManager
from django_iq.managers.entries import EntryManager
from django_iq.managers.entry_states import EntryQuerySet
from django_iq.managers.errors import EntryErrorManager, EntryErrorQuerySet
from django_iq.managers.job_limits import JobLimitManager
from django_iq.managers.jobstats import JobMinuteManager, JobStats, JobTally
from django_iq.managers.leadership import LEASE_NAME, LeaderLeaseManager
from django_iq.managers.locks import GroupLockManager
from django_iq.managers.outcome_records import RunOutcomeManager
from django_iq.managers.queue_metrics import QueueMinuteManager, QueueTally, QueueTotalManager
from django_iq.managers.queues import QueueManager, QueueStats
from django_iq.managers.series import QueueDepthMinuteManager, QueueLatencyMinuteManager
from django_iq.managers.tokens import ApiTokenManager
from django_iq.managers.uniquekeys import UniqueKeyManager
from django_iq.managers.workers import WorkerManager

__all__ = [
    "ENQUEUE_BATCH_SIZE",
    "LEASE_NAME",
    "ApiTokenManager",
    "BatchManager",
    "Claim",
    "CronJobManager",
    "EntryDependencyManager",
    "EntryErrorManager",
    "EntryErrorQuerySet",
    "EntryManager",
    "EntryQuerySet",
    "Failure",
    "GroupLockManager",
    "JobLimitManager",
    "JobMinuteManager",
    "JobStats",
    "JobTally",
    "LeaderLeaseManager",
    "OperatorActionManager",
    "QueueDepthMinuteManager",
    "QueueLatencyMinuteManager",
    "QueueManager",
    "QueueMinuteManager",
    "QueueStats",
    "QueueTally",
    "QueueTotalManager",
    "RunOutcomeManager",
    "Success",
    "UniqueKeyManager",
    "WorkerManager",
]
