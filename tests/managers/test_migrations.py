"""Migrations: the models match them, and django_iq migrates to zero and back."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from django_iq.models import Entry, Queue
from tests.testapp.jobs import record

# Partial where the database supports it (PostgreSQL, SQLite), plain on MariaDB.
PARTIAL_INDEXES = {"iq_entry_ready_idx", "iq_entry_due_idx"}


def django_iq_tables() -> set[str]:
    return {
        name for name in connection.introspection.table_names() if name.startswith("django_iq_")
    }


def applied_django_iq_migrations() -> list[str]:
    executor = MigrationExecutor(connection)
    return sorted(name for app, name in executor.loader.applied_migrations if app == "django_iq")


@pytest.mark.django_db
def test_the_models_need_no_new_migration() -> None:
    out = StringIO()
    try:
        call_command("makemigrations", "--check", "--dry-run", stdout=out, stderr=out)
    except SystemExit:
        pytest.fail(
            "The models changed without a migration; run `python -m django makemigrations "
            "django_iq --settings=tests.settings`, review it, rename it for what it does and add "
            f"it to django_iq/migrations/.\n{out.getvalue()}"
        )
    assert "No changes detected" in out.getvalue()


@pytest.mark.django_db
def test_the_claim_and_promotion_indexes_exist() -> None:
    with connection.cursor() as cursor:
        names = set(connection.introspection.get_constraints(cursor, "django_iq_entry"))

    assert names >= PARTIAL_INDEXES, f"missing: {sorted(PARTIAL_INDEXES - names)}"


INDEX_DEFINITION_SQL = {
    "postgresql": "SELECT indexdef FROM pg_indexes WHERE indexname = %s",
    "sqlite": "SELECT sql FROM sqlite_master WHERE type = 'index' AND name = %s",
}


@pytest.mark.skipif(
    not connection.features.supports_partial_indexes,
    reason="MariaDB cannot build partial indexes; the same indexes are plain there",
)
@pytest.mark.django_db
@pytest.mark.parametrize(
    ("name", "state"), [("iq_entry_ready_idx", "'pending'"), ("iq_entry_due_idx", "'initial'")]
)
def test_the_claim_and_promotion_indexes_are_partial(name: str, state: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(INDEX_DEFINITION_SQL[connection.vendor], [name])
        (definition,) = cursor.fetchone()

    assert "WHERE" in definition.upper() and state in definition, definition


@pytest.mark.django_db(transaction=True)
def test_django_iq_migrates_to_zero_and_back() -> None:
    applied = applied_django_iq_migrations()
    tables = django_iq_tables()
    assert applied and tables, "the test database starts fully migrated"

    try:
        call_command("migrate", "django_iq", "zero", verbosity=0)
        assert django_iq_tables() == set(), "migrating to zero removes every django_iq table"
        assert applied_django_iq_migrations() == []
    finally:
        # Forward again even if the way down failed, so later tests get a complete schema.
        call_command("migrate", "django_iq", verbosity=0)

    assert django_iq_tables() == tables
    assert applied_django_iq_migrations() == applied

    entry = record.enqueue("after-remigrate")
    assert Entry.objects.filter(pk=entry.pk, queue=Queue.objects.get(name="default")).exists()


POISONED_RUN_AT = {
    # What a driver cannot read back: year 1 at +05:00 is year 0 in UTC on PostgreSQL.
    "postgresql": "'0001-01-01 00:00:00+05:00'",
    "mysql": "'1000-01-01 00:00:00'",
    "sqlite": "'0001-01-01 00:00:00'",
}


def insert_by_hand(run_at_sql: str) -> None:
    """Write an entry row with SQL, as a script or another program might."""
    # The queue too by SQL: the schema may be an old one, without the model's later columns.
    if not Queue.objects.filter(name="default").exists():
        with connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO django_iq_queue (name, weight, is_paused, created_at)"
                " VALUES ('default', 1, %s, '2026-01-01 00:00:00')",
                [False],
            )
    sql = (
        "INSERT INTO django_iq_entry (queue, job_name, args, kwargs, priority, state, group_key,"
        " lock_key, run_at, attempts, max_attempts, enqueued_at) VALUES ('default',"
        " 'tests.testapp.jobs.noop', '[]', '{}', 0, 'initial', NULL, 'e:by-hand', %s, 0, 1,"
        " '2026-01-01 00:00:00')"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql.replace("%s", run_at_sql))


@pytest.mark.django_db(transaction=True)
def test_the_run_at_migration_moves_unreadable_times_into_range_and_then_refuses_them() -> None:
    from django.db import IntegrityError

    from django_iq.bounds import EARLIEST_RUN_AT

    try:
        call_command("migrate", "django_iq", "0003", verbosity=0)
        insert_by_hand(POISONED_RUN_AT[connection.vendor])
        call_command("migrate", "django_iq", verbosity=0)
    finally:
        call_command("migrate", "django_iq", verbosity=0)

    assert Entry.objects.get(lock_key="e:by-hand").run_at == EARLIEST_RUN_AT
    Entry.objects.all().delete()
    with pytest.raises(IntegrityError):
        insert_by_hand(POISONED_RUN_AT[connection.vendor])


@pytest.mark.django_db(transaction=True)
def test_the_outcomes_migration_moves_finished_task_results_into_outcome_records() -> None:
    from django_iq.models import RunOutcome

    at = timezone.now()
    try:
        call_command("migrate", "django_iq", "0015", verbosity=0)
        old = (
            MigrationExecutor(connection)
            .loader.project_state(("django_iq", "0015_queue_metrics_merged"))
            .apps
        )
        Result = old.get_model("django_iq", "Result")
        common = {"task_path": "tests.testapp.tasks.add", "queue_name": "default"}
        Result.objects.create(
            id="ok",
            status="SUCCESSFUL",
            args=[1, 2],
            return_value=3,
            errors=[{"exception_class_path": "builtins.ValueError", "traceback": "tb1"}],
            worker_ids=["w:1", "w:2"],
            last_attempted_at=at - timedelta(seconds=1),
            finished_at=at,
            **common,
        )
        Result.objects.create(
            id="cancelled",
            status="FAILED",
            errors=[
                {"exception_class_path": "django_iq.exceptions.EntryCancelled", "traceback": "c"}
            ],
            finished_at=at,
            **common,
        )
        Result.objects.create(id="waiting", status="READY", **common)
        call_command("migrate", "django_iq", verbosity=0)
    finally:
        call_command("migrate", "django_iq", verbosity=0)

    rows = list(
        RunOutcome.objects.order_by("result_id", "attempt").values_list(
            "result_id", "attempt", "status", "worker_name", "return_value", "exception_class"
        )
    )
    assert rows == [
        ("cancelled", 1, "cancelled", "", None, "django_iq.exceptions.EntryCancelled"),
        ("ok", 1, "failed", "w:1", None, "builtins.ValueError"),
        ("ok", 2, "succeeded", "w:2", 3, ""),
    ]
    success = RunOutcome.objects.get(result_id="ok", status="succeeded")
    assert (success.finished_at, success.job_name, success.args) == (
        at,
        "tests.testapp.tasks.add",
        [1, 2],
    )
    assert "django_iq_result" not in django_iq_tables()
