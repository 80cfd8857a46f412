"""Enqueue while the database cannot be reached: a clear error at once, nothing written."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from django.db import OperationalError, connection, connections, transaction

from django_iq import enqueue_many
from django_iq.exceptions import DatabaseUnavailable
from django_iq.models import Entry, Queue, RunOutcome
from tests.testapp import tasks
from tests.testapp.jobs import record

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        connection.vendor == "sqlite", reason="an embedded database cannot be unreachable"
    ),
]


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def database_down() -> Iterator[None]:
    """Point the default connection at a port nobody listens on, as a stopped server looks."""
    saved = dict(connection.settings_dict)
    connection.close()
    connection.settings_dict.update(HOST="127.0.0.1", PORT=str(closed_port()))
    try:
        yield
    finally:
        connection.close()
        connection.settings_dict.update(saved)


def nothing_written() -> bool:
    return (
        not Entry.objects.exists()
        and not Queue.objects.exists()
        and not RunOutcome.objects.exists()
    )


ENQUEUES: dict[str, Callable[[], object]] = {
    "enqueue": lambda: record.enqueue("down"),
    "enqueue_many": lambda: enqueue_many(record, [(("a",), {}), (("b",), {})]),
    "Tasks backend": lambda: tasks.add.enqueue(1, 2),
}


@pytest.mark.parametrize("call", ENQUEUES.values(), ids=ENQUEUES.keys())
def test_an_enqueue_while_the_server_is_down_fails_at_once(call: Callable[[], object]) -> None:
    with database_down():
        started = time.monotonic()
        with pytest.raises(DatabaseUnavailable, match=r"cannot be reached.*nothing was enqueued"):
            call()
        # A refused connection is answered at once; the bound is only there to catch a hang.
        assert time.monotonic() - started < 10
    assert nothing_written()


def test_it_is_still_an_operational_error_for_existing_handlers() -> None:
    assert issubclass(DatabaseUnavailable, OperationalError)


def kill_session_of(target: object) -> None:
    """End the session of connection ``target`` from the server side, from another thread."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT pg_backend_pid()")
        else:
            cursor.execute("SELECT CONNECTION_ID()")
        (session,) = cursor.fetchone()

    def kill() -> None:
        other = connections.create_connection("default")
        try:
            with other.cursor() as cursor:
                if other.vendor == "postgresql":
                    cursor.execute("SELECT pg_terminate_backend(%s)", [session])
                else:
                    cursor.execute(f"KILL CONNECTION {int(session)}")
        finally:
            other.close()

    thread = threading.Thread(target=kill)
    thread.start()
    thread.join()


def test_a_session_ended_by_the_server_fails_the_enqueue_and_the_next_one_reconnects() -> None:
    kill_session_of(connection)
    with pytest.raises(DatabaseUnavailable):
        record.enqueue("lost")
    assert nothing_written()

    entry = record.enqueue("after")  # the broken connection was dropped, not kept
    assert Entry.objects.get().pk == entry.pk


def test_inside_a_transaction_the_error_is_the_same_and_the_transaction_is_lost() -> None:
    with pytest.raises(DatabaseUnavailable), transaction.atomic():
        kill_session_of(connection)
        record.enqueue("in a transaction")
    connection.close()
    assert nothing_written()
