"""Connection care for long-running threads: keep healthy connections, drop broken ones, and
retry the queue's own writes through a database restart.

Django's ``close_old_connections()`` is made for requests: with the default ``CONN_MAX_AGE = 0`` it
closes the connection every time, which would make a worker reconnect for every job. Workers
instead keep their connection and replace one that has seen errors and no longer answers, or
that the server has ended while it sat idle (``pg_terminate_backend``, a restart, a pooler),
before the next job could find out by failing.
"""

from __future__ import annotations

import logging
import math
import select
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from django.db import DatabaseError, InterfaceError, OperationalError, connections

from django_iq.conf import iq_settings
from django_iq.exceptions import DatabaseUnavailable, MigrationsNotApplied
from django_iq.logs import get_logger

logger = get_logger(__name__)
T = TypeVar("T")

DB_RETRY_ATTEMPTS = 6

# Errors that mean the server cannot be reached or ended the session, by driver: PostgreSQL's
# connection-exception class and shutdown states (a driver's operational or interface error with
# no SQLSTATE is the client library's own: refused, reset, closed); MySQL's server-gone, lost and
# cannot-connect codes.
_PG_CONNECTION_STATES = ("08", "57P01", "57P02", "57P03")
_DRIVER_MODULES = ("psycopg", "MySQLdb", "sqlite3")
_DRIVER_CONNECTION_CLASSES = frozenset({"OperationalError", "InterfaceError"})
_MYSQL_CONNECTION_CODES = frozenset({1040, 1053, 1927, 2002, 2003, 2005, 2006, 2013, 2055, 4031})


def refresh_connections() -> None:
    """Close this thread's connections that errored and are no longer usable, that the server
    ended while they were idle, or that left a transaction mode behind; healthy ones stay open.

    Called before each step of the queue's own (a claim, a job, an acknowledgement), so a
    connection the server ended is replaced before a job's body could use it and fail: the
    queue's connection errors are never charged to a job.
    """
    for connection in connections.all(initialized_only=True):
        if connection.connection is None or connection.in_atomic_block:
            continue
        if connection.get_autocommit() != connection.settings_dict["AUTOCOMMIT"]:
            connection.close()
        elif connection.errors_occurred or _server_spoke(connection.connection):
            if connection.is_usable():
                connection.errors_occurred = False
            else:
                connection.close()


def _server_spoke(raw: Any) -> bool:
    """True if an idle connection's socket has something to read: the server only writes to an
    idle session to end it (the FATAL message and the close), so the session must be checked.

    A poll of the socket, no round trip. Drivers that do not expose their socket (mysqlclient,
    sqlite3) are not checked here; their errors are caught by ``with_db_retry`` instead.
    """
    fileno = getattr(raw, "fileno", None)
    if fileno is None:
        return False
    try:
        fd = fileno()
    except Exception:  # the driver knows the socket is gone: the connection must be checked
        return True
    if fd < 0:
        return True
    readable, _, _ = select.select([fd], [], [], 0)
    return bool(readable)


def _unreachable_or_failed(exc: BaseException) -> bool:
    return isinstance(exc, (OperationalError, InterfaceError))


def _restart_backoff(attempt: int) -> float:
    return float(min(8.0, 0.25 * 2.0**attempt))


def close_idle_connections() -> None:
    """Close this thread's connections that are not inside a transaction, so the next query
    connects afresh."""
    for connection in connections.all(initialized_only=True):
        if not connection.in_atomic_block:
            connection.close()


class SharedConnection:
    """One connection to database ``alias`` that several threads of a process use in turn.

    A worker process's own duties (its scheduling passes, acknowledgements and heartbeats) each
    need a connection for a few milliseconds at a time: through this one they share a single
    database session instead of keeping one idle per thread. ``use()`` lends the connection to
    the calling thread (``django.db.connections[alias]`` is it there, so the ORM, ``atomic``
    and ``on_commit`` work unchanged) while no other thread holds it; a nested ``use()`` in
    the same thread is the same loan. Anything a duty opens on another alias stays the
    thread's own.
    """

    def __init__(self, alias: str) -> None:
        self.alias = alias
        self._lock = threading.RLock()
        self._wrapper: Any = None
        # Set while a thread holds the connection; how long it has, for the process's own
        # look at a hung database (a statement whose answer never comes).
        self.held_since: float | None = None

    @contextmanager
    def use(self) -> Iterator[None]:
        with self._lock:
            current = connections.all(initialized_only=True)
            previous = next((c for c in current if c.alias == self.alias), None)
            if previous is not None and previous is self._wrapper:
                yield  # lent to this thread already
                return
            if self._wrapper is None:
                self._wrapper = connections.create_connection(self.alias)
                self._wrapper.inc_thread_sharing()
            connections[self.alias] = self._wrapper
            self.held_since = time.monotonic()
            try:
                yield
            finally:
                self.held_since = None
                if previous is None:
                    del connections[self.alias]
                else:
                    connections[self.alias] = previous

    def close(self) -> None:
        """Close the session (the next ``use()`` connects again)."""
        with self._lock:
            if self._wrapper is not None:
                try:
                    self._wrapper.close()
                except Exception:  # a broken connection may fail to close: it is gone anyway
                    logger.debug("closing the shared connection failed", exc_info=True)


