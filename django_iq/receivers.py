"""Logging receivers for django_iq's signals, and the ``RUN_ON_COMMIT`` development mode's."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db.models.signals import post_delete
from django.dispatch import receiver

from django_iq import oncommit, signals
from django_iq.logs import get_logger, run_fields
from django_iq.models import ApiToken

logger = get_logger(__name__)


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
        extra=run_fields(
            entry, attempt=error.attempt, outcome="retrying" if will_retry else "failed"
        ),
    )


# RUN_ON_COMMIT (off by default: the receiver returns at once).
signals.entry_enqueued.connect(oncommit.entry_enqueued, dispatch_uid="django_iq.oncommit")


def revoke_deleted_users_tokens(sender: Any, instance: Any, **kwargs: Any) -> None:
    """A deleted user's API tokens are revoked: they refer to the user by primary key, not by
    a foreign key (the users may live in another database), so no cascade removes them."""
    ApiToken.objects.revoke_for_user(instance.pk)


post_delete.connect(
    revoke_deleted_users_tokens,
    sender=settings.AUTH_USER_MODEL,
    dispatch_uid="django_iq.revoke_deleted_users_tokens",
)
