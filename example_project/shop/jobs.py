"""The shop's jobs, discovered by workers from this module: CPU-bound, I/O-like, retrying, grouped."""

from __future__ import annotations

import hashlib
import logging
import random
import time

from django.db.models import F
from django.utils import timezone

from django_iq import job
from shop.models import LoyaltyAccount, Payment, Report, SentEmail

logger = logging.getLogger(__name__)


class CardDeclined(Exception):
    """The pretend card processor refused a charge; the job fails and django_iq retries it."""


@job(queue="reports")
def build_report(*, batch: str, name: str, iterations: int) -> str:
    """Hash ``name`` through ``iterations`` rounds of SHA-256, store and return the digest."""
    started = time.perf_counter()
    digest = hashlib.sha256(name.encode()).digest()
    for _ in range(iterations):
        digest = hashlib.sha256(digest).digest()
    seconds = time.perf_counter() - started
    Report.objects.create(
        batch=batch, name=name, iterations=iterations, digest=digest.hex(), seconds=seconds
    )
    logger.info("report built name=%s iterations=%s seconds=%.3f", name, iterations, seconds)
    return digest.hex()


@job(queue="emails", priority=10)
def send_receipt(*, batch: str, recipient: str, subject: str) -> None:
    """Talk to a slow pretend mail server (a short random sleep), then record the sent email."""
    delivery_seconds = random.uniform(0.05, 0.3)
    time.sleep(delivery_seconds)
    SentEmail.objects.create(
        batch=batch,
        recipient=recipient,
        subject=subject,
        delivery_ms=round(delivery_seconds * 1000),
    )


@job(max_attempts=3, backoff_base_seconds=0.2, backoff_max_seconds=2)
def charge_card(*, batch: str, reference: str) -> str:
    """Charge payment ``reference``; the card is declined ``Payment.declines`` times first.

    The attempt count lives in the payment row, so the outcome of each attempt is decided by the
    database, not by the worker that happens to run it. Raises ``CardDeclined`` to be retried.
    """
    if not Payment.objects.filter(reference=reference).update(attempts=F("attempts") + 1):
        # Its demo run was cleared while the entry waited: there is nothing left to charge.
        logger.warning("payment gone reference=%s batch=%s; nothing to charge", reference, batch)
        return "gone"
    payment = Payment.objects.get(reference=reference)
    if payment.attempts <= payment.declines:
        raise CardDeclined(
            f"card declined for payment {reference} (attempt {payment.attempts}, "
            f"declined {payment.declines} time(s) before it goes through)"
        )
    Payment.objects.filter(pk=payment.pk).update(status=Payment.Status.PAID, paid_at=timezone.now())
    return "paid"


@job
def add_points(*, batch: str, customer: str, points: int) -> int:
    """Add ``points`` to ``customer``'s loyalty account; return the new balance.

    Enqueue with ``group_key=f"customer:{customer}"``. The update is a deliberate
    read-modify-write with a pause in the middle: two jobs of one customer running at once would
    lose points, so a correct balance shows that the group lock ran them one at a time.
    """
    account, _ = LoyaltyAccount.objects.get_or_create(batch=batch, customer=customer)
    time.sleep(random.uniform(0.005, 0.02))  # looking up the customer's tier, say
    account.points += points
    account.updates += 1
    account.save(update_fields=["points", "updates"])
    return account.points
