"""The ``iq_jobs`` pytest fixture (and the closing of ``wait()``'s listening connection after each
test), loaded by pytest through the ``pytest11`` entry point of the
django-iq distribution (with pytest-django providing the database)."""

from __future__ import annotations

import sys
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


@pytest.fixture(autouse=True)
def _django_iq_wait_listener() -> Iterator[None]:
    """After each test, close the connection a ``wait()`` opened to listen for ended entries
    (PostgreSQL, outside a transaction), so that the test database can be dropped at the end of
    the session; the next wait opens another."""
    yield
    waiting = sys.modules.get("django_iq.wait_listener")
    if waiting is not None:
        waiting.Hub.stop_for_process()
