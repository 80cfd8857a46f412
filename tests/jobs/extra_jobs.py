"""A jobs module found only through ``DJANGO_IQ["JOB_MODULES"]`` (see test_registry.py)."""

from __future__ import annotations

from django_iq import job


@job(queue="reports")
def extra() -> None:
    return None
