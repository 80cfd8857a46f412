"""What the shop's jobs write: reports, sent receipts, payments and loyalty accounts.

Every row carries the ``batch`` that enqueued it ("web" for the page, "demo-..." for a demo run),
so a demo run can check its own results and clear those of earlier runs.
"""

from __future__ import annotations

from django.db import models
from django.utils import timezone

BATCH_HELP = 'Who enqueued the job that wrote this row: "web" or a demo run.'


class Report(models.Model):
    """The result of a CPU-bound job: a SHA-256 chain of ``iterations`` rounds over ``name``."""

    batch = models.CharField(max_length=40, db_index=True, help_text=BATCH_HELP)
    name = models.CharField(max_length=100)
    iterations = models.PositiveIntegerField()
    digest = models.CharField(max_length=64)
    seconds = models.FloatField(help_text="Time the job spent computing.")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ("-created_at",)

    def __str__(self) -> str:
        return f"{self.name}: {self.digest[:12]}..."


class SentEmail(models.Model):
    """A receipt the slow, I/O-like job "sent"."""

    batch = models.CharField(max_length=40, db_index=True, help_text=BATCH_HELP)
    recipient = models.EmailField()
    subject = models.CharField(max_length=200)
    delivery_ms = models.PositiveIntegerField(help_text="How long the pretend mail server took.")
    sent_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ("-sent_at",)

    def __str__(self) -> str:
        return f"{self.subject} -> {self.recipient}"


class Payment(models.Model):
    """A card payment whose card is declined ``declines`` times before the charge goes through."""

    class Status(models.TextChoices):
        PENDING = "pending", "pending"
        PAID = "paid", "paid"

    batch = models.CharField(max_length=40, db_index=True, help_text=BATCH_HELP)
    reference = models.CharField(max_length=80, unique=True)
    customer = models.CharField(max_length=50)
    amount_cents = models.PositiveIntegerField()
    declines = models.PositiveSmallIntegerField(
        default=0, help_text="Attempts to decline before accepting the charge."
    )
    attempts = models.PositiveSmallIntegerField(default=0, help_text="Charge attempts so far.")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    paid_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ("-id",)

    def __str__(self) -> str:
        return f"{self.reference} ({self.status})"


class LoyaltyAccount(models.Model):
    """A customer's loyalty points, only ever changed by the grouped ``add_points`` job."""

    batch = models.CharField(max_length=40, help_text=BATCH_HELP)
    customer = models.CharField(max_length=50)
    points = models.IntegerField(default=0)
    updates = models.PositiveIntegerField(default=0, help_text="How many jobs added points.")

    class Meta:
        ordering = ("batch", "customer")
        constraints = [
            models.UniqueConstraint(fields=["batch", "customer"], name="shop_loyalty_unique")
        ]

    def __str__(self) -> str:
        return f"{self.customer}: {self.points} points"
