"""Database sessions of a worker process that exited at once (a run stuck past its timeout):
name them while it lives, end them in the server and see them gone once it has exited.

A statement blocked in the server goes on after its client process died, until the server
notices, and may still commit. PostgreSQL names a session by its backend's pid (reused once it
exits, so a session is ``[pid, backend start]``); MariaDB and MySQL by a connection id that is not
reused (``[id, None]``). SQLite runs in the process itself: it has no such sessions.
"""

from __future__ import annotations

from typing import Any

from django.db import DatabaseError, connections

# The start (epoch seconds) of each of the given backends.
BACKEND_STARTS_POSTGRESQL = """
SELECT pid, EXTRACT(EPOCH FROM backend_start)::float8 FROM pg_stat_activity
WHERE pid = ANY(%s)
"""
# End each given backend still running, as it started.
TERMINATE_POSTGRESQL = """
SELECT pg_terminate_backend(pid) FROM pg_stat_activity
WHERE pid = %s AND EXTRACT(EPOCH FROM backend_start)::float8 = %s
"""
# The given backends still there (ending, or running on), as they started.
BACKENDS_LEFT_POSTGRESQL = """
SELECT 1 FROM pg_stat_activity
WHERE pid = %s AND EXTRACT(EPOCH FROM backend_start)::float8 = %s
"""
# The given connections still there on MariaDB / MySQL (a killed one is listed until it ends).
CONNECTIONS_LEFT_MYSQL = "SELECT ID FROM information_schema.PROCESSLIST WHERE ID IN ({ids})"
# MySQL's error for KILL of a connection that is already gone.
_UNKNOWN_THREAD = 1094


def session_id(raw: Any, vendor: str) -> int | None:
    """The server's id of an open driver connection, read from the driver (no round trip)."""
    if vendor == "postgresql":
        info = getattr(raw, "info", None)  # psycopg 3
        return int(info.backend_pid) if info is not None else int(raw.get_backend_pid())
    if vendor == "mysql":
        return int(raw.thread_id())
    return None


def named_sessions(db: str, ids: list[int]) -> list[list[Any]]:
    """The sessions of ``ids`` as ``[id, start]``, the start telling a PostgreSQL backend from
    a later one given the same pid."""
    vendor = connections[db].vendor
    if not ids or vendor not in ("postgresql", "mysql"):
        return []
    if vendor == "mysql":
        return [[session, None] for session in sorted(set(ids))]
    with connections[db].cursor() as cursor:
        cursor.execute(BACKEND_STARTS_POSTGRESQL, [sorted(set(ids))])
        return [[pid, start] for pid, start in cursor.fetchall()]


def end_sessions(db: str, sessions: list[list[Any]]) -> None:
    """Ask the server to end the sessions (their statements stop, their transactions roll
    back); a session already gone is passed over."""
    vendor = connections[db].vendor
    with connections[db].cursor() as cursor:
        for session, start in sessions:
            if vendor == "postgresql":
                cursor.execute(TERMINATE_POSTGRESQL, [session, start])
            elif vendor == "mysql":
                try:
                    cursor.execute(f"KILL CONNECTION {int(session)}")
                except DatabaseError as exc:
                    if not exc.args or exc.args[0] != _UNKNOWN_THREAD:
                        raise


def sessions_left(db: str, sessions: list[list[Any]]) -> list[list[Any]]:
    """The sessions the server still has (running on, or ending)."""
    vendor = connections[db].vendor
    if not sessions or vendor not in ("postgresql", "mysql"):
        return []
    with connections[db].cursor() as cursor:
        if vendor == "mysql":
            ids = [int(session) for session, _ in sessions]
            cursor.execute(CONNECTIONS_LEFT_MYSQL.format(ids=", ".join(map(str, ids))))
            there = {row[0] for row in cursor.fetchall()}
            return [entry for entry in sessions if int(entry[0]) in there]
        left = []
        for session, start in sessions:
            cursor.execute(BACKENDS_LEFT_POSTGRESQL, [session, start])
            if cursor.fetchone() is not None:
                left.append([session, start])
        return left


# The server's connection limit, the slots kept for superusers, and the client sessions open now
# (every database's, every user's: the limit is the server's).
SERVER_SESSIONS_POSTGRESQL = """
SELECT current_setting('max_connections')::int,
       current_setting('superuser_reserved_connections')::int,
       (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')
"""
SERVER_SESSIONS_MYSQL = """
SELECT @@max_connections, 0,
       (SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS
        WHERE VARIABLE_NAME = 'THREADS_CONNECTED')
"""


def server_sessions(db: str) -> tuple[int, int, int] | None:
    """``(max_connections, reserved for superusers, client sessions open)`` of the server behind
    ``db``; None where there is no server (SQLite) or it will not say."""
    vendor = connections[db].vendor
    sql = {"postgresql": SERVER_SESSIONS_POSTGRESQL, "mysql": SERVER_SESSIONS_MYSQL}.get(vendor)
    if sql is None:
        return None
    with connections[db].cursor() as cursor:
        try:
            cursor.execute(sql)
        except DatabaseError:
            if vendor == "postgresql":
                raise  # the transaction is aborted: the caller must know
            return None  # a MySQL server without MariaDB's status table: not shown
        row = cursor.fetchone()
    if row is None or row[0] is None or row[2] is None:
        return None
    return int(row[0]), int(row[1]), int(row[2])
