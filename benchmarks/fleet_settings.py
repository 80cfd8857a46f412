"""The test settings with django_iq's defaults (the test settings poll, promote and send
heartbeats every 50 to 500 ms so that tests run fast; a deployment keeps the defaults, and at
48 processes those short intervals alone would take the machine), and each worker process
timing its claim statements: when ``IQ_BENCH_CLAIM_TIMES`` names a directory, every PostgreSQL
single-statement claim's time (from the client's call to its rows fetched, in ms) is appended
to ``<pid>.txt`` there."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from django.db.backends.signals import connection_created

from tests.settings import *  # noqa: F403
from tests.settings import DJANGO_IQ

DJANGO_IQ = {"QUEUES": DJANGO_IQ["QUEUES"]}

_CLAIM_TIMES = os.environ.get("IQ_BENCH_CLAIM_TIMES", "")
_CLAIM_OPENING = "WITH w AS ("  # django_iq.queries.claim.CLAIM_POSTGRESQL


def _timed(
    execute: Callable[..., Any], sql: str, params: Any, many: bool, context: dict[str, Any]
) -> Any:
    if _CLAIM_OPENING not in sql:
        return execute(sql, params, many, context)
    begun = time.perf_counter()
    try:
        return execute(sql, params, many, context)
    finally:
        elapsed = (time.perf_counter() - begun) * 1000
        path = os.path.join(_CLAIM_TIMES, f"{os.getpid()}.txt")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, f"{elapsed:.3f}\n".encode())
        finally:
            os.close(fd)


def _time_claims(sender: object, connection: Any, **kwargs: object) -> None:
    if connection.vendor == "postgresql":
        connection.execute_wrappers.append(_timed)


if _CLAIM_TIMES:
    connection_created.connect(_time_claims, weak=False)
