"""Enqueue batches of the shop's jobs; shared by the page's form and the ``demo`` command."""

from __future__ import annotations

import random
import uuid
from collections import Counter
from dataclasses import dataclass, field

from django.db import transaction

from shop.jobs import add_points, build_report, charge_card, send_receipt
from shop.models import Payment

# What one job of each kind is called, singular and plural.
NOUNS = {
    "report": ("report", "reports"),
    "email": ("receipt email", "receipt emails"),
    "payment": ("card charge", "card charges"),
    "loyalty": ("loyalty update", "loyalty updates"),
}
CUSTOMERS = ("ada", "alan", "barbara", "edsger", "grace", "ken", "margaret", "tim")


@dataclass
class Plan:
    """What a batch enqueued: jobs per kind, and the loyalty balances they should add up to."""

    batch: str
    jobs: Counter[str] = field(default_factory=Counter)
    expected_points: Counter[str] = field(default_factory=Counter)

    @property
    def total(self) -> int:
        return sum(self.jobs.values())

    def describe(self) -> str:
        """Return e.g. ``40 reports, 60 receipt emails, 30 card charges, 70 loyalty updates``."""
        return ", ".join(f"{n} {NOUNS[kind][n != 1]}" for kind, n in self.jobs.items() if n)


def enqueue_reports(plan: Plan, count: int, rng: random.Random) -> None:
    """Enqueue ``count`` CPU-bound report jobs of 50,000 to 200,000 SHA-256 rounds each."""
    build_report.enqueue_many(
        (
            (),
            {
                "batch": plan.batch,
                "name": f"report-{index}",
                "iterations": rng.randint(50_000, 200_000),
            },
        )
        for index in range(count)
    )
    plan.jobs["report"] += count


def enqueue_emails(plan: Plan, count: int, rng: random.Random) -> None:
    """Enqueue ``count`` receipt emails to random customers."""
    send_receipt.enqueue_many(
        (
            (),
            {
                "batch": plan.batch,
                "recipient": f"{rng.choice(CUSTOMERS)}@example.com",
                "subject": f"Your receipt #{index}",
            },
        )
        for index in range(count)
    )
    plan.jobs["email"] += count


def enqueue_payments(
    plan: Plan, count: int, rng: random.Random, declines: int | None = None
) -> None:
    """Create ``count`` payments and enqueue a charge for each, in one transaction.

    Each card is declined ``declines`` times (1 or 2 at random when None) before it goes through;
    with ``charge_card``'s three attempts, 3 declines or more make the entry fail for good.
    """
    payments = [
        Payment(
            batch=plan.batch,
            reference=f"{plan.batch}-{uuid.uuid4().hex[:12]}",
            customer=rng.choice(CUSTOMERS),
            amount_cents=rng.randint(100, 50_000),
            declines=rng.randint(1, 2) if declines is None else declines,
        )
        for _ in range(count)
    ]
    # Rows and entries commit together: a worker never sees a charge for a missing payment.
    with transaction.atomic():
        Payment.objects.bulk_create(payments)
        charge_card.enqueue_many(
            ((), {"batch": plan.batch, "reference": p.reference}) for p in payments
        )
    plan.jobs["payment"] += count


def enqueue_points(plan: Plan, customer: str, count: int, rng: random.Random) -> None:
    """Enqueue ``count`` loyalty updates for ``customer``, all under the customer's group key."""
    points = [rng.randint(1, 50) for _ in range(count)]
    add_points.using(group_key=f"customer:{customer}").enqueue_many(
        ((), {"batch": plan.batch, "customer": customer, "points": p}) for p in points
    )
    plan.jobs["loyalty"] += count
    plan.expected_points[customer] += sum(points)


def enqueue_mix(plan: Plan, count: int, rng: random.Random) -> None:
    """Enqueue ``count`` jobs: 20% reports, 30% emails, 15% payments, the rest loyalty updates."""
    reports, emails, payments = count * 20 // 100, count * 30 // 100, count * 15 // 100
    enqueue_reports(plan, reports, rng)
    enqueue_emails(plan, emails, rng)
    enqueue_payments(plan, payments, rng)
    loyalty = count - reports - emails - payments
    customers = CUSTOMERS[: max(1, min(len(CUSTOMERS), loyalty // 5))]
    for index, customer in enumerate(customers):
        share = loyalty // len(customers) + (1 if index < loyalty % len(customers) else 0)
        if share:
            enqueue_points(plan, customer, share, rng)
