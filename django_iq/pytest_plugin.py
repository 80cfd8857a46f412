"""The ``iq_jobs`` pytest fixture, loaded by pytest through the ``pytest11`` entry point of the
django-iq distribution (with pytest-django providing the database)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from django_iq.testing.capture import EnqueuedJobs


@pytest.fixture
def iq_jobs(request: pytest.FixtureRequest) -> Iterator[EnqueuedJobs]:
    """What the test enqueues from here on: ``iq_jobs.enqueued()``, ``assert_enqueued``,
    ``assert_not_enqueued``, and ``run()`` (``run_jobs``). Asks for database access the way the
    test does (``django_db`` mark, ``transactional_db``), or for the ``db`` fixture if it does
    not."""
    # Imported here: pytest loads this plugin before Django's settings are configured.
    from django_iq.testing.capture import EnqueuedJobs

    if "transactional_db" not in request.fixturenames and not request.node.get_closest_marker(
        "django_db"
    ):
        request.getfixturevalue("db")
    capture = EnqueuedJobs().start()
    yield capture
    capture.stop()
