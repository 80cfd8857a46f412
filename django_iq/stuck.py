"""What a worker process needs to leave at once when a run is stuck past its timeout: the
database sessions its threads have open, and a gate that refuses new ones while it exits.

A job blocked in C (a socket read, a long statement) cannot be stopped from Python, so the
process exits with the run still blocked. Its statement may go on in the server after that, and
commit; so the process names its sessions in its ``Worker`` row before it exits, and whoever
releases its locks (its supervisor, or the leader's recovery) ends them in the server and waits
until they are gone first. Only connections to the queue's database, opened through Django,
are named: a statement a job runs on another database, or through a connection of its own, is
not ended.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from django.db.backends.signals import connection_created

from django_iq.exceptions import DatabaseUnavailable
from django_iq.queries import session_id


class SessionTracker:
    """The open connections of this process to database ``db``, across all its threads, with
    their sessions' ids, read as each connection opens (a driver may refuse to be asked by
    another thread while the connection runs a statement)."""

    def __init__(self, db: str) -> None:
        self.db = db
        # Django's connection object -> (its driver connection, that connection's session id).
        self._sessions: weakref.WeakKeyDictionary[Any, tuple[Any, int]] = (
            weakref.WeakKeyDictionary()
        )
        self._lock = threading.Lock()
        self._only: int | None = None  # once closed: the one thread that may still connect

    def start(self) -> None:
        connection_created.connect(self._created, weak=False, dispatch_uid=id(self))

    def stop(self) -> None:
        connection_created.disconnect(dispatch_uid=id(self))

    def _created(self, sender: Any, connection: Any, **kwargs: Any) -> None:
        if connection.alias != self.db:
            return
        with self._lock:
            if self._only is not None and threading.get_ident() != self._only:
                connection.close()
                raise DatabaseUnavailable(
                    "This worker process is exiting (a run was stuck past its timeout): "
                    "it opens no new database connection."
                )
        found = session_id(connection.connection, connection.vendor)
        if found is not None:
            with self._lock:
                self._sessions[connection] = (connection.connection, found)

    def close_to_others(self) -> None:
        """From now on only the calling thread may open a connection: sessions opened later
        by other threads could not be named before the process exits."""
        with self._lock:
            self._only = threading.get_ident()

    def open_ids(self) -> list[int]:
        """The session ids of the connections open now."""
        with self._lock:
            known = list(self._sessions.items())
        return [found for wrapper, (raw, found) in known if wrapper.connection is raw]
