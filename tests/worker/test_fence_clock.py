"""The fence's clock after a worker registers again: it counts from the fresh row, not from the
heartbeat that found the old row declared dead. That heartbeat may have been sent long before,
into a network that went silent, and returned only once it healed: counting from it fenced the
worker again at once, stopping the runs it had claimed in between (seen as a flaky exit with
status 5 in the idle-worker partition scenario of tests/faults/test_partitions.py)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from django_iq.governor import Decision
from django_iq.models import Worker
from django_iq.worker import WorkerProcess

pytestmark = pytest.mark.django_db(transaction=True)

# How long the heartbeat that finds the row declared dead took to come back.
HELD_UP_SECONDS = 0.5


def test_the_fence_counts_from_the_fresh_row_not_from_a_held_up_heartbeat(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    worker = WorkerProcess(processing_threads=1, name="fence-clock")
    worker.register()
    heartbeat = Worker.objects.heartbeat

    def held_up(row: Worker, **load: Any) -> bool:
        time.sleep(HELD_UP_SECONDS)  # sent into a silent network, back once it healed
        # Meanwhile the leader declared the process dead.
        Worker.objects.filter(pk=row.pk).update(died=True, stopped_at=row.started_at)
        return heartbeat(row, **load)

    monkeypatch.setattr(Worker.objects, "heartbeat", held_up)
    sent = time.monotonic()

    worker._beat(Decision(1, False, 0.0, 0.0, "test"))

    assert worker.worker is not None and worker.worker.stopped_at is None, "registered again"
    # From when the fresh row was written (its heartbeat is stamped after that), not from when
    # the heartbeat that found the old row dead was sent.
    assert worker._last_heartbeat_ok >= sent + HELD_UP_SECONDS
