"""What a process checks before it starts: that django_iq's database answers and holds its
tables. Each problem is said in one line, without a traceback and without waiting through
retries: a wrong ``DATABASES`` entry or a forgotten ``migrate`` is not an outage to ride out.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.db import DatabaseError, connections, router
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.migrations.executor import MigrationExecutor
from django.db.utils import load_backend

# Seconds a first connection may take before the process says the database cannot be reached
# (when DATABASES does not set a connect timeout of its own).
CONNECT_TIMEOUT_SECONDS = 10

MIGRATE_HINT = "run `manage.py migrate` first"

# The databases found ready in this process, by alias and where it points: a database does not
# lose its tables, so a command run again in the same process (a test, a shell) checks once.
_ready: set[tuple[str, str]] = set()


def iq_database() -> str:
    """The alias django_iq's models are written to."""
    from django_iq.models import Entry

    return router.db_for_write(Entry)


def describe(alias: str) -> str:
    """``database 'default' (postgresql 127.0.0.1:5432/app)``: the alias and where it points."""
    settings_dict = connections.settings[alias]
    engine = settings_dict.get("ENGINE", "").rsplit(".", 1)[-1]
    name = settings_dict.get("NAME") or ""
    if engine == "sqlite3":
        return f"database {alias!r} (sqlite3 {name})"
    host = settings_dict.get("HOST") or "localhost"
    port = settings_dict.get("PORT") or "default port"
    return f"database {alias!r} ({engine} {host}:{port}/{name})"


def first_line(exc: BaseException) -> str:
    """The driver's reason in one line (psycopg adds a second line of advice)."""
    text = str(exc).strip()
    return text.splitlines()[0].strip()[:300] if text else type(exc).__name__


@contextmanager
def probe(alias: str) -> Iterator[BaseDatabaseWrapper]:
    """A connection of its own to ``alias`` that gives up connecting after
    ``CONNECT_TIMEOUT_SECONDS`` (unless ``OPTIONS`` sets a timeout), closed on the way out."""
    settings_dict: dict[str, Any] = dict(connections.settings[alias])
    options = dict(settings_dict.get("OPTIONS") or {})
    options.pop("pool", None)  # one connection, not a pool left behind
    if settings_dict["ENGINE"].rsplit(".", 1)[-1] in ("postgresql", "mysql"):
        options.setdefault("connect_timeout", CONNECT_TIMEOUT_SECONDS)
    settings_dict["OPTIONS"] = options
    wrapper: BaseDatabaseWrapper = load_backend(settings_dict["ENGINE"]).DatabaseWrapper(
        settings_dict, alias
    )
    try:
        yield wrapper
    finally:
        wrapper.close()


def unapplied_migrations(connection: BaseDatabaseWrapper) -> list[str]:
    """The migrations ``migrate`` would apply on ``connection`` to bring django_iq's tables
    up to date (with those of other apps they depend on), as ``app.name``."""
    executor = MigrationExecutor(connection)
    targets = [key for key in executor.loader.graph.leaf_nodes() if key[0] == "django_iq"]
    return [
        f"{migration.app_label}.{migration.name}"
        for migration, backwards in executor.migration_plan(targets)
        if not backwards
    ]


def migrations_message(alias: str, pending: list[str]) -> str:
    """One line saying that django_iq's tables are missing or out of date in ``alias``."""
    ours = [name for name in pending if name.startswith("django_iq.")]
    count = f"{len(pending)} migration{'s' if len(pending) != 1 else ''}"
    if ours and ours[0] == "django_iq.0001_initial":
        return f"django_iq's tables do not exist in {describe(alias)}: {MIGRATE_HINT} ({count} to apply)."
    return (
        f"django_iq's tables are out of date in {describe(alias)}: {MIGRATE_HINT} "
        f"({count} to apply, e.g. {pending[0]})."
    )


def is_ready(alias: str) -> bool:
    """True if ``startup_problem`` found ``alias`` ready in this process already."""
    return (alias, describe(alias)) in _ready


def startup_problem(alias: str | None = None) -> str | None:
    """Why a django_iq process cannot start on its database, in one line: it cannot connect
    (which alias, where, the driver's reason) or django_iq's migrations are not applied there.
    None when it can start. Connects once, without retrying."""
    alias = alias or iq_database()
    key = (alias, describe(alias))
    if key in _ready:
        return None
    with probe(alias) as connection:
        try:
            connection.ensure_connection()
        except DatabaseError as exc:
            return f"Cannot connect to {describe(alias)}: {first_line(exc)}"
        try:
            pending = unapplied_migrations(connection)
        except DatabaseError as exc:
            return f"Cannot read the applied migrations of {describe(alias)}: {first_line(exc)}"
    if pending:
        return migrations_message(alias, pending)
    _ready.add(key)
    return None
