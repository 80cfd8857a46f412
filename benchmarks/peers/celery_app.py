"""Celery's benchmark app and tasks, imported by its workers (``-A celery_app``).

The broker is ``IQ_PEER_REDIS_URL`` (Redis database 15 by default); no result backend.
"""

from __future__ import annotations

import os

from celery import Celery
from harness import record_start

app = Celery("celery_app", broker=os.environ.get("IQ_PEER_REDIS_URL", "redis://127.0.0.1:6379/15"))


@app.task(name="noop")
def noop() -> None:
    return None


@app.task(name="probe")
def probe(enqueued_at: float, path: str) -> None:
    record_start(enqueued_at, path)
