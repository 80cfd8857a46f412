"""The read-only admins of what processes write: workers (live, silent or stopped, with their
load), group locks, the leadership lease, results and disabled jobs."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_iq.models import DisabledJob, Entry, GroupLock, LeaderLease, Worker
from tests.admin.conftest import (
    changelist_url,
    column,
    listed_ids,
    login_superuser,
    messages_of,
    run_action,
)
from tests.factories import (
    DisabledJobFactory,
    EntryFactory,
    GroupLockFactory,
    LeaderLeaseFactory,
    WorkerFactory,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def workers() -> dict[str, Worker]:
    now = timezone.now()
    return {
        "live": WorkerFactory(
            name="live",
            busy_threads=3,
            processing_threads=4,
            cpu_percent=12.4,
            memory_percent=40.6,
            heartbeat_at=now - timedelta(seconds=1),
        ),
        "silent": WorkerFactory(
            name="silent", busy_threads=2, heartbeat_at=now - timedelta(minutes=10)
        ),
        "stopped": WorkerFactory(
            name="stopped", heartbeat_at=now - timedelta(hours=1), stopped_at=now
        ),
        "leader": WorkerFactory(
            name="leader", role=Worker.Role.LEADER, processing_threads=0, is_throttled=True
        ),
    }


def test_worker_list_tells_live_from_silent_and_stopped_with_load_and_heartbeat_age(
    client: Client, workers: dict[str, Worker]
) -> None:
    login_superuser(client)

    response = client.get(changelist_url(Worker) + "?o=1")

    rows = dict(
        zip(
            column(response, "worker_name"),
            zip(
                column(response, "status_cell"),
                column(response, "threads_cell"),
                column(response, "cpu"),
                column(response, "memory"),
                strict=True,
            ),
            strict=True,
        )
    )
    assert rows == {
        "live": ("live", "3 busy / 1 idle of 4", "12%", "41%"),
        "silent": ("dead (silent)", "2 busy / 0 idle of 4", "0%", "0%"),
        "stopped": ("stopped", "0 busy / 0 idle of 4", "0%", "0%"),
        "leader": ("live", "-", "0%", "0%"),
    }
    ages = dict(
        zip(column(response, "worker_name"), column(response, "heartbeat_age"), strict=True)
    )
    assert int(ages["silent"].removesuffix(" s")) in range(599, 660)
    assert int(ages["live"].removesuffix(" s")) in range(60)


@pytest.mark.parametrize(
    ("status", "expected"),
    [("live", ["live", "leader"]), ("dead", ["silent"]), ("stopped", ["stopped"])],
)
def test_status_filter_uses_the_managers_liveness(
    client: Client, workers: dict[str, Worker], status: str, expected: list[str]
) -> None:
    login_superuser(client)

    response = client.get(changelist_url(Worker) + f"?status={status}")

    assert sorted(listed_ids(response)) == sorted(workers[name].pk for name in expected)


def test_worker_list_query_count_does_not_grow_with_workers(client: Client) -> None:
    login_superuser(client)
    WorkerFactory()
    with CaptureQueriesContext(connection) as small:
        client.get(changelist_url(Worker))

    WorkerFactory.create_batch(40)
    with CaptureQueriesContext(connection) as large:
        client.get(changelist_url(Worker))

    assert len(large.captured_queries) == len(small.captured_queries)


def test_lock_list_shows_each_holder_without_a_query_per_row(client: Client) -> None:
    login_superuser(client)
    GroupLockFactory(entry_for_key=EntryFactory())
    with CaptureQueriesContext(connection) as small:
        client.get(changelist_url(GroupLock))

    locks = [GroupLockFactory(entry_for_key=EntryFactory()) for _ in range(20)]
    with CaptureQueriesContext(connection) as large:
        response = client.get(changelist_url(GroupLock))

    assert len(large.captured_queries) == len(small.captured_queries)
    assert {lock.worker.name for lock in locks} <= {
        name.removeprefix("worker ") for name in column(response, "worker")
    }


def test_lease_list_says_whether_the_lease_is_held(client: Client) -> None:
    LeaderLeaseFactory()
    LeaderLeaseFactory(name="expired", expires_at=timezone.now() - timedelta(minutes=1))
    login_superuser(client)

    response = client.get(changelist_url(LeaderLease))

    icons = re.findall(r'class="field-is_held"><img [^>]*alt="(\w+)"', response.content.decode())
    held = dict(zip(column(response, "name"), icons, strict=True))
    assert held == {"leader": "True", "expired": "False"}


def test_enabling_a_disabled_job_from_its_list_enables_its_entries(client: Client) -> None:
    job = DisabledJobFactory(job_name="tests.testapp.jobs.record")
    entry = EntryFactory(disabled=True, deferred=True)
    login_superuser(client)

    response = run_action(client, DisabledJob, "enable_selected_jobs", [job])

    entry.refresh_from_db()
    assert entry.state == "initial"  # its run_at is still to come
    assert not DisabledJob.objects.exists()
    assert messages_of(response) == ["Enabled 1 job: tests.testapp.jobs.record (1 entry)."]
    assert Entry.objects.count() == 1
