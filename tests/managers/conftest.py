"""Helpers shared by the manager tests."""

from __future__ import annotations

from django_iq.managers import Claim
from django_iq.models import Entry, Worker


def claimed_ids(claims: list[Claim]) -> list[int]:
    return [entry.pk for claim in claims for entry in claim.entries]


def claim_one(worker: Worker | None = None, queue: str = "default") -> Claim:
    """Claim everything ready in ``queue``, which the test arranged to be exactly one claim."""
    (claim,) = Entry.objects.claim(worker, 10, queue)
    return claim
