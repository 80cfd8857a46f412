"""Helpers for testing code that enqueues jobs: ``run_jobs`` runs entries in the test's own
thread and transaction, ``IQTestMixin`` and the ``iq_jobs`` pytest fixture capture what a test
enqueued and assert on it. See docs/howto/testing.md."""

from django_iq.inline_runs import MAX_RUNS, Outcome, TooManyRuns, run_jobs
from django_iq.processing import FAILED, RETRYING, SNOOZED, SUCCEEDED
from django_iq.testing.capture import EnqueuedJob, EnqueuedJobs
from django_iq.testing.mixins import IQTestMixin

__all__ = [
    "FAILED",
    "MAX_RUNS",
    "RETRYING",
    "SNOOZED",
    "SUCCEEDED",
    "EnqueuedJob",
    "EnqueuedJobs",
    "IQTestMixin",
    "Outcome",
    "TooManyRuns",
    "run_jobs",
]
