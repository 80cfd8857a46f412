"""The watchdog's cancel of a run (``Watchdog.request_cancel``): a coroutine run whose context is
not registered yet is cancelled once it is, not lost; a run that is not going on is not found."""

from __future__ import annotations

import threading
import time

from django_iq.context import current, running
from django_iq.timeouts import Watch, Watchdog
from tests.conftest import wait_until


class FakeEntry:
    pk = 41
    job_name = "tests.coroutine"
    attempts = 0
    queue_id = "default"
    batch_id = None
    parent_ids = None


def test_a_cancel_waits_for_the_coroutine_s_context_instead_of_being_lost() -> None:
    stuck: list[Watch] = []
    watchdog = Watchdog(grace_seconds=30, on_stuck=stuck.append)
    watchdog.start()
    try:
        watch = Watch(FakeEntry(), None, interrupt=False)
        watchdog.arm(watch)  # armed: the coroutine has not entered its context yet

        assert watchdog.request_cancel(FakeEntry.pk)
        # What must not happen has no condition to poll: ten retries' worth of time passes.
        time.sleep(0.1)
        assert not watch.cancelled, "held back until the context exists"

        seen = threading.Event()
        with running(FakeEntry(), "w"):
            context = current()
            assert context is not None
            context.on_cancel(seen.set)
            wait_until(seen.is_set, timeout=5, message="the cancel to reach the context")
        assert watch.cancelled and context.cancelled.is_set()
        watchdog.settle(watch)
    finally:
        watchdog.stop()
    assert not stuck


def test_a_cancel_of_a_run_not_going_on_here_is_not_found() -> None:
    watchdog = Watchdog(grace_seconds=30, on_stuck=lambda watch: None)
    assert watchdog.request_cancel(12345) is False
