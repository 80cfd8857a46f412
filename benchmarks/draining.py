"""The timed drain the PostgreSQL benchmarks share: ``runworker --processes 2 --threads 4
--burst`` over the no-op entries waiting in the ``default`` queue, from start to exit."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def timed_drain(count: int, **env: str) -> float:
    """Run the worker until the ``count`` waiting entries are done; return entries per second.
    ``env``: more environment for the worker (its settings)."""
    from django.db import connection

    from django_iq.models import Entry

    s = connection.settings_dict
    url = f"postgres://{s['USER']}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"
    environment = dict(
        os.environ, DATABASE_URL=url, DJANGO_IQ_LOG_LEVEL="WARNING", PYTHONPATH=str(ROOT), **env
    )
    command = [sys.executable, "-m", "django", "runworker", "--burst", "-v", "0"]
    command += ["--queues", "default", "--processes", "2", "--threads", "4"]
    started = time.perf_counter()
    subprocess.run(command, cwd=ROOT, env=environment, check=True)
    rate = count / (time.perf_counter() - started)
    left = Entry.objects.filter(queue_id="default").count()
    if left:
        raise SystemExit(f"{left} entries were left after the drain")
    return rate
