"""System checks: every id in django_iq/checks.py, with its full message and hint."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.conf import settings
from django.core.checks import Error, Warning
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.db import connections
from django.test import override_settings

# Declared once under the test settings: the checks below import the task modules, and one
# first imported while a test has replaced QUEUES would be refused its queue.
import tests.testapp.tasks  # noqa: F401
from django_iq.checks import check_database, check_leader_settings, check_settings
from django_iq.conf import iq_settings

SETTINGS_HINT = "See docs/reference/settings.md."


def iq(**settings: Any) -> override_settings:
    """Replace ``DJANGO_IQ`` entirely, so only the keys under test are set."""
    return override_settings(DJANGO_IQ=settings)


def test_the_test_settings_pass_every_check() -> None:
    assert check_settings() == []
    assert check_leader_settings() == []
    assert check_database(databases=["default"]) == []


@pytest.mark.django_db
def test_manage_py_check_reports_django_iq_errors() -> None:
    with iq(PROCESSING_THREADS=0), pytest.raises(SystemCheckError, match=r"django_iq\.E004"):
        call_command("check")


@iq()
def test_an_empty_dict_passes() -> None:
    assert check_settings() == []


@override_settings(DJANGO_IQ=["QUEUES"])
def test_e001_django_iq_must_be_a_dict() -> None:
    assert check_settings() == [
        Error(
            "DJANGO_IQ must be a dict, got list.",
            hint="Set DJANGO_IQ = {} or a dict of the keys in docs/reference/settings.md.",
            id="django_iq.E001",
        )
    ]


@iq(POLL_INTERVALL_SECONDS=1, TOTALLY_UNKNOWN=2)
def test_e002_unknown_keys_with_a_suggestion_when_one_is_close() -> None:
    assert check_settings() == [
        Error(
            "DJANGO_IQ has an unknown key 'POLL_INTERVALL_SECONDS'.",
            hint="Did you mean 'POLL_INTERVAL_SECONDS'?",
            id="django_iq.E002",
        ),
        Error(
            "DJANGO_IQ has an unknown key 'TOTALLY_UNKNOWN'.",
            hint=SETTINGS_HINT,
            id="django_iq.E002",
        ),
    ]


@pytest.mark.parametrize(
    ("key", "value", "expected", "default"),
    [
        ("PROCESSING_THREADS", "4", "int, got str '4'", "4"),
        ("PROCESSING_THREADS", True, "int, got bool True", "4"),
        ("PROCESSING_THREADS", 4.0, "int, got float 4.0", "4"),
        ("POLL_INTERVAL_SECONDS", "1s", "int or float, got str '1s'", "1.0"),
        ("QUEUES", ["default"], "dict, got list ['default']", "{}"),
        ("JOB_MODULES", "app.jobs", "list or tuple, got str 'app.jobs'", "[]"),
        ("DEFAULT_QUEUE", None, "str, got NoneType None", "'default'"),
        ("RUN_ON_COMMIT", "yes", "bool, got str 'yes'", "False"),
    ],
)
def test_e003_values_of_the_wrong_type(key: str, value: Any, expected: str, default: str) -> None:
    with iq(**{key: value}):
        assert check_settings() == [
            Error(
                f"DJANGO_IQ[{key!r}] must be {expected}.",
                hint=f"The default is {default}.",
                id="django_iq.E003",
            )
        ]


@override_settings(DEBUG=False)
def test_w003_run_on_commit_warns_when_debug_is_off() -> None:
    with iq(RUN_ON_COMMIT=True):
        assert check_settings() == [
            Warning(
                "DJANGO_IQ['RUN_ON_COMMIT'] is True while DEBUG is False: jobs run inside the "
                "web processes that enqueue them, one at a time, after each commit.",
                hint="RUN_ON_COMMIT is for development. In production leave it out and run "
                "`manage.py runworker` (docs/howto/testing.md).",
                id="django_iq.W003",
            )
        ]


@override_settings(DEBUG=True)
def test_run_on_commit_passes_the_checks_under_debug() -> None:
    with iq(RUN_ON_COMMIT=True):
        assert check_settings() == []


@iq(POLL_INTERVAL_SECONDS=2)
def test_an_int_is_accepted_where_a_float_is_expected() -> None:
    assert check_settings() == []


@pytest.mark.parametrize(
    ("key", "value", "bounds", "default"),
    [
        ("PROCESSING_THREADS", 0, "[1, 512]", "4"),
        ("PROCESSING_THREADS", 513, "[1, 512]", "4"),
        ("DEFAULT_PRIORITY", -101, "[-100, 100]", "0"),
        ("BACKOFF_JITTER", 1.5, "[0, 1]", "0.25"),
        ("DEFAULT_MAX_ATTEMPTS", 0, "[1, 100000]", "3"),
        ("DEFAULT_MAX_ATTEMPTS", 2**40, "[1, 100000]", "3"),
        ("BACKOFF_BASE_SECONDS", 1e12, "[0, 31536000]", "2.0"),
        ("BACKOFF_MAX_SECONDS", float("inf"), "[0, 31536000]", "3600.0"),
        ("BACKOFF_MAX_SECONDS", float("nan"), "[0, 31536000]", "3600.0"),
        ("MAX_ARGUMENTS_BYTES", 10, "[1024, 268435456]", "1048576"),
        ("ERROR_MESSAGE_MAX_CHARS", 0, "[100, 1000000]", "2000"),
    ],
)
def test_e004_numbers_out_of_range(key: str, value: float, bounds: str, default: str) -> None:
    with iq(**{key: value}):
        assert check_settings() == [
            Error(
                f"DJANGO_IQ[{key!r}] is {value!r}, out of range {bounds}.",
                hint=f"The default is {default}.",
                id="django_iq.E004",
            )
        ]


def test_e005_an_environment_variable_that_does_not_parse(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DJANGO_IQ_PROCESSING_THREADS", "many")
    iq_settings.reset()
    try:
        errors = check_settings()
    finally:
        monkeypatch.undo()
        iq_settings.reset()

    assert errors == [
        Error(
            "Environment variable DJANGO_IQ_PROCESSING_THREADS='many' is not a number; "
            "set it to a whole number or unset it.",
            hint="Environment variables DJANGO_IQ_* override settings.",
            id="django_iq.E005",
        )
    ]


def test_e005_an_environment_variable_out_of_range(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DJANGO_IQ_CPU_RESUME_PERCENT", "150")
    iq_settings.reset()
    try:
        errors = check_settings()
    finally:
        monkeypatch.undo()
        iq_settings.reset()

    assert errors == [
        Error(
            "Environment variable DJANGO_IQ_CPU_RESUME_PERCENT='150' is out of range [0, 100]; "
            "set it within the range or unset it.",
            hint="Environment variables DJANGO_IQ_* override settings.",
            id="django_iq.E005",
        )
    ]


RESUME_HINT = (
    "Workers stop claiming above the throttle level and start again below the resume level; "
    "a resume level at or above it would never throttle."
)


@iq(
    CPU_THROTTLE_PERCENT=80,
    CPU_RESUME_PERCENT=80,
    MEMORY_THROTTLE_PERCENT=70,
    MEMORY_RESUME_PERCENT=90,
)
def test_e006_resume_levels_must_be_below_throttle_levels() -> None:
    assert check_settings() == [
        Error(
            "CPU_RESUME_PERCENT (80) must be below CPU_THROTTLE_PERCENT (80).",
            hint=RESUME_HINT,
            id="django_iq.E006",
        ),
        Error(
            "MEMORY_RESUME_PERCENT (90) must be below MEMORY_THROTTLE_PERCENT (70).",
            hint=RESUME_HINT,
            id="django_iq.E006",
        ),
    ]


@iq(CPU_THROTTLE_PERCENT=50)
def test_e006_compares_against_the_default_resume_level() -> None:
    assert [e.msg for e in check_settings()] == [
        "CPU_RESUME_PERCENT (85.0) must be below CPU_THROTTLE_PERCENT (50)."
    ]


@iq(BACKOFF_BASE_SECONDS=10, BACKOFF_MAX_SECONDS=5)
def test_e007_the_backoff_cap_must_not_be_below_the_base() -> None:
    assert check_settings() == [
        Error(
            "BACKOFF_MAX_SECONDS (5) is below BACKOFF_BASE_SECONDS (10).",
            hint="The first retry waits BACKOFF_BASE_SECONDS; the cap must be at least that.",
            id="django_iq.E007",
        )
    ]


@pytest.mark.parametrize(
    ("token", "problem"),
    [("x", "1 characters"), ("a" * 31, "31 characters"), ("a" * 20 + " " * 20, "with spaces")],
)
def test_e020_a_metrics_token_must_be_long_and_without_spaces(token: str, problem: str) -> None:
    with override_settings(DJANGO_IQ={"METRICS_TOKEN": token}):
        errors = check_settings()

    assert [error.id for error in errors] == ["django_iq.E020"]
    assert problem in errors[0].msg
    assert "token_urlsafe(32)" in errors[0].hint


@pytest.mark.parametrize("token", [None, "", "k" * 32, "Zm9v-YmFy_" * 5])
def test_no_metrics_token_or_a_long_one_passes(token: str | None) -> None:
    with override_settings(DJANGO_IQ={"METRICS_TOKEN": token}):
        assert check_settings() == []


@pytest.mark.parametrize("name", ["", "q" * 101, 7])
def test_e008_queue_names_must_have_1_to_100_characters(name: Any) -> None:
    with iq(QUEUES={name: {}}):
        assert check_settings() == [
            Error(
                f"QUEUES has an invalid name {name!r}.",
                hint="Use 1 to 100 characters.",
                id="django_iq.E008",
            )
        ]


@iq(QUEUES={"emails": [("weight", 2)]})
def test_e008_queue_options_must_be_a_dict() -> None:
    assert check_settings() == [
        Error(
            "QUEUES['emails'] must be a dict, got list.",
            hint='e.g. {"weight": 2}',
            id="django_iq.E008",
        )
    ]


@iq(QUEUES={"emails": None, "reports": {"weight": 3, "max_concurrency": None, "is_paused": True}})
def test_queues_without_options_or_with_valid_options_pass() -> None:
    assert check_settings() == []


@iq(QUEUES={"emails": {"wieght": 2, "colour": "red"}})
def test_e009_unknown_queue_options_with_a_suggestion_when_one_is_close() -> None:
    assert check_settings() == [
        Error(
            "QUEUES['emails'] has an unknown option 'wieght'.",
            hint="Did you mean 'weight'?",
            id="django_iq.E009",
        ),
        Error(
            "QUEUES['emails'] has an unknown option 'colour'.",
            hint="Valid: weight, max_concurrency, is_paused, alert_waiting_seconds.",
            id="django_iq.E009",
        ),
    ]


@pytest.mark.parametrize(
    ("option", "value", "hint"),
    [
        (
            "weight",
            0,
            "The default is 1; a queue of weight 2 gets twice the share of a queue of weight 1.",
        ),
        (
            "weight",
            None,
            "The default is 1; a queue of weight 2 gets twice the share of a queue of weight 1.",
        ),
        (
            "weight",
            True,
            "The default is 1; a queue of weight 2 gets twice the share of a queue of weight 1.",
        ),
        ("max_concurrency", 0, "Use None (the default) for no limit."),
        ("max_concurrency", "2", "Use None (the default) for no limit."),
    ],
)
def test_e010_queue_weight_and_concurrency_must_be_positive_integers(
    option: str, value: Any, hint: str
) -> None:
    with iq(QUEUES={"emails": {option: value}}):
        assert check_settings() == [
            Error(
                f"QUEUES['emails'][{option!r}] must be an integer >= 1, got {value!r}.",
                hint=hint,
                id="django_iq.E010",
            )
        ]


E019_HINT = (
    "Name a DATABASES alias that connects to the same PostgreSQL database as django_iq's "
    "entries, directly (not through a pooler in transaction mode), or remove the key."
)


def test_e019_listen_database_must_be_an_alias_in_databases() -> None:
    with iq(LISTEN_DATABASE="direct"):
        assert check_settings() == [
            Error(
                "DJANGO_IQ['LISTEN_DATABASE'] is 'direct', which is not an alias in DATABASES.",
                hint=E019_HINT,
                id="django_iq.E019",
            )
        ]


def test_e019_listen_database_must_be_postgresql(monkeypatch: pytest.MonkeyPatch) -> None:
    # DATABASES itself, not override_settings: Django warns when DATABASES is overridden.
    monkeypatch.setitem(
        settings.DATABASES, "direct", {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}
    )
    with iq(LISTEN_DATABASE="direct"):
        assert check_settings() == [
            Error(
                "DJANGO_IQ['LISTEN_DATABASE'] is 'direct', an alias of "
                "'django.db.backends.sqlite3', not PostgreSQL.",
                hint=E019_HINT,
                id="django_iq.E019",
            )
        ]
    monkeypatch.setitem(
        settings.DATABASES, "direct", {"ENGINE": "django.db.backends.postgresql", "NAME": "iq"}
    )
    with iq(LISTEN_DATABASE="direct"):
        assert check_settings() == []


def test_e011_an_unsupported_database_vendor(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(connections["default"], "vendor", "oracle")

    assert check_database(databases=["default"]) == [
        Error(
            "django_iq does not support the 'oracle' database.",
            hint="Use PostgreSQL, MariaDB (>= 10.6) or SQLite.",
            id="django_iq.E011",
        )
    ]


def test_w001_sqlite_without_immediate_transactions(monkeypatch: pytest.MonkeyPatch) -> None:
    connection = connections["default"]
    monkeypatch.setattr(connection, "vendor", "sqlite")
    monkeypatch.setitem(connection.settings_dict, "OPTIONS", {"timeout": 30})

    assert check_database(databases=["default"]) == [
        Warning(
            "SQLite database 'default' does not use IMMEDIATE transactions.",
            hint='Set DATABASES[...]["OPTIONS"] = {"transaction_mode": "IMMEDIATE", '
            '"init_command": "PRAGMA journal_mode=WAL;"} so several worker processes can claim '
            "without 'database is locked' errors.",
            id="django_iq.W001",
        )
    ]


@pytest.mark.skipif(connections["default"].vendor != "mysql", reason="a MariaDB server setting")
@pytest.mark.django_db
def test_w002_max_arguments_bytes_too_close_to_max_allowed_packet() -> None:
    from django_iq.checks import max_allowed_packet

    packet = max_allowed_packet("default")
    assert packet is not None
    assert check_database(databases=["default"]) == [], "the defaults agree"
    with iq(MAX_ARGUMENTS_BYTES=packet // 2):
        (warning,) = check_database(databases=["default"])
    assert warning.id == "django_iq.W002"
    assert f"the max_allowed_packet of database 'default' ({packet:,} bytes)" in warning.msg


def test_database_checks_run_only_when_databases_are_checked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(connections["default"], "vendor", "oracle")

    assert check_database() == []
    assert check_database(databases=["other"]) == []


@iq(LEADER_LEASE_SECONDS=1, LEADER_POLL_SECONDS=0.6)
def test_e012_the_lease_must_outlast_two_polls() -> None:
    assert check_leader_settings() == [
        Error(
            "LEADER_LEASE_SECONDS (1) must be at least twice LEADER_POLL_SECONDS (0.6).",
            hint="The leader renews its lease every poll; a shorter lease would expire between renewals.",
            id="django_iq.E012",
        )
    ]


@iq(WORKER_SILENT_AFTER_SECONDS=1, HEARTBEAT_INTERVAL_SECONDS=0.6)
def test_e013_workers_are_silent_only_after_two_missed_heartbeats() -> None:
    assert check_leader_settings() == [
        Error(
            "WORKER_SILENT_AFTER_SECONDS (1) must be at least twice HEARTBEAT_INTERVAL_SECONDS (0.6).",
            hint="Otherwise a live worker could be declared dead between two heartbeats.",
            id="django_iq.E013",
        )
    ]


@iq(WORKER_SILENT_AFTER_SECONDS=15, HEARTBEAT_INTERVAL_SECONDS=5)
def test_e021_the_silence_limit_must_leave_room_to_fence_before_it() -> None:
    assert check_leader_settings() == [
        Error(
            "WORKER_SILENT_AFTER_SECONDS (15) leaves no margin for self-fencing with "
            "HEARTBEAT_INTERVAL_SECONDS (5): a worker cut off from the database fences itself "
            "2 heartbeat intervals before the silence limit, at 5s, which must be at least 2 "
            "heartbeat intervals (10s).",
            hint="Set WORKER_SILENT_AFTER_SECONDS to at least 20 (four heartbeat intervals), or "
            "heartbeat more often (docs/howto/network-partitions.md).",
            id="django_iq.E021",
        )
    ]


@iq(WORKER_SILENT_AFTER_SECONDS=20, HEARTBEAT_INTERVAL_SECONDS=5)
def test_e021_four_heartbeats_of_silence_leave_room_to_fence() -> None:
    assert check_leader_settings() == []


@iq(LEADER_LEASE_SECONDS=1, LEADER_POLL_SECONDS=0.6, UNKNOWN_KEY=1)
def test_leader_checks_wait_until_the_keys_are_known() -> None:
    assert check_leader_settings() == []
    assert [e.id for e in check_settings()] == ["django_iq.E002"]


CRON_HINT = (
    "Valid keys: job, schedule, every, at, timezone, args, kwargs, queue, priority; job and one "
    "of schedule, every and at are required."
)


@pytest.mark.parametrize(
    ("spec", "message", "hint"),
    [
        (
            "*/5 * * * *",
            "DJANGO_IQ['CRON']['nightly'] must be a dict, got str.",
            'e.g. {"job": "app.jobs.cleanup", "schedule": "0 3 * * *"}',
        ),
        (
            {"job": "tests.testapp.jobs.noop", "schedule": "* * * * *", "evry": 5},
            "DJANGO_IQ['CRON']['nightly'] has unknown keys ['evry'].",
            CRON_HINT,
        ),
        (
            {"job": "tests.testapp.jobs.noop"},
            "DJANGO_IQ['CRON']['nightly'] is missing ['schedule, every or at'].",
            CRON_HINT,
        ),
        (
            {"jobs": "tests.testapp.jobs.noop", "schedule": "* * * * *"},
            "DJANGO_IQ['CRON']['nightly'] has unknown keys ['jobs'] and is missing ['job'].",
            CRON_HINT,
        ),
    ],
)
def test_e014_cron_entries_must_be_dicts_of_known_keys(spec: Any, message: str, hint: str) -> None:
    with iq(CRON={"nightly": spec}):
        assert check_leader_settings() == [Error(message, hint=hint, id="django_iq.E014")]


@pytest.mark.parametrize(
    ("schedule", "zone", "problem"),
    [
        (
            "every day",
            "UTC",
            "'every day' is not a valid cron expression; use five fields "
            '"minute hour day-of-month month day-of-week", e.g. "*/5 * * * *".',
        ),
        (
            "0 3 * * *",
            "Mars/Olympus",
            "'Mars/Olympus' is not a known time zone, e.g. 'UTC' or 'Europe/Paris'.",
        ),
    ],
)
def test_e015_cron_schedules_and_time_zones_must_be_valid(
    schedule: str, zone: str, problem: str
) -> None:
    spec = {"job": "tests.testapp.jobs.noop", "schedule": schedule, "timezone": zone}
    with iq(CRON={"nightly": spec}):
        assert check_leader_settings() == [
            Error(
                f"DJANGO_IQ['CRON']['nightly']: {problem}",
                hint="Check the schedule, every, at and timezone.",
                id="django_iq.E015",
            )
        ]


@pytest.mark.parametrize(
    ("schedule", "problem"),
    [
        (
            {"every": 60},
            "every must be a timedelta, e.g. timedelta(minutes=5), not int (60).",
        ),
        (
            {"every": timedelta(milliseconds=1500)},
            "every (0:00:01.500000) must be whole seconds, e.g. timedelta(seconds=90).",
        ),
        (
            {"every": timedelta(0)},
            "every (0:00:00) must be from 1 second to 366 days.",
        ),
        (
            {"at": datetime(2030, 1, 1, 9)},
            "at (2030-01-01T09:00:00) has no time zone; pass an aware datetime, e.g. "
            "datetime(2030, 1, 1, 9, tzinfo=UTC).",
        ),
        (
            {"at": "2030-01-01 09:00"},
            "at must be an aware datetime, e.g. datetime(2030, 1, 1, 9, tzinfo=UTC), not str "
            "('2030-01-01 09:00').",
        ),
        (
            {"every": timedelta(minutes=5), "timezone": "Mars/Olympus"},
            "'Mars/Olympus' is not a known time zone, e.g. 'UTC' or 'Europe/Paris'.",
        ),
    ],
)
def test_e015_intervals_and_one_off_times_must_be_valid(
    schedule: dict[str, Any], problem: str
) -> None:
    with iq(CRON={"nightly": {"job": "tests.testapp.jobs.noop", **schedule}}):
        assert check_leader_settings() == [
            Error(
                f"DJANGO_IQ['CRON']['nightly']: {problem}",
                hint="Check the schedule, every, at and timezone.",
                id="django_iq.E015",
            )
        ]


@pytest.mark.parametrize(
    ("schedule", "problem"),
    [
        ({"schedule": "0 0 30 2 *"}, "'0 0 30 2 *' has no fire time after "),
        ({"schedule": "0 9 * * 1-5 0 2026"}, "is not a valid cron expression; use five fields"),
        ({"schedule": "* * * * * *"}, "is not a valid cron expression; use five fields"),
        ({"schedule": "@hourly"}, "is not a valid cron expression; use five fields"),
        (
            {"at": datetime(1, 1, 1, tzinfo=UTC)},
            "at (0001-01-01T00:00:00+00:00) is out of range; a run may be set from 1900-01-01 "
            "to 9000-01-01 UTC.",
        ),
        (
            {"at": datetime(9999, 12, 31, tzinfo=UTC)},
            "at (9999-12-31T00:00:00+00:00) is out of range; a run may be set from 1900-01-01 "
            "to 9000-01-01 UTC.",
        ),
    ],
)
def test_e015_a_schedule_must_be_five_fields_with_a_fire_time_and_a_time_runs_may_have(
    schedule: dict[str, Any], problem: str
) -> None:
    with iq(CRON={"nightly": {"job": "tests.testapp.jobs.noop", **schedule}}):
        (error,) = check_leader_settings()
    assert error.id == "django_iq.E015"
    assert error.msg.startswith("DJANGO_IQ['CRON']['nightly']: ") and problem in error.msg


@iq(
    CRON={
        "nightly": {
            "job": "tests.testapp.jobs.noop",
            "schedule": "0 3 * * *",
            "every": timedelta(days=1),
        }
    }
)
def test_e015_a_cron_job_has_only_one_kind_of_schedule() -> None:
    assert check_leader_settings() == [
        Error(
            "DJANGO_IQ['CRON']['nightly'] has schedule and every; a cron job has exactly one of "
            "schedule (a cron expression), every (an interval) and at (one time).",
            hint="Keep one of them; declare another cron job for another schedule.",
            id="django_iq.E015",
        )
    ]


@iq(
    CRON={
        "often": {"job": "tests.testapp.jobs.noop", "every": timedelta(seconds=90)},
        "once": {"job": "tests.testapp.jobs.noop", "at": datetime(2030, 1, 1, 9, tzinfo=UTC)},
    }
)
def test_valid_intervals_and_one_off_times_pass() -> None:
    assert check_leader_settings() == []


@iq(CRON={"nightly": {"job": "billing.invoices.send_all", "schedule": "0 3 * * *"}})
def test_e016_cron_jobs_must_be_registered() -> None:
    assert check_leader_settings() == [
        Error(
            "DJANGO_IQ['CRON']['nightly']: 'billing.invoices.send_all' is not a registered job. "
            "Decorate the function with @django_iq.job in an installed app's jobs.py or a module "
            'listed in DJANGO_IQ["JOB_MODULES"].',
            hint="Cron jobs run registered jobs only.",
            id="django_iq.E016",
        )
    ]


@iq(
    CRON={
        "nightly": {
            "job": "tests.testapp.jobs.noop",
            "schedule": "0 3 * * *",
            "timezone": "Europe/Paris",
        }
    }
)
def test_a_valid_cron_declaration_passes() -> None:
    assert check_leader_settings() == []


@iq(PROCESSING_THREADS=0, CPU_THROTTLE_PERCENT=50, BACKOFF_BASE_SECONDS=10, BACKOFF_MAX_SECONDS=5)
def test_errors_in_single_keys_suppress_the_consistency_checks() -> None:
    # E002-E004 suppress E005-E010: the merged values are not worth comparing yet.
    assert [e.id for e in check_settings()] == ["django_iq.E004"]


def test_a_bad_environment_variable_suppresses_the_leader_checks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DJANGO_IQ_LEADER_POLL_SECONDS", "often")
    iq_settings.reset()
    try:
        with iq(LEADER_LEASE_SECONDS=1, LEADER_POLL_SECONDS=0.6):
            leader_errors = check_leader_settings()
            settings_errors = check_settings()
    finally:
        monkeypatch.undo()
        iq_settings.reset()

    assert leader_errors == []
    assert [e.id for e in settings_errors] == ["django_iq.E005"]


# -- W005: a queue only a job declares, one edit from a configured one -----------------------


def declared_by_jobs(monkeypatch: pytest.MonkeyPatch, **queues: str) -> None:
    """Register, for this test only, one job per keyword: its name, and the queue it declares."""
    from django_iq import registry
    from django_iq.options import JobOptions

    jobs = registry.registered_jobs()
    for name, queue in queues.items():
        jobs[f"shop.jobs.{name}"] = registry.Job(
            lambda: None, f"shop.jobs.{name}", JobOptions(queue=queue)
        )
    monkeypatch.setattr(registry, "_jobs", jobs)


@iq(QUEUES={"emails": {}, "reports": {"weight": 2}})
def test_w005_a_queue_one_edit_from_a_configured_queue_is_warned(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from django_iq.checks import check_job_queues

    declared_by_jobs(monkeypatch, send_receipt="emials", send_invoice="emials")
    assert check_job_queues() == [
        Warning(
            "Queue 'emials' is declared only by @job(queue='emials') (shop.jobs.send_invoice, "
            "shop.jobs.send_receipt) and is one edit away from the queue 'emails' of the "
            "settings.",
            hint="Did you mean 'emails'? Workers started with --queues emails never claim "
            "entries of 'emials'. If 'emials' is meant, add it to DJANGO_IQ[\"QUEUES\"].",
            id="django_iq.W005",
        )
    ]


@iq(QUEUES={"emails": {}, "reports": {}})
def test_w005_the_default_queue_counts_as_configured_and_many_jobs_are_cut_short(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from django_iq.checks import check_job_queues

    declared_by_jobs(monkeypatch, a="defualt", b="defualt", c="defualt", d="defualt", e="email")
    messages = check_job_queues()
    assert [message.msg for message in messages] == [
        "Queue 'defualt' is declared only by @job(queue='defualt') (shop.jobs.a, shop.jobs.b, "
        "shop.jobs.c and 1 more) and is one edit away from the queue 'default' of the settings.",
        "Queue 'email' is declared only by @job(queue='email') (shop.jobs.e) and is one edit "
        "away from the queue 'emails' of the settings.",
    ]


@iq(QUEUES={"emails": {}, "reports": {}, "emials": {}})
def test_w005_configured_queues_and_queues_two_edits_away_are_not_warned(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from django_iq.checks import check_job_queues

    # 'emials' is configured: meant. 'exports' is two edits from 'reports': a queue of its own.
    declared_by_jobs(monkeypatch, a="emials", b="exports", c="thumbnails", d="emails")
    assert check_job_queues() == []


def test_the_test_jobs_declare_no_queue_near_a_configured_one() -> None:
    from django_iq.checks import check_job_queues

    assert check_job_queues() == []


@pytest.mark.parametrize(
    ("name", "known", "suggested"),
    [
        ("POLL_INTERVAL", ["POLL_INTERVAL_SECONDS", "DEFAULT_QUEUE"], ["POLL_INTERVAL_SECONDS"]),
        ("weigth", ["weight", "max_concurrency"], ["weight"]),
        ("emials", ["emails", "reports"], ["emails"]),
        ("fast", ["default", "emails"], []),
        ("billing", ["mailing"], []),
        ("staus", ["queue", "state", "job"], ["state"]),
        ("emials", ["images"], []),
        ("emial", ["emails", "default"], ["emails"]),
        ("app.jobs.recrod", ["app.jobs.record", "app.jobs.noop"], ["app.jobs.record"]),
        ("app.jobs.nothing", ["app.jobs.chain", "app.jobs.noop"], []),
        ("ap.jobs.record", ["app.jobs.record"], ["app.jobs.record"]),
    ],
)
def test_did_you_mean_suggests_only_close_names(
    name: str, known: list[str], suggested: list[str]
) -> None:
    from django_iq.wording import close_names

    assert close_names(name, known) == suggested
