"""System checks for the ``DJANGO_IQ`` settings and the database (ids django_iq.E0xx / W0xx)."""

from __future__ import annotations

import math
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.db import connections, router

from django_iq.conf import ENV_PREFIX, SETTINGS, iq_settings
from django_iq.exceptions import ImproperlyConfiguredIQ, JobNotRegistered
from django_iq.fencing import (
    FENCE_MARGIN_HEARTBEATS,
    FENCE_MIN_HEARTBEATS,
    fence_after_seconds,
    fence_leaves_margin,
)
from django_iq.models import Entry
from django_iq.options import settings_queues
from django_iq.preflight import is_ready, migrations_message, probe, unapplied_migrations
from django_iq.registry import autodiscover, get_job, registered_jobs
from django_iq.schedule import validate_declared_schedule
from django_iq.wording import close_names, one_edit_apart

QUEUE_OPTIONS = ("weight", "max_concurrency", "is_paused", "alert_waiting_seconds")
QUEUE_OPTION_HINTS = {
    "weight": "The default is 1; a queue of weight 2 gets twice the share of a queue of weight 1.",
    "max_concurrency": "Use None (the default) for no limit.",
    "alert_waiting_seconds": "Use None (the default) for ALERT_WAITING_SECONDS.",
}


def _type_names(types: tuple[type, ...]) -> str:
    return " or ".join(t.__name__ for t in types)


