"""procrastinate's benchmark app and tasks, imported by its workers (``--app=procrastinate_app.app``).

The database comes from ``IQ_PEER_DB_URL``.
"""

from __future__ import annotations

import os

import procrastinate
from harness import record_start

app = procrastinate.App(
    connector=procrastinate.PsycopgConnector(conninfo=os.environ["IQ_PEER_DB_URL"])
)


@app.task(name="noop")
def noop() -> None:
    return None


@app.task(name="probe")
def probe(enqueued_at: float, path: str) -> None:
    record_start(enqueued_at, path)
