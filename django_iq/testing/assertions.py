"""The ``TestCase`` assertions of ``IQTestMixin``, in a module of their own: unittest (and
pytest, for ``TestCase`` tests) cuts a failure's traceback at this module's frames, as it does
at its own assert methods and Django's, so a failed assertion shows at the test's line. Only
the assertions live here: ``run_jobs(raise_errors=True)`` re-raising a job's own
``AssertionError`` keeps the job's frames."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django_iq.registry import BoundJob, Job
from django_iq.testing.capture import EnqueuedJob, EnqueuedJobs

__unittest = True


class EnqueuedAssertions:
    """``assertEnqueued`` and ``assertNotEnqueued`` over ``self.iq_jobs``."""

    iq_jobs: EnqueuedJobs

    def assertEnqueued(  # noqa: N802 (unittest's naming)
        self,
        job: Job[Any, Any] | BoundJob | str | Any,
        *,
        args: Sequence[Any] | None = None,
        kwargs: dict[str, Any] | None = None,
        queue: str | None = None,
        count: int | None = None,
    ) -> list[EnqueuedJob]:
        """Fail unless ``job`` was enqueued (as ``EnqueuedJobs.assert_enqueued``)."""
        __tracebackhide__ = True
        return self.iq_jobs.assert_enqueued(job, args=args, kwargs=kwargs, queue=queue, count=count)

    def assertNotEnqueued(  # noqa: N802 (unittest's naming)
        self,
        job: Job[Any, Any] | BoundJob | str | Any,
        *,
        args: Sequence[Any] | None = None,
        kwargs: dict[str, Any] | None = None,
        queue: str | None = None,
    ) -> None:
        """Fail if ``job`` was enqueued (as ``EnqueuedJobs.assert_not_enqueued``)."""
        __tracebackhide__ = True
        self.iq_jobs.assert_not_enqueued(job, args=args, kwargs=kwargs, queue=queue)
