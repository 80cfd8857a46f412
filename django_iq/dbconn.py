"""Connection care for long-running threads: keep healthy connections, drop broken ones.

Django's ``close_old_connections()`` is made for requests: with the default ``CONN_MAX_AGE = 0`` it
closes the connection every time, which would make a worker reconnect for every job. Workers
instead keep their connection and only replace one that has seen errors and no longer answers.
"""

from __future__ import annotations

from django.db import connections


def refresh_connections() -> None:
    """Close this thread's connections that errored and are no longer usable, or left a
    transaction mode behind; healthy ones stay open."""
    for connection in connections.all(initialized_only=True):
        if connection.connection is None or connection.in_atomic_block:
            continue
        if connection.get_autocommit() != connection.settings_dict["AUTOCOMMIT"]:
            connection.close()
        elif connection.errors_occurred:
            if connection.is_usable():
                connection.errors_occurred = False
            else:
                connection.close()