@register(Tags.compatibility)
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Validate every key of ``DJANGO_IQ``: known, well typed, in range, consistent."""
    errors: list[CheckMessage] = []
    user = getattr(settings, "DJANGO_IQ", {})
    if not isinstance(user, dict):
        return [
            Error(
                f"DJANGO_IQ must be a dict, got {type(user).__name__}.",
                hint="Set DJANGO_IQ = {} or a dict of the keys in docs/reference/settings.md.",
                id="django_iq.E001",
            )
        ]
    for key, value in user.items():
        spec = SETTINGS.get(key)
        if spec is None:
            close = close_names(str(key), list(SETTINGS))
            errors.append(
                Error(
                    f"DJANGO_IQ has an unknown key {key!r}.",
                    hint=f"Did you mean {close[0]!r}?"
                    if close
                    else "See docs/reference/settings.md.",
                    id="django_iq.E002",
                )
            )
            continue
        if (isinstance(value, bool) and bool not in spec.types) or not isinstance(
            value, spec.types
        ):
            errors.append(
                Error(
                    f"DJANGO_IQ[{key!r}] must be {_type_names(spec.types)}, got "
                    f"{type(value).__name__} {value!r}.",
                    hint=f"The default is {spec.default!r}.",
                    id="django_iq.E003",
                )
            )
            continue
        if isinstance(value, (int, float)) and (
            not math.isfinite(value)
            or (spec.minimum is not None and value < spec.minimum)
            or (spec.maximum is not None and value > spec.maximum)
        ):
            errors.append(
                Error(
                    f"DJANGO_IQ[{key!r}] is {value!r}, out of range "
                    f"[{spec.minimum}, {spec.maximum if spec.maximum is not None else '∞'}].",
                    hint=f"The default is {spec.default!r}.",
                    id="django_iq.E004",
                )
            )
    if errors:
        return errors
    try:
        merged = {key: getattr(iq_settings, key) for key in SETTINGS}
    except ImproperlyConfiguredIQ as exc:
        return [
            Error(
                str(exc),
                hint=f"Environment variables {ENV_PREFIX}* override settings.",
                id="django_iq.E005",
            )
        ]
    for resource in ("CPU", "MEMORY"):
        throttle, resume = (
            merged[f"{resource}_THROTTLE_PERCENT"],
            merged[f"{resource}_RESUME_PERCENT"],
        )
        if throttle is not None and resume >= throttle:
            errors.append(
                Error(
                    f"{resource}_RESUME_PERCENT ({resume}) must be below {resource}_THROTTLE_PERCENT "
                    f"({throttle}).",
                    hint="Workers stop claiming above the throttle level and start again below the "
                    "resume level; a resume level at or above it would never throttle.",
                    id="django_iq.E006",
                )
            )
    if merged["BACKOFF_MAX_SECONDS"] < merged["BACKOFF_BASE_SECONDS"]:
        errors.append(
            Error(
                f"BACKOFF_MAX_SECONDS ({merged['BACKOFF_MAX_SECONDS']}) is below BACKOFF_BASE_SECONDS "
                f"({merged['BACKOFF_BASE_SECONDS']}).",
                hint="The first retry waits BACKOFF_BASE_SECONDS; the cap must be at least that.",
                id="django_iq.E007",
            )
        )
    errors.extend(_check_queues(merged["QUEUES"]))
    errors.extend(_check_queue_database(merged["DATABASE"]))
    errors.extend(_check_listen_database(merged["LISTEN_DATABASE"]))
    errors.extend(_check_run_on_commit(merged["RUN_ON_COMMIT"]))
    errors.extend(_check_metrics_token(merged["METRICS_TOKEN"]))
    return errors


# The shortest METRICS_TOKEN accepted: secrets.token_urlsafe(32) gives 43 characters.
METRICS_TOKEN_MIN_LENGTH = 32


def _check_metrics_token(token: str | None) -> list[CheckMessage]:
    if not token:
        return []
    spaced = not token.isprintable() or any(character.isspace() for character in token)
    if len(token) >= METRICS_TOKEN_MIN_LENGTH and not spaced:
        return []
    return [
        Error(
            f"DJANGO_IQ['METRICS_TOKEN'] is {len(token)} characters"
            + (" with spaces or control characters" if spaced else "")
            + f": a scrape secret needs at least {METRICS_TOKEN_MIN_LENGTH} printable "
            "characters and no spaces, or anyone may guess it.",
            hint='Generate one with python -c "import secrets; '
            'print(secrets.token_urlsafe(32))" and take it from the environment, or set None '
            "to let only staff users with view_queue read the metrics.",
            id="django_iq.E020",
        )
    ]


def _check_run_on_commit(run_on_commit: bool) -> list[CheckMessage]:
    if not run_on_commit or settings.DEBUG:
        return []
    return [
        Warning(
            "DJANGO_IQ['RUN_ON_COMMIT'] is True while DEBUG is False: jobs run inside the "
            "web processes that enqueue them, one at a time, after each commit.",
            hint="RUN_ON_COMMIT is for development. In production leave it out and run "
            "`manage.py runworker` (docs/howto/testing.md).",
            id="django_iq.W003",
        )
    ]


ROUTER = "django_iq.routers.QueueRouter"


def _check_queue_database(alias: str | None) -> list[CheckMessage]:
    """``DATABASE`` names an alias of ``DATABASES``, and ``QueueRouter`` routes to it: without
    the router, Django would write django_iq's rows to ``default`` and its migrations would
    run there."""
    if alias is None:
        return []
    if alias not in settings.DATABASES:
        return [
            Error(
                f"DJANGO_IQ['DATABASE'] is {alias!r}, which is not an alias in DATABASES "
                f"({', '.join(sorted(settings.DATABASES))}).",
                hint="Add the queue's database to DATABASES under that alias, or remove the key "
                "to keep django_iq's tables in the application's database.",
                id="django_iq.E022",
            )
        ]
    routers = [
        r if isinstance(r, str) else type(r).__module__ + "." + type(r).__qualname__
        for r in settings.DATABASE_ROUTERS
    ]
    if ROUTER not in routers:
        return [
            Error(
                f"DJANGO_IQ['DATABASE'] is {alias!r}, but DATABASE_ROUTERS does not name "
                f"{ROUTER!r}: django_iq's tables and migrations would go to the default "
                "database.",
                hint=f'Add DATABASE_ROUTERS = ["{ROUTER}"] (before routers that claim every '
                "model) to the settings.",
                id="django_iq.E023",
            )
        ]
    return []


def _check_listen_database(alias: str | None) -> list[CheckMessage]:
    if alias is None:
        return []
    engine = settings.DATABASES.get(alias, {}).get("ENGINE", "")
    if alias in settings.DATABASES and "postgresql" in engine:
        return []
    return [
        Error(
            f"DJANGO_IQ['LISTEN_DATABASE'] is {alias!r}, "
            + (
                f"an alias of {engine!r}, not PostgreSQL."
                if alias in settings.DATABASES
                else "which is not an alias in DATABASES."
            ),
            hint="Name a DATABASES alias that connects to the same PostgreSQL database as "
            "django_iq's entries, directly (not through a pooler in transaction mode), or "
            "remove the key.",
            id="django_iq.E019",
        )
    ]


def _check_queues(queues: dict[str, Any]) -> list[CheckMessage]:
    errors: list[CheckMessage] = []
    for name, options in queues.items():
        if not isinstance(name, str) or not name or len(name) > 100:
            errors.append(
                Error(
                    f"QUEUES has an invalid name {name!r}.",
                    hint="Use 1 to 100 characters.",
                    id="django_iq.E008",
                )
            )
            continue
        if options is None:
            continue
        if not isinstance(options, dict):
            errors.append(
                Error(
                    f"QUEUES[{name!r}] must be a dict, got {type(options).__name__}.",
                    hint='e.g. {"weight": 2}',
                    id="django_iq.E008",
                )
            )
            continue
        for option, value in options.items():
            if option not in QUEUE_OPTIONS:
                close = close_names(str(option), QUEUE_OPTIONS)
                errors.append(
                    Error(
                        f"QUEUES[{name!r}] has an unknown option {option!r}.",
                        hint=f"Did you mean {close[0]!r}?"
                        if close
                        else f"Valid: {', '.join(QUEUE_OPTIONS)}.",
                        id="django_iq.E009",
                    )
                )
            elif option in ("weight", "max_concurrency", "alert_waiting_seconds") and not (
                (value is None and option != "weight")
                or (isinstance(value, int) and not isinstance(value, bool) and value >= 1)
            ):
                errors.append(
                    Error(
                        f"QUEUES[{name!r}][{option!r}] must be an integer >= 1, got {value!r}.",
                        hint=QUEUE_OPTION_HINTS[option],
                        id="django_iq.E010",
                    )
                )
    return errors


def max_allowed_packet(alias: str) -> int | None:
    """The MariaDB/MySQL server's ``max_allowed_packet`` in bytes, or None if unreadable."""
    try:
        with connections[alias].cursor() as cursor:
            cursor.execute("SELECT @@max_allowed_packet")
            row = cursor.fetchone()
    except Exception:  # a check must not fail on a database it cannot read
        return None
    return int(row[0]) if row else None