def with_db_retry(
    action: Callable[[], T],
    what: str,
    *,
    retry_if: Callable[[BaseException], bool] = _unreachable_or_failed,
    attempts: int | None = DB_RETRY_ATTEMPTS,
    delay: Callable[[int], float] = _restart_backoff,
    before_retry: Callable[[], None] = close_idle_connections,
    give_up: Callable[[int], bool] | None = None,
    log_level: int = logging.WARNING,
) -> T:
    """Run ``action``; when it raises a database error that ``retry_if`` accepts, wait
    ``delay(attempt)`` and run it again, up to ``attempts`` runs (``None``: until ``give_up``
    says so). Every database retry of the package is this loop.

    By default it carries the queue's own bookkeeping writes through a database restart: an
    operational or interface error closes the idle connections and retries with backoff (about
    15 s in all) before the error propagates, so a finished job's outcome is not lost.
    """
    attempt = 0
    while True:
        attempt += 1
        try:
            return action()
        except DatabaseError as exc:
            if (
                not retry_if(exc)
                or attempt == attempts
                or (give_up is not None and give_up(attempt))
            ):
                raise
            logger.log(
                log_level,
                "database error during %s attempt=%s error=%s; retrying",
                what,
                attempt,
                exc,
            )
            before_retry()
            time.sleep(delay(attempt))


# A transaction that lost a lock conflict: PostgreSQL's deadlock, serialization failure and lock
# timeout; MySQL's deadlock and lock wait timeout; SQLite's busy file.
_PG_CONFLICT_STATES = frozenset({"40P01", "40001", "55P03"})
_MYSQL_CONFLICT_CODES = frozenset({1213, 1205})


def is_lock_conflict(exc: BaseException) -> bool:
    """True if ``exc`` says the transaction was chosen as a deadlock victim or waited too long
    for a lock: running the same transaction again is the cure."""
    cause = exc.__cause__ or exc
    module = type(cause).__module__
    if module.startswith("psycopg"):
        state = getattr(cause, "sqlstate", None) or getattr(cause, "pgcode", None)
        return state in _PG_CONFLICT_STATES
    if module.startswith("MySQLdb"):
        return bool(cause.args) and cause.args[0] in _MYSQL_CONFLICT_CODES
    if module == "sqlite3":
        return "database is locked" in str(cause)
    return False


def is_connection_error(exc: BaseException) -> bool:
    """True if ``exc`` says the database is unreachable or ended the session, as opposed to an
    error of the statement itself (a lock timeout, a deadlock, a constraint)."""
    if isinstance(exc, InterfaceError):
        return True
    cause = exc.__cause__ or exc
    module = type(cause).__module__
    if module.startswith("psycopg"):
        state = getattr(cause, "sqlstate", None) or getattr(cause, "pgcode", None)
        if state is None:
            # The client library's own error: a connection refused, reset or closed is an
            # operational or interface error; a value it will not send (text with NUL is a
            # DataError) is not.
            return any(k.__name__ in _DRIVER_CONNECTION_CLASSES for k in type(cause).__mro__)
        return bool(state.startswith(_PG_CONNECTION_STATES))
    if module.startswith("MySQLdb"):
        return bool(cause.args) and cause.args[0] in _MYSQL_CONNECTION_CODES
    if module == "sqlite3":
        return "unable to open database" in str(cause)
    return False


def is_transient(exc: BaseException) -> bool:
    """True if ``exc`` is an error that trying again cures: the database unreachable, or a lock
    conflict lost; false for a refusal of the statement itself (a constraint, a trigger, a
    value it cannot store)."""
    cause = exc.__cause__ or exc
    if not type(cause).__module__.startswith(_DRIVER_MODULES):
        # Not a driver's error: nothing tells an outage from a refusal, so an operational or
        # interface error is taken for an outage, as it always was.
        return isinstance(exc, (OperationalError, InterfaceError))
    return is_connection_error(exc) or is_lock_conflict(exc)


