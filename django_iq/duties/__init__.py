"""The leader's duties, one module each. A new duty is a class with ``name``,
``interval_seconds`` and ``run_once(now, fence)`` (see ``base.Duty``), added to
``default_duties()``."""

from django_iq.duties.base import Duty, Fence
from django_iq.duties.cancels import CancelDuty
from django_iq.duties.compaction import CompactionDuty
from django_iq.duties.cron import CronDuty, CronPass
from django_iq.duties.expiry import ExpiryDuty
from django_iq.duties.promotion import PromotionDuty
from django_iq.duties.pruning import PruningDuty
from django_iq.duties.recovery import RecoveryDuty, RecoveryPass, diagnose
from django_iq.duties.sampling import SamplingDuty
from django_iq.duties.vacuum import VacuumDuty, VacuumPass


def default_duties() -> list[Duty]:
    """The duties of ``runleader``, in the order each pass runs them."""
    return [
        PromotionDuty(),
        ExpiryDuty(),
        CancelDuty(),
        CronDuty(),
        RecoveryDuty(),
        CompactionDuty(),
        PruningDuty(),
        SamplingDuty(),
        VacuumDuty(),
    ]


__all__ = [
    "CancelDuty",
    "CompactionDuty",
    "CronDuty",
    "CronPass",
    "Duty",
    "ExpiryDuty",
    "Fence",
    "PromotionDuty",
    "PruningDuty",
    "RecoveryDuty",
    "RecoveryPass",
    "SamplingDuty",
    "VacuumDuty",
    "VacuumPass",
    "default_duties",
    "diagnose",
]