@register(Tags.database)
def check_database(
    app_configs: Any = None, databases: Any = None, **kwargs: Any
) -> list[CheckMessage]:
    """Warn when SQLite is used without IMMEDIATE transactions (concurrent claims would fail)."""
    if not databases:
        return []
    alias = router.db_for_write(Entry)
    if alias not in databases:
        return []
    connection = connections[alias]
    messages: list[CheckMessage] = []
    if (
        connection.vendor == "sqlite"
        and connection.settings_dict.get("OPTIONS", {}).get("transaction_mode") != "IMMEDIATE"
    ):
        messages.append(
            Warning(
                f"SQLite database {alias!r} does not use IMMEDIATE transactions.",
                hint='Set DATABASES[...]["OPTIONS"] = {"transaction_mode": "IMMEDIATE", '
                '"init_command": "PRAGMA journal_mode=WAL;"} so several worker processes can claim '
                "without 'database is locked' errors.",
                id="django_iq.W001",
            )
        )
    if connection.vendor == "mysql":
        packet = max_allowed_packet(alias)
        # The arguments are sent twice in an insert's text at worst (escaped), plus the rest.
        if packet is not None and 2 * iq_settings.MAX_ARGUMENTS_BYTES + 65_536 > packet:
            messages.append(
                Warning(
                    f"MAX_ARGUMENTS_BYTES ({iq_settings.MAX_ARGUMENTS_BYTES:,}) is too close to "
                    f"the max_allowed_packet of database {alias!r} ({packet:,} bytes): an "
                    "enqueue with arguments near the limit would fail in the server.",
                    hint="Lower DJANGO_IQ['MAX_ARGUMENTS_BYTES'] or raise the server's "
                    "max_allowed_packet to more than twice it.",
                    id="django_iq.W002",
                )
            )
    if connection.vendor not in ("postgresql", "sqlite", "mysql"):
        messages.append(
            Error(
                f"django_iq does not support the {connection.vendor!r} database.",
                hint="Use PostgreSQL, MariaDB (>= 10.6) or SQLite.",
                id="django_iq.E011",
            )
        )
    return messages


