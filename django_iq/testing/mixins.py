"""``IQTestMixin``: the capture and ``run_jobs`` as ``TestCase`` methods."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django_iq.inline_runs import Outcome, run_jobs
from django_iq.registry import BoundJob, Job
from django_iq.testing.assertions import EnqueuedAssertions
from django_iq.testing.capture import EnqueuedJob, EnqueuedJobs
from django_iq.wait_listener import Hub


class IQTestMixin(EnqueuedAssertions):
    """Mix into a ``TestCase`` or ``TransactionTestCase``: what each test enqueues is captured
    from ``setUp`` on, ``assertEnqueued`` / ``assertNotEnqueued`` assert on it, and
    ``run_jobs`` runs it (``run`` is unittest's own method, hence the longer name)."""

    iq_jobs: EnqueuedJobs

    def setUp(self) -> None:
        super().setUp()  # type: ignore[misc]
        self.iq_jobs = EnqueuedJobs().start()
        self.addCleanup(self.iq_jobs.stop)  # type: ignore[attr-defined]
        # A wait() outside a transaction (TransactionTestCase, PostgreSQL) listens on a
        # connection of its own: closed after the test, so that the test database can be dropped.
        self.addCleanup(Hub.stop_for_process)  # type: ignore[attr-defined]

    def enqueued(
        self, job: Job[Any, Any] | BoundJob | str | Any = None, **filters: Any
    ) -> list[EnqueuedJob]:
        """The entries this test enqueued (see ``EnqueuedJobs.enqueued``)."""
        return self.iq_jobs.enqueued(job, **filters)

    def run_jobs(self, queue: str | Sequence[str] | None = None, **options: Any) -> list[Outcome]:
        """``django_iq.testing.run_jobs`` with the same arguments."""
        return run_jobs(queue, **options)
