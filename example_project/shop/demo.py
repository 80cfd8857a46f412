"""The ``demo`` command's run: work a batch off with an in-process worker while showing progress."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from django.core.management import get_commands
from django.core.management.base import OutputWrapper
from django.db import connections
from django.utils import timezone

from django_iq.models import Entry, EntryError
from django_iq.worker import WorkerProcess
from shop.enqueueing import Plan
from shop.models import LoyaltyAccount, Payment, Report, SentEmail

DEMO_PREFIX = "demo-"
REFRESH_SECONDS = 0.2
# Without a terminal (a CI log, a pipe) print a progress line at most this often.
PLAIN_REFRESH_SECONDS = 1.0
BAR_WIDTH = 30
STOP_WAIT_SECONDS = 15.0


def new_batch() -> str:
    """Return a fresh demo batch name, e.g. ``demo-20250101-120000-1a2b3c``."""
    return f"{DEMO_PREFIX}{timezone.now():%Y%m%d-%H%M%S}-{uuid.uuid4().hex[:6]}"


def queued_from_earlier_runs(batch: str) -> int:
    """Count entries of earlier demo runs still queued (after a timeout or Ctrl-C)."""
    queued: int = (
        Entry.objects.filter(kwargs__batch__startswith=DEMO_PREFIX)
        .exclude(kwargs__batch=batch)
        .count()
    )
    return queued


def clear_demo_results() -> int:
    """Delete the rows earlier demo runs wrote (never the page's); return how many."""
    deleted = 0
    for model in (Report, SentEmail, Payment, LoyaltyAccount):
        deleted += model.objects.filter(batch__startswith=DEMO_PREFIX).delete()[0]
    return deleted


@dataclass(frozen=True)
class Progress:
    """How far a batch has got, counted from the queue: entries left, retrying and failed."""

    total: int
    remaining: int
    retrying: int
    failed: int

    @property
    def done(self) -> int:
        return self.total - self.remaining - self.failed

    def line(self, elapsed_seconds: float, note: str = "") -> str:
        """Return e.g. ``[#####.....] 120/200 done, 3 retrying, 0 failed  4.2s``."""
        filled = BAR_WIDTH * (self.done + self.failed) // self.total if self.total else BAR_WIDTH
        bar = "#" * filled + "." * (BAR_WIDTH - filled)
        return (
            f"[{bar}] {self.done}/{self.total} done, {self.retrying} retrying, "
            f"{self.failed} failed{note}  {elapsed_seconds:.1f}s"
        )


def read_progress(batch: str, total: int) -> Progress:
    """Count the batch's entries still queued, those among them retrying, and those failed."""
    # Every job takes its batch as a keyword argument, so the batch is a JSON key of the entry.
    entries = Entry.objects.filter(kwargs__batch=batch)
    return Progress(
        total=total,
        remaining=entries.count(),
        retrying=entries.filter(attempts__gt=0).count(),
        failed=EntryError.objects.failed().filter(kwargs__batch=batch).count(),
    )


class ProgressDisplay:
    """Draw progress on one terminal line (redrawn with ``\\r``), or as plain lines otherwise."""

    def __init__(self, out: OutputWrapper, *, live: bool) -> None:
        self.out = out
        self.live = live
        self._last_line = ""
        self._printed_at = float("-inf")

    def show(self, line: str) -> None:
        """Redraw the line, or print it if it changed and a second has passed since the last."""
        if self.live:
            self.out.write("\r" + line.ljust(len(self._last_line)), ending="")
            self.out.flush()
            self._last_line = line
        elif time.monotonic() - self._printed_at >= PLAIN_REFRESH_SECONDS:
            self._print(line)

    def finish(self, line: str) -> None:
        """Leave the final state on its own line."""
        if self.live:
            self.out.write("\r" + line.ljust(len(self._last_line)))
        else:
            self._print(line)

    def _print(self, line: str) -> None:
        # The elapsed time always changes; compare what comes before it.
        if line.rsplit("  ", 1)[0] != self._last_line.rsplit("  ", 1)[0]:
            self.out.write(line)
            self._printed_at = time.monotonic()
        self._last_line = line


class Background:
    """Run ``target`` in a thread; keep the exit code it returned or the exception it raised.

    Waiting goes through an event rather than ``Thread.join``: on Python < 3.13 a Ctrl-C that
    interrupts ``join(timeout)`` can leave the thread marked as finished while it still runs.
    """

    def __init__(self, target: Callable[[], int], name: str) -> None:
        self.code: int | None = None
        self.error: BaseException | None = None
        self._target = target
        self._finished = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def _run(self) -> None:
        try:
            self.code = self._target()
        except BaseException as exc:  # reported by the demo's summary, not lost with the thread
            self.error = exc
        finally:
            connections.close_all()
            self._finished.set()

    def start(self) -> Background:
        self._thread.start()
        return self

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the target to return; True once it has."""
        return self._finished.wait(timeout)


@contextmanager
def quieted(names: tuple[str, ...], enabled: bool) -> Iterator[None]:
    """Raise the given loggers above CRITICAL for the block, so log lines do not break the bar.

    Failed attempts are expected in the demo (declined cards) and each logs a traceback; the
    summary reports them instead. ``-v 2`` keeps the log.
    """
    if not enabled:
        yield
        return
    loggers = [logging.getLogger(name) for name in names]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def throttle_note(worker: WorkerProcess) -> str:
    """Say why no job starts while the worker's resource governor holds it back."""
    decision = worker.governor.last
    if not decision.is_throttled:
        return ""
    return f", paused (CPU {decision.cpu_percent:.0f}%, memory {decision.memory_percent:.0f}%)"


@dataclass
class Outcome:
    """How the run ended."""

    progress: Progress
    seconds: float
    timed_out: bool
    interrupted: bool
    worker: Background
    has_leader: bool


def start_leader() -> tuple[Background, Callable[[], None]] | None:
    """Start a leader in a thread when this django_iq has ``runleader``; return it and its stop."""
    if "runleader" not in get_commands():
        return None
    from django_iq.leader import Leader

    leader = Leader(name="demo")
    return Background(
        lambda: leader.run(install_signal_handlers=False), "demo-leader"
    ).start(), leader.stop


def run_batch(
    plan: Plan, out: OutputWrapper, *, threads: int, timeout_seconds: float, verbosity: int
) -> Outcome:
    """Run a burst worker (and a leader, if available) until ``plan``'s batch is worked off.

    The main thread redraws the progress bar about five times a second. The worker is asked to
    stop once the batch has no entry left, on timeout or on Ctrl-C; jobs already running finish
    first, and unstarted claims go back to the queue.
    """
    worker = WorkerProcess(
        burst=True,
        processing_threads=threads,
        name="demo",
        shutdown_grace_seconds=STOP_WAIT_SECONDS,
    )
    display = ProgressDisplay(out, live=out.isatty() and verbosity < 2)
    started = time.monotonic()
    timed_out = interrupted = False
    with quieted(("django_iq", "shop"), enabled=verbosity < 2):
        leader = start_leader()
        runner = Background(lambda: worker.run(install_signal_handlers=False), "demo-worker")
        runner.start()
        try:
            while not runner.wait(REFRESH_SECONDS):
                progress = read_progress(plan.batch, plan.total)
                display.show(progress.line(time.monotonic() - started, throttle_note(worker)))
                if not progress.remaining:
                    break  # entries left over from an interrupted run wait for the next worker
                if time.monotonic() - started > timeout_seconds:
                    timed_out = True
                    break
        except KeyboardInterrupt:
            interrupted = True
        finally:
            worker.stop()
            runner.wait(STOP_WAIT_SECONDS + 5)
            if leader is not None:
                leader_thread, stop_leader = leader
                stop_leader()
                leader_thread.wait(STOP_WAIT_SECONDS)
    progress = read_progress(plan.batch, plan.total)
    seconds = time.monotonic() - started
    display.finish(progress.line(seconds))
    return Outcome(
        progress=progress,
        seconds=seconds,
        timed_out=timed_out,
        interrupted=interrupted,
        worker=runner,
        has_leader=leader is not None,
    )