# A table the statement names does not exist: PostgreSQL's undefined_table, MySQL's
# ER_NO_SUCH_TABLE, SQLite's own message.
_PG_MISSING_TABLE_STATE = "42P01"
_MYSQL_MISSING_TABLE_CODE = 1146


def is_missing_table(exc: BaseException) -> bool:
    """True if ``exc`` says a table the statement uses does not exist (``migrate`` not run)."""
    cause = exc.__cause__ or exc
    module = type(cause).__module__
    if module.startswith("psycopg"):
        state = getattr(cause, "sqlstate", None) or getattr(cause, "pgcode", None)
        return state == _PG_MISSING_TABLE_STATE
    if module.startswith("MySQLdb"):
        return bool(cause.args) and cause.args[0] == _MYSQL_MISSING_TABLE_CODE
    if module == "sqlite3":
        return str(cause).startswith("no such table")
    return False


@contextmanager
def reachable(using: str, what: str) -> Iterator[None]:
    """Raise ``DatabaseUnavailable`` for a connection failure in the block, at once, and
    ``MigrationsNotApplied`` when django_iq's tables are missing.

    For callers that answer a request (enqueue): they must fail fast with a clear error rather
    than wait through a restart as the worker's bookkeeping does.
    """
    try:
        yield
    except DatabaseError as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if is_missing_table(exc) and not isinstance(exc, MigrationsNotApplied):
            raise MigrationsNotApplied(
                f"django_iq's tables are missing from database {using!r} ({reason[:200]}): "
                f"run `manage.py migrate` first; {what}."
            ) from exc
        if (
            not isinstance(exc, (OperationalError, InterfaceError))
            or isinstance(exc, DatabaseUnavailable)
            or not is_connection_error(exc)
        ):
            raise
        connection = connections[using]
        if not connection.in_atomic_block:
            connection.close()  # the next call connects afresh once the server is back
        raise DatabaseUnavailable(
            f"The database {using!r} cannot be reached ({reason[:200]}); {what}. "
            "Retry when it is back."
        ) from exc


def network_timeouts(vendor: str) -> dict[str, int]:
    """The connection options that make a dead or silent network show in bounded time, derived
    from ``HEARTBEAT_INTERVAL_SECONDS`` and the fence (``fencing.fence_after_seconds()``), for
    a database ``vendor``; none for SQLite.

    PostgreSQL (libpq): ``connect_timeout``, TCP keepalives on an idle or waiting connection
    (a dead peer found after ``keepalives_idle + keepalives_interval * keepalives_count``), and
    ``tcp_user_timeout`` (milliseconds), which fails a statement whose data the server never
    acknowledges. MariaDB/MySQL (mysqlclient): ``connect_timeout`` and ``write_timeout``;
    ``read_timeout`` is left out, since it would also end a job's long query.
    """
    from django_iq.fencing import fence_after_seconds

    heartbeat = float(iq_settings.HEARTBEAT_INTERVAL_SECONDS)
    beat = max(1, math.ceil(heartbeat))
    connect = max(2, math.ceil(2 * heartbeat))
    unacknowledged = max(beat, math.floor(fence_after_seconds()))
    if vendor == "postgresql":
        return {
            "connect_timeout": connect,
            "keepalives": 1,
            "keepalives_idle": beat,
            "keepalives_interval": beat,
            "keepalives_count": 3,
            "tcp_user_timeout": unacknowledged * 1000,
        }
    if vendor == "mysql":
        return {"connect_timeout": connect, "write_timeout": unacknowledged}
    return {}


def apply_network_timeouts() -> None:
    """Give every database alias of this process the options of ``network_timeouts()`` that its
    ``OPTIONS`` do not set (a user's own value, or ``None`` for the driver's default, wins);
    connections opened from then on use them. Done by django_iq's own processes (workers,
    leaders, supervisors), not by the processes that only enqueue."""
    for alias in connections:
        settings_dict = connections.settings[alias]
        engine = settings_dict.get("ENGINE", "")
        vendor = "postgresql" if "postgresql" in engine else "mysql" if "mysql" in engine else ""
        options = settings_dict.setdefault("OPTIONS", {})
        for key, value in network_timeouts(vendor).items():
            options.setdefault(key, value)
        for key in [key for key, value in options.items() if value is None]:
            # None: the driver's own default (the option is not passed at all).
            if key in network_timeouts(vendor):
                del options[key]