@register(Tags.database)
def check_migrations(
    app_configs: Any = None, databases: Any = None, **kwargs: Any
) -> list[CheckMessage]:
    """Warn when django_iq's migrations are not all applied to the database its models are
    written to; say nothing when that database cannot be read."""
    if not databases:
        return []
    alias = router.db_for_write(Entry)
    if alias not in databases or is_ready(alias):
        return []
    try:
        with probe(alias) as connection:
            pending = unapplied_migrations(connection)
    except Exception:  # a check must not fail on a database it cannot read
        return []
    if not pending:
        return []
    return [
        Warning(
            migrations_message(alias, pending),
            hint="Workers, leaders and iq_status refuse to start, and enqueue() raises "
            "MigrationsNotApplied, until `manage.py migrate` has created django_iq's tables.",
            id="django_iq.W004",
        )
    ]


@register(Tags.compatibility)
def check_job_queues(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Warn about a queue that only ``@job(queue=...)`` declares and that is one edit away from
    a queue of the settings: most likely a typo that made a queue of its own."""
    user = getattr(settings, "DJANGO_IQ", {})
    if not isinstance(user, dict) or any(key not in SETTINGS for key in user):
        return []  # check_settings reports these
    try:
        configured = settings_queues()
    except ImproperlyConfiguredIQ:
        return []
    autodiscover()
    declaring: dict[str, list[str]] = {}
    for name, registered in registered_jobs().items():
        declaring.setdefault(registered.options.queue_name, []).append(name)
    messages: list[CheckMessage] = []
    for queue, jobs in sorted(declaring.items()):
        if queue in configured:
            continue
        near = sorted(name for name in configured if one_edit_apart(queue, name))
        if not near:
            continue
        shown = ", ".join(sorted(jobs)[:3]) + (
            f" and {len(jobs) - 3} more" if len(jobs) > 3 else ""
        )
        messages.append(
            Warning(
                f"Queue {queue!r} is declared only by @job(queue={queue!r}) ({shown}) and is one "
                f"edit away from the queue {near[0]!r} of the settings.",
                hint=f"Did you mean {near[0]!r}? Workers started with --queues {near[0]} never "
                f"claim entries of {queue!r}. If {queue!r} is meant, add it to "
                'DJANGO_IQ["QUEUES"].',
                id="django_iq.W005",
            )
        )
    return messages


CRON_KEYS = ("job", "schedule", "every", "at", "timezone", "args", "kwargs", "queue", "priority")
# A declared cron job has exactly one of these.
SCHEDULE_KEYS = ("schedule", "every", "at")


@register(Tags.compatibility)
def check_leader_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Validate ``DJANGO_IQ["CRON"]`` and the leader's timing settings."""
    user = getattr(settings, "DJANGO_IQ", {})
    if not isinstance(user, dict) or any(key not in SETTINGS for key in user):
        return []  # check_settings reports these
    try:
        lease, poll = iq_settings.LEADER_LEASE_SECONDS, iq_settings.LEADER_POLL_SECONDS
        silent, heartbeat = (
            iq_settings.WORKER_SILENT_AFTER_SECONDS,
            iq_settings.HEARTBEAT_INTERVAL_SECONDS,
        )
        cron = iq_settings.CRON
    except ImproperlyConfiguredIQ:
        return []
    errors: list[CheckMessage] = []
    if isinstance(lease, (int, float)) and isinstance(poll, (int, float)) and lease < 2 * poll:
        errors.append(
            Error(
                f"LEADER_LEASE_SECONDS ({lease}) must be at least twice LEADER_POLL_SECONDS ({poll}).",
                hint="The leader renews its lease every poll; a shorter lease would expire between renewals.",
                id="django_iq.E012",
            )
        )
    if (
        isinstance(silent, (int, float))
        and isinstance(heartbeat, (int, float))
        and silent < 2 * heartbeat
    ):
        errors.append(
            Error(
                f"WORKER_SILENT_AFTER_SECONDS ({silent}) must be at least twice "
                f"HEARTBEAT_INTERVAL_SECONDS ({heartbeat}).",
                hint="Otherwise a live worker could be declared dead between two heartbeats.",
                id="django_iq.E013",
            )
        )
    elif (
        isinstance(silent, (int, float))
        and isinstance(heartbeat, (int, float))
        and not fence_leaves_margin(silent, heartbeat)
    ):
        errors.append(
            Error(
                f"WORKER_SILENT_AFTER_SECONDS ({silent}) leaves no margin for self-fencing with "
                f"HEARTBEAT_INTERVAL_SECONDS ({heartbeat}): a worker cut off from the database "
                f"fences itself {FENCE_MARGIN_HEARTBEATS} heartbeat intervals before the silence "
                f"limit, at {fence_after_seconds(silent, heartbeat):g}s, which must be at least "
                f"{FENCE_MIN_HEARTBEATS} heartbeat intervals ({FENCE_MIN_HEARTBEATS * heartbeat:g}s).",
                hint=f"Set WORKER_SILENT_AFTER_SECONDS to at least "
                f"{(FENCE_MIN_HEARTBEATS + FENCE_MARGIN_HEARTBEATS) * heartbeat:g} "
                "(four heartbeat intervals), or heartbeat more often "
                "(docs/howto/network-partitions.md).",
                id="django_iq.E021",
            )
        )
    if isinstance(cron, dict):
        errors.extend(_check_cron(cron))
    return errors


def _check_cron(cron: dict[str, Any]) -> list[CheckMessage]:
    errors: list[CheckMessage] = []
    for name, spec in cron.items():
        where = f"DJANGO_IQ['CRON'][{name!r}]"
        if not isinstance(spec, dict):
            errors.append(
                Error(
                    f"{where} must be a dict, got {type(spec).__name__}.",
                    hint='e.g. {"job": "app.jobs.cleanup", "schedule": "0 3 * * *"}',
                    id="django_iq.E014",
                )
            )
            continue
        unknown = [key for key in spec if key not in CRON_KEYS]
        missing = [key for key in ("job",) if key not in spec]
        kinds = [key for key in SCHEDULE_KEYS if key in spec]
        if not kinds:
            missing.append("schedule, every or at")
        if unknown or missing:
            errors.append(
                Error(
                    f"{where} has unknown keys {unknown} and is missing {missing}."
                    if unknown and missing
                    else f"{where} has unknown keys {unknown}."
                    if unknown
                    else f"{where} is missing {missing}.",
                    hint=f"Valid keys: {', '.join(CRON_KEYS)}; job and one of schedule, every "
                    "and at are required.",
                    id="django_iq.E014",
                )
            )
            continue
        if len(kinds) > 1:
            errors.append(
                Error(
                    f"{where} has {' and '.join(kinds)}; a cron job has exactly one of "
                    "schedule (a cron expression), every (an interval) and at (one time).",
                    hint="Keep one of them; declare another cron job for another schedule.",
                    id="django_iq.E015",
                )
            )
            continue
        try:
            validate_declared_schedule(spec)
        except ValueError as exc:
            errors.append(
                Error(
                    f"{where}: {exc}",
                    hint="Check the schedule, every, at and timezone.",
                    id="django_iq.E015",
                )
            )
        try:
            get_job(spec["job"])
        except JobNotRegistered as exc:
            errors.append(
                Error(
                    f"{where}: {exc}",
                    hint="Cron jobs run registered jobs only.",
                    id="django_iq.E016",
                )
            )
    return errors
