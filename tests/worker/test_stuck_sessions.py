"""The database sessions a worker leaves open as it exits with a run stuck past its timeout:
named as each connection opens, refused once the process is exiting, and ended in the server
(their statement stopped) by ``Worker.objects.end_sessions`` before its locks can go."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection, connections

from django_iq.exceptions import DatabaseUnavailable
from django_iq.models import Worker
from django_iq.queries import session_id
from django_iq.stuck import SessionTracker
from tests.factories import WorkerFactory

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        connection.vendor == "sqlite", reason="SQLite has no sessions in a server to end"
    ),
]


def sleep_statement(seconds: float) -> str:
    function = "pg_sleep" if connection.vendor == "postgresql" else "SLEEP"
    return f"SELECT {function}({seconds:g})"


def test_a_blocked_statement_is_ended_in_the_server_before_end_sessions_returns() -> None:
    tracker = SessionTracker("default")
    tracker.start()
    opened = threading.Event()
    ended: list[float] = []
    errors: list[Exception] = []

    def blocked() -> None:
        try:
            with connections["default"].cursor() as cursor:
                opened.set()
                cursor.execute(sleep_statement(30))
        except Exception as exc:  # the server ended the session under it
            errors.append(exc)
        finally:
            ended.append(time.monotonic())
            connections["default"].close()

    thread = threading.Thread(target=blocked)
    try:
        thread.start()
        assert opened.wait(10)
        time.sleep(0.3)  # the statement is running in the server
        ids = tracker.open_ids()
        worker = WorkerFactory(name="stuck")
        sessions = Worker.objects.record_sessions(worker, ids)
        assert len(sessions) >= 1
        worker.refresh_from_db()

        started = time.monotonic()
        assert Worker.objects.end_sessions(worker, wait_seconds=10)
        assert time.monotonic() - started < 5, "ended, not waited out"
        thread.join(10)
        assert ended and ended[0] - started < 5, "the 30 s statement stopped"
        if connection.vendor == "postgresql":
            assert errors, "its session was terminated under it"
        worker.refresh_from_db()
        assert worker.sessions == [], "forgotten once over"
    finally:
        tracker.stop()
        thread.join(35)


def test_once_closed_to_others_no_other_thread_opens_a_connection() -> None:
    tracker = SessionTracker("default")
    tracker.start()
    refused: list[BaseException] = []

    def connect() -> None:
        try:
            connections["default"].ensure_connection()
        except DatabaseUnavailable as exc:
            refused.append(exc)
        finally:
            connections["default"].close()

    try:
        connection.ensure_connection()
        tracker.close_to_others()
        thread = threading.Thread(target=connect)
        thread.start()
        thread.join(10)
        assert refused and "exiting" in str(refused[0])
        connection.close()
        connection.ensure_connection()  # the closing thread itself still may
        assert tracker.open_ids(), "its session is named"
    finally:
        tracker.stop()


def test_a_session_already_gone_is_passed_over() -> None:
    worker = WorkerFactory(name="gone")
    if connection.vendor == "postgresql":
        sessions = [[2_000_000_000, 0.0]]  # no such backend, as it started then
    else:
        sessions = [[2_000_000_000, None]]
    Worker.objects.filter(pk=worker.pk).update(sessions=sessions)
    worker.refresh_from_db()

    assert Worker.objects.end_sessions(worker, wait_seconds=1)
    worker.refresh_from_db()
    assert worker.sessions == []


def test_heartbeats_name_the_sessions_and_a_clean_stop_forgets_them() -> None:
    # A worker killed outright names nothing as it dies: its heartbeats named its sessions.
    worker = WorkerFactory(name="beating")
    connection.ensure_connection()
    own = session_id(connection.connection, connection.vendor)
    assert own is not None
    load = {"busy_threads": 1, "cpu_percent": 0.0, "memory_percent": 0.0, "is_throttled": False}

    assert Worker.objects.heartbeat(worker, session_ids=[own], **load)
    worker.refresh_from_db()
    assert [session for session, _ in worker.sessions] == [own]
    assert Worker.objects.heartbeat(worker, **load)  # unchanged: not named again
    worker.refresh_from_db()
    assert [session for session, _ in worker.sessions] == [own]

    Worker.objects.stop(worker)
    worker.refresh_from_db()
    assert worker.sessions == [] and not worker.died, "its sessions closed with it"
