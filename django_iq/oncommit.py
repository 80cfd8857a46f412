"""``RUN_ON_COMMIT``, for development: entries run in the process that enqueued them, right
after the enqueuing transaction commits, through ``run_jobs`` (the worker's own paths).

It follows the transaction, unlike an "always eager" mode that runs a job inside the call to
enqueue: nothing runs for an enqueue that is rolled back, and a job never sees data its caller
has not committed. It runs every ready entry of a registered job, not only the transaction's
own, and leaves deferred entries (``run_at`` in the future, retries waiting for their backoff)
to a worker. A failed attempt is recorded as a worker records it (error record, retry later).

Nothing depends on it: it hears of enqueues through the ``entry_enqueued`` signal, and an
entry it does not run stays in its queue for a worker.
"""

from __future__ import annotations

import threading
from typing import Any

from django.db import connections, router, transaction
from django.db.models import Max

from django_iq.conf import iq_settings
from django_iq.inline_runs import is_running, run_jobs
from django_iq.logs import get_logger
from django_iq.models import Entry

logger = get_logger(__name__)

_local = threading.local()


def entry_enqueued(sender: Any, entry: Entry, **kwargs: Any) -> None:
    """With ``RUN_ON_COMMIT``, run the ready entries once the transaction that wrote ``entry``
    commits (at once outside a transaction); one run per transaction, however many entries
    it wrote."""
    if not iq_settings.RUN_ON_COMMIT or is_running():
        return  # the run under way takes what its jobs enqueue
    db = entry._state.db or router.db_for_write(Entry)
    connection = connections[db]
    if connection.in_atomic_block:
        if not any(item[1] is run_after_commit for item in connection.run_on_commit):
            transaction.on_commit(run_after_commit, using=db)
        return
    if entry.pk is not None and entry.pk <= getattr(_local, "seen_up_to", 0):
        return  # written before the last run began: that run had it
    run_after_commit()


def run_after_commit() -> None:
    """Run the ready entries in this thread; log, never raise: the enqueue committed."""
    if is_running():
        return
    try:
        _local.seen_up_to = Entry.objects.aggregate(top=Max("pk"))["top"] or 0
        runs = run_jobs()
    except Exception:  # the boundary: the caller's transaction committed, its request goes on
        logger.exception("running entries after commit failed; they stay for a worker")
        return
    if runs:
        logger.info(
            "ran after commit entries=%s failed=%s",
            len(runs),
            sum(not run.succeeded for run in runs),
        )
