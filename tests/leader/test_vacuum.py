"""The vacuum duty: on PostgreSQL the leader vacuums the hot tables once they hold more dead
rows than the threshold and than live rows; elsewhere it does nothing."""

from __future__ import annotations

import pytest
from django.db import connection
from django.utils import timezone

from django_iq import enqueue_many
from django_iq.duties import VacuumDuty
from django_iq.leader import Leader
from django_iq.models import Entry
from tests.conftest import iq_settings_with, wait_until
from tests.testapp.jobs import record

pytestmark = pytest.mark.django_db(transaction=True)


def entry_stats() -> tuple[int, int]:
    """(dead rows, vacuums) of the entry table, as the server counts them now."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT n_dead_tup, vacuum_count FROM pg_stat_user_tables WHERE relname = %s",
            [Entry._meta.db_table],
        )
        dead, vacuums = cursor.fetchone()
    return int(dead), int(vacuums)


@pytest.mark.postgresql
def test_a_table_full_of_dead_rows_is_vacuumed_and_a_clean_one_is_not() -> None:
    enqueue_many(record, [((f"v-{i}",), {}) for i in range(300)])
    Entry.objects.all().delete()
    wait_until(lambda: entry_stats()[0] >= 300, timeout=15, message="the dead rows counted")
    dead, vacuums = entry_stats()
    leader = Leader(name="vacuumer", duties=[VacuumDuty()], lease_seconds=30)

    with iq_settings_with(VACUUM_DEAD_ROWS=1_000_000):
        assert leader.run_once(timezone.now()).ran["vacuum"].vacuumed == {}
    with iq_settings_with(VACUUM_DEAD_ROWS=100):
        result = VacuumDuty().run_once(timezone.now(), leader.fence)

    assert list(result.vacuumed) == [Entry._meta.db_table]
    assert result.vacuumed[Entry._meta.db_table] >= dead >= 300
    assert result.skipped == {}
    after_dead, _ = wait_until(
        lambda: (s := entry_stats())[1] > vacuums and s, timeout=15, message="the vacuum counted"
    )
    assert after_dead < 300


def test_without_postgresql_statistics_the_duty_does_nothing(vendor: str) -> None:
    if vendor == "postgresql":
        pytest.skip("PostgreSQL keeps dead-row statistics")
    leader = Leader(name="vacuumer", duties=[VacuumDuty()], lease_seconds=30)

    with iq_settings_with(VACUUM_DEAD_ROWS=1):
        result = leader.run_once(timezone.now()).ran["vacuum"]

    assert (result.vacuumed, result.skipped) == ({}, {})
