"""Logging receivers for django_iq's signals, and the ``RUN_ON_COMMIT`` development mode's."""

from __future__ import annotations

import logging
from typing import Any

from django.dispatch import receiver

from django_iq import oncommit, signals

logger = logging.getLogger(__name__)


@receiver(signals.entry_enqueued)
def log_enqueued(sender: Any, entry: Any, **kwargs: Any) -> None:
    logger.debug(
        "enqueued entry=%s job=%s queue=%s state=%s",
        entry.pk,
        entry.job_name,
        entry.queue_id,
        entry.state,
    )


@receiver(signals.entry_finished)
def log_finished(
    sender: Any, entry: Any, worker_name: str, duration_seconds: float, **kwargs: Any
) -> None:
    logger.debug(
        "done entry=%s job=%s queue=%s worker=%s seconds=%.3f",
        entry.pk,
        entry.job_name,
        entry.queue_id,
        worker_name,
        duration_seconds,
    )


@receiver(signals.entry_failed)
def log_failed(sender: Any, entry: Any, error: Any, will_retry: bool, **kwargs: Any) -> None:
    logger.info(
        "failed entry=%s job=%s queue=%s attempt=%s/%s retry=%s error=%s",
        entry.pk,
        entry.job_name,
        entry.queue_id,
        error.attempt,
        entry.max_attempts,
        "yes" if will_retry else "no",
        error.exception_class,
    )


# RUN_ON_COMMIT (off by default: the receiver returns at once).
signals.entry_enqueued.connect(oncommit.entry_enqueued, dispatch_uid="django_iq.oncommit")
