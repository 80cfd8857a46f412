"""django_iq's tables in ``iq_status`` and on the dashboard: their sizes, the oldest record each
pruned table keeps, the warning when pruning falls behind, and a table that cannot be read."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone

from django_iq import partitions
from django_iq.models import RunOutcome, Worker
from django_iq.table_status import retention_behind, watched_models
from tests.conftest import iq_settings_with
from tests.factories import (
    EntryErrorFactory,
    EntryFactory,
    LeaderLeaseFactory,
    RunOutcomeFactory,
    WorkerFactory,
)
from tests.ops.conftest import close_to, run

pytestmark = pytest.mark.django_db

HOUR = 3600
# PRUNE_INTERVAL_SECONDS is 60 below: a slack of two passes and a minute (and, where outcome
# records are partitioned, one partition of OUTCOME_PARTITION_SECONDS, 60 below).
SLACK = 2 * 60 + 60
PARTITION = 60
DASHBOARD = "/admin/iq/dashboard/"


@pytest.fixture(autouse=True)
def _an_hour_of_outcomes() -> Iterator[None]:
    with iq_settings_with(
        OUTCOME_RETENTION_SECONDS=HOUR,
        PRUNE_INTERVAL_SECONDS=60,
        OUTCOME_PARTITION_SECONDS=PARTITION,
    ):
        yield


def tables() -> dict[str, dict[str, object]]:
    """The ``tables`` of ``iq_status --json``, by table name."""
    document = json.loads(run("iq_status", "--json"))
    return {table["table"]: table for table in document["tables"]}


def test_every_table_of_django_iq_is_listed_once_by_name() -> None:
    listed = tables()

    assert sorted(listed) == sorted(model._meta.db_table for model in watched_models())
    assert "django_iq_runoutcome" in listed
    assert all(table["error"] is None for table in listed.values())


@pytest.mark.skipif(
    connection.vendor == "sqlite", reason="SQLite gives sizes only when built with dbstat"
)
def test_sizes_are_positive_numbers_of_bytes_on_database_servers() -> None:
    EntryFactory.create_batch(20)
    RunOutcomeFactory.create_batch(20)

    listed = tables()

    sizes = {name: table["size_bytes"] for name, table in listed.items()}
    assert all(isinstance(size, int) and size > 0 for size in sizes.values()), sizes
    text = run("iq_status")
    assert "Tables (database default)" in text
    assert "django_iq_runoutcome" in text.split("Tables (database default)")[1]


def test_the_oldest_record_kept_is_the_oldest_written_with_its_age() -> None:
    now = timezone.now()
    oldest = now - timedelta(minutes=50)
    RunOutcomeFactory(finished_at=now - timedelta(minutes=5))
    RunOutcomeFactory(finished_at=oldest)
    EntryErrorFactory(failed_at=now - timedelta(days=2))

    listed = tables()

    outcomes = listed["django_iq_runoutcome"]
    assert close_to(str(outcomes["oldest_at"]), oldest)
    assert 50 * 60 <= float(str(outcomes["oldest_age_seconds"])) < 52 * 60
    assert (outcomes["time_column"], outcomes["retention_setting"]) == (
        "finished_at",
        "OUTCOME_RETENTION_SECONDS",
    )
    assert outcomes["retention_seconds"] == HOUR
    assert outcomes["retention_behind"] is False
    assert listed["django_iq_entryerror"]["time_column"] == "failed_at"
    assert listed["django_iq_entry"]["oldest_at"] is None
    assert listed["django_iq_entry"]["retention_setting"] is None
    line = next(
        line for line in run("iq_status").splitlines() if line.startswith("django_iq_runoutcome ")
    )
    assert re.search(r"  50 min \d+ s ago  +1 h 0 min  ok$", line), line


@pytest.mark.parametrize(
    ("past_slack", "behind"),
    [(60, True), (-60, False)],
    ids=["past-retention-and-slack", "within-slack"],
)
def test_retention_behind_is_warned_only_past_the_retention_and_its_slack(
    past_slack: int, behind: bool
) -> None:
    slack = SLACK + (PARTITION if partitions.is_partitioned() else 0)
    age_seconds = HOUR + slack + past_slack
    RunOutcomeFactory(finished_at=timezone.now() - timedelta(seconds=age_seconds))

    text = run("iq_status")

    assert tables()["django_iq_runoutcome"]["retention_behind"] is behind
    warning = (
        f"  retention behind: django_iq_runoutcome keeps records from 1 h "
        f"{(age_seconds - HOUR) // 60} min ago, retention is 1 h 0 min (OUTCOME_RETENTION_SECONDS)"
    )
    assert (warning in text.splitlines()) is behind
    assert ("retention behind" in text) is behind


def test_retention_behind_does_not_fail_check() -> None:
    LeaderLeaseFactory()
    RunOutcomeFactory(finished_at=timezone.now() - timedelta(days=2))

    text = run("iq_status", "--check")

    assert "None: healthy." in text
    assert "retention behind: django_iq_runoutcome keeps records from 2 d 0 h ago" in text


def test_a_stopped_worker_kept_for_its_sessions_is_not_counted_as_left_behind() -> None:
    with iq_settings_with(WORKER_RETENTION_SECONDS=HOUR, PRUNE_INTERVAL_SECONDS=60):
        stopped = WorkerFactory(sessions=[[4242, 1.0]])
        Worker.objects.filter(pk=stopped.pk).update(stopped_at=timezone.now() - timedelta(days=1))
        assert tables()["django_iq_worker"]["oldest_at"] is None

        Worker.objects.filter(pk=stopped.pk).update(sessions=[])
        assert tables()["django_iq_worker"]["retention_behind"] is True


def test_a_partitioned_table_may_keep_a_partition_more_before_it_is_behind() -> None:
    past_slack = HOUR + SLACK + 600

    assert retention_behind(past_slack, HOUR) is True
    assert retention_behind(past_slack, HOUR, partition_seconds=HOUR) is False
    assert retention_behind(None, HOUR) is False


@pytest.mark.parametrize("broken", ["column", "table"])
def test_a_table_that_cannot_be_read_is_reported_and_the_others_are_read(
    broken: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    RunOutcomeFactory()
    old = timezone.now() - timedelta(days=3)
    stopped = WorkerFactory()
    Worker.objects.filter(pk=stopped.pk).update(stopped_at=old)
    # One query fails: the outcome records' time column, or their whole table, is missing.
    if broken == "column":
        monkeypatch.setattr(RunOutcome._meta.get_field("finished_at"), "column", "no_such_column")
        name = "django_iq_runoutcome"
    else:
        monkeypatch.setattr(RunOutcome._meta, "db_table", "django_iq_no_such_table")
        name = "django_iq_no_such_table"

    with caplog.at_level(logging.ERROR, logger="django_iq.table_status"):
        listed = tables()
        text = run("iq_status")

    assert listed[name]["error"], listed[name]
    assert listed[name]["size_bytes"] is None
    assert [table for table, found in listed.items() if found["error"]] == [name]
    # Read after the failure (the tables go by name): on PostgreSQL, in the test's transaction.
    assert close_to(str(listed["django_iq_worker"]["oldest_at"]), old)
    assert f"  unreadable: {name}: " in text
    assert any(line.startswith(name) and "UNREADABLE" in line for line in text.splitlines())
    if broken == "column":
        assert [record.getMessage() for record in caplog.records] == [
            "table status unreadable table=django_iq_runoutcome database=default"
        ] * 2


# -- the dashboard ---------------------------------------------------------------------------


@pytest.mark.urls("tests.urls_dashboard")
def test_the_dashboard_lists_the_tables_and_warns_of_retention_behind(
    admin_client: Client,
) -> None:
    RunOutcomeFactory(finished_at=timezone.now() - timedelta(days=2))

    html = admin_client.get(DASHBOARD).content.decode()

    assert 'id="iq-tables"' in html
    assert 'data-table="django_iq_entry"' in html
    assert '<td data-pruning="behind"><span class="iq-broken">behind</span></td>' in html
    assert (
        '<p class="iq-broken" data-retention-behind="django_iq_runoutcome">Retention behind: '
        "django_iq_runoutcome keeps records from 2 d 0 h ago, retention is 1 h 0 min "
        "(OUTCOME_RETENTION_SECONDS)"
    ) in html


@pytest.mark.urls("tests.urls_dashboard")
def test_the_dashboard_shows_no_warning_while_pruning_keeps_up(admin_client: Client) -> None:
    RunOutcomeFactory(finished_at=timezone.now() - timedelta(minutes=30))

    html = admin_client.get(DASHBOARD).content.decode()

    assert 'data-table="django_iq_runoutcome"' in html
    assert '<td data-pruning="ok"><span class="iq-ok">ok</span></td>' in html
    assert "data-retention-behind" not in html
    assert "<caption>Tables</caption>" in html


@pytest.mark.urls("tests.urls_dashboard")
def test_the_tables_are_read_with_the_page_not_with_its_refreshes(admin_client: Client) -> None:
    partial = admin_client.get(DASHBOARD, {"partial": "1"}).content.decode()

    assert 'id="iq-queues"' in partial
    assert 'id="iq-tables"' not in partial
