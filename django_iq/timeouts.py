"""Job timeouts: a watchdog thread raises ``JobTimeout`` in a job's thread at its deadline, and
reports the job as stuck when it has not returned ``TIMEOUT_GRACE_SECONDS`` later.

An exception raised into another thread (``PyThreadState_SetAsyncExc``) arrives when that
thread next runs Python code, so a job blocked in a C call (a long ``time.sleep``, a socket
read without a timeout) only sees it once the call returns. Such a job is what the grace period
is for: the worker gives the entry up as timed out and exits to be replaced.

Who ends a watched run is decided by one atomic step, a ``dict.pop`` of the run's key: the
processing thread pops it when the job returns or raises (``settle``), the watchdog when it
gives a stuck run up (``_abandon``). The exception itself is only ever pending while the job
runs or while its thread settles: ``settle`` waits for a raise in flight and, if it was not
delivered yet, takes it there, so no ``JobTimeout`` can reach the worker's own code after it.
A pending exception is never cleared with ``PyThreadState_SetAsyncExc(id, NULL)``: on CPython
3.11 that leaves the interpreter's "asynchronous exception pending" signal set for good, and
every thread then stalls in the evaluation loop's pending-work handler.

The watchdog also fences: ``fence()`` raises ``WorkerFenced`` the same way in every run going
on, when the worker has been cut off from the database too long (see ``django_iq.fencing``),
and every run armed after it gets it at once. It keeps every run, with a timeout or without.
"""

from __future__ import annotations

import ctypes
import heapq
import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django_iq.context import context_of
from django_iq.exceptions import JobCancelled, JobTimeout, WorkerFenced
from django_iq.logs import get_logger

logger = get_logger(__name__)

_set_async_exc = ctypes.pythonapi.PyThreadState_SetAsyncExc
_set_async_exc.argtypes = (ctypes.c_ulong, ctypes.py_object)
_set_async_exc.restype = ctypes.c_int

# Threads in which a raised JobTimeout has been delivered (turned into an exception object)
# since their run was armed.
_delivered: set[int] = set()
# How long a thread settling a fired run waits for the exception to be delivered to it.
DELIVERY_WAIT_SECONDS = 5.0
# How soon a cancel looks again for a coroutine run's context that was not registered yet.
CANCEL_RETRY_SECONDS = 0.01


class RaisedTimeout(JobTimeout):
    """The ``JobTimeout`` the watchdog raises in a thread. CPython creates the exception object
    in the receiving thread, as the first handler (``except`` or ``finally``) takes it, so
    ``__init__`` says it was delivered there."""

    def __init__(self, *args: object) -> None:
        super().__init__(*args)
        _delivered.add(threading.get_ident())


class RaisedCancel(JobCancelled):
    """The ``JobCancelled`` the watchdog raises in a thread whose run was cancelled
    (``django_iq.cancel``), delivered like ``RaisedTimeout``."""

    def __init__(self, *args: object) -> None:
        super().__init__(*args)
        _delivered.add(threading.get_ident())


class RaisedFence(WorkerFenced):
    """The ``WorkerFenced`` the watchdog raises in a thread, delivered like ``RaisedTimeout``."""

    def __init__(self, *args: object) -> None:
        super().__init__(*args)
        _delivered.add(threading.get_ident())


def _raise_in(thread_id: int, raised: type[BaseException] = RaisedTimeout) -> None:
    """Make ``raised`` pending in the thread (again: a second call replaces the first, and
    signals the interpreter anew)."""
    _set_async_exc(thread_id, raised)


@dataclass(eq=False)
class Watch:
    """One run under a deadline. ``interrupt`` False: the job enforces its own deadline (a
    coroutine under ``asyncio.timeout``); the watchdog only looks for it being stuck."""

    entry: Any
    seconds: float | None  # None: no timeout, watched for the fence only
    interrupt: bool = True
    context: Any = None  # what the worker needs to give the entry up (its claim)
    thread_id: int = 0
    started: float = 0.0  # monotonic, set by arm()
    deadline: float = 0.0
    key: int = 0
    # Set by the watchdog, read by the processing thread once it has popped the key.
    firing: bool = False
    fired: bool = False
    abandoning: bool = False
    abandoned: bool = False
    timed_out: bool = field(default=False)
    # The exception raised in the run's thread (read once the key is popped); fenced: the run
    # was going on when the worker fenced itself, and nothing is written for it.
    raised: type[BaseException] = RaisedTimeout
    fenced: bool = False
    # Its cancel reached the worker: the run ends as cancelled, however it ends.
    cancelled: bool = False

    def message(self) -> str:
        return (
            f"Entry {self.entry.pk} ({self.entry.job_name}) ran past its timeout of "
            f"{self.seconds:g} s."
        )


class Watchdog:
    """Raises ``JobTimeout`` in runs past their deadline and hands stuck ones to ``on_stuck``.

    ``on_stuck(watch)`` runs in the watchdog thread once the run is abandoned: the processing
    thread will write nothing for it, whatever it does when (if) its job returns.
    """

    def __init__(
        self,
        grace_seconds: float,
        on_stuck: Callable[[Watch], None],
        on_tick: Callable[[], None] | None = None,
        tick_seconds: float = 0.1,
    ) -> None:
        """``on_tick``: called in the watchdog thread every ``tick_seconds`` (the worker's
        fence check: this thread never waits on the database)."""
        self.grace_seconds = grace_seconds
        self.on_stuck = on_stuck
        self.on_tick = on_tick
        self.tick_seconds = tick_seconds
        # Set by fence(): every run going on and every one armed from then on gets
        # WorkerFenced, until unfenced.
        self.fenced = False
        self._running: dict[int, Watch] = {}
        self._keys = itertools.count(1)
        # (due time, sequence, what to do, watch): "fire" at the deadline, "stuck" after grace.
        self._due: list[tuple[float, int, str, Watch]] = []
        self._changed = threading.Condition()
        self._stopped = False
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="iq-watchdog", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        with self._changed:
            self._stopped = True
            self._changed.notify()

    def arm(self, watch: Watch) -> None:
        """Start watching ``watch`` in the calling (processing) thread, from now. Raises
        ``WorkerFenced`` at once while the worker is fenced (the run must not start)."""
        watch.thread_id = threading.get_ident()
        watch.started = time.monotonic()
        _delivered.discard(watch.thread_id)
        watch.key = next(self._keys)
        self._running[watch.key] = watch
        if self.fenced:
            watch.fenced = True
            raise WorkerFenced("This worker is cut off from the database; the run did not start.")
        if watch.seconds is None:
            return
        watch.deadline = time.monotonic() + watch.seconds
        with self._changed:
            heapq.heappush(self._due, (watch.deadline, watch.key, "fire", watch))
            self._changed.notify()

    def running(self) -> int:
        """Runs armed and not settled yet."""
        return len(self._running)

    def running_entries(self) -> list[int]:
        """The entry ids of the runs armed and not settled yet."""
        return [watch.entry.pk for watch in list(self._running.values())]

    def request_cancel(self, entry_id: int) -> bool:
        """Cancel the run of ``entry_id`` if one is going on here (from any thread): the
        watchdog thread raises ``JobCancelled`` in it (a coroutine job's task is cancelled),
        and gives it up as stuck if it has not returned ``grace_seconds`` later. Return
        whether such a run was found."""
        for watch in list(self._running.values()):
            if watch.entry.pk == entry_id:
                with self._changed:
                    heapq.heappush(self._due, (time.monotonic(), watch.key, "cancel", watch))
                    self._changed.notify()
                return True
        return False

    def fence(self) -> int:
        """Raise ``WorkerFenced`` in every run going on (not in one whose ``JobTimeout`` is
        already raised: it is being stopped) and in every run armed from now; return how many
        runs were going on. Called from the watchdog thread (``on_tick``)."""
        self.fenced = True
        watches = list(self._running.values())
        for watch in watches:
            watch.fenced = True
            if not (watch.fired or watch.firing):
                self._raise_once(watch, RaisedFence)
        return len(watches)

    def _raise_once(self, watch: Watch, raised: type[BaseException]) -> None:
        """Raise ``raised`` in the watch's thread if its run is still going on; in the
        watchdog thread, as the one step the processing thread's ``settle`` waits for."""
        watch.firing = True
        if watch.key in self._running:
            watch.raised = raised
            _raise_in(watch.thread_id, raised)
            watch.fired = True
        watch.firing = False

    def unfence(self) -> None:
        """Runs may start again (the worker reached the database again with nothing held)."""
        self.fenced = False

    def settle(self, watch: Watch) -> bool:
        """End the watch in its processing thread; return True if the watchdog abandoned the
        run (the caller then writes nothing for it). Called when the job returned or raised,
        and again before writing: the ``JobTimeout`` may interrupt the first call, at most once.
        """
        self._running.pop(watch.key, None)
        while watch.firing or watch.abandoning:
            time.sleep(0.0005)
        if watch.fired and watch.thread_id not in _delivered:
            _take_pending(watch)
        return watch.abandoned

    def _loop(self) -> None:
        next_tick = time.monotonic()
        while True:
            with self._changed:
                while not self._stopped and (not self._due or self._due[0][0] > time.monotonic()):
                    if self.on_tick is not None and time.monotonic() >= next_tick:
                        break
                    timeout = self._due[0][0] - time.monotonic() if self._due else None
                    if self.on_tick is not None:
                        until_tick = max(0.0, next_tick - time.monotonic())
                        timeout = until_tick if timeout is None else min(timeout, until_tick)
                    self._changed.wait(timeout)
                if self._stopped:
                    return
                if self.on_tick is not None and time.monotonic() >= next_tick:
                    next_tick = time.monotonic() + self.tick_seconds
                    due = None
                else:
                    _, _, action, watch = heapq.heappop(self._due)
                    due = watch
            if due is None:
                try:
                    self.on_tick()  # type: ignore[misc]
                except Exception:  # the watchdog must outlive a check that failed
                    logger.exception("watchdog tick failed")
                continue
            watch = due
            if watch.key not in self._running:
                continue  # it ended in time
            try:
                if action == "fire":
                    self._fire(watch)
                elif action == "cancel":
                    self._cancel(watch)
                elif self._abandon(watch):
                    self.on_stuck(watch)
            except Exception:  # the watchdog must outlive one run it could not handle
                logger.exception("timeout handling failed entry=%s", watch.entry.pk)

    def _fire(self, watch: Watch) -> None:
        watch.timed_out = True
        if watch.interrupt and not watch.fired:  # not if WorkerFenced is raised in it already
            self._raise_once(watch, RaisedTimeout)
            logger.warning(
                "job timed out entry=%s job=%s timeout=%ss: JobTimeout raised in its thread",
                watch.entry.pk,
                watch.entry.job_name,
                watch.seconds,
            )
        with self._changed:
            due = time.monotonic() + self.grace_seconds
            heapq.heappush(self._due, (due, watch.key, "stuck", watch))

    def _cancel(self, watch: Watch) -> None:
        if watch.cancelled:
            return
        context = context_of(watch.entry.pk)
        if context is None and not watch.interrupt:
            # Armed, but its coroutine has not entered its context yet: only through it can
            # the task be cancelled. Again in a moment.
            with self._changed:
                again = time.monotonic() + CANCEL_RETRY_SECONDS
                heapq.heappush(self._due, (again, watch.key, "cancel", watch))
            return
        watch.cancelled = True
        if context is not None:
            context.cancel()  # cancel_requested() is true; a coroutine's task is cancelled
        if watch.interrupt and not (watch.fired or watch.firing):
            self._raise_once(watch, RaisedCancel)
        logger.info(
            "run cancelled entry=%s job=%s: JobCancelled raised in it",
            watch.entry.pk,
            watch.entry.job_name,
        )
        with self._changed:
            due = time.monotonic() + self.grace_seconds
            heapq.heappush(self._due, (due, watch.key, "stuck", watch))

    def _abandon(self, watch: Watch) -> bool:
        """Take the run from its thread if it has not returned yet; True if taken."""
        watch.abandoning = True
        watch.abandoned = self._running.pop(watch.key, None) is not None
        watch.abandoning = False
        return watch.abandoned


def _take_pending(watch: Watch) -> None:
    """In the watch's own thread, with its run over: let the ``JobTimeout`` raised in it but not
    delivered yet arrive here, and swallow it. It is raised again first, since on CPython 3.11
    another thread taking its own asynchronous exception clears the interpreter's signal for
    all of them."""
    _raise_in(watch.thread_id, watch.raised)
    deadline = time.monotonic() + DELIVERY_WAIT_SECONDS
    try:
        while time.monotonic() < deadline:
            time.sleep(0)  # each call returns through the check that delivers it
    except (RaisedTimeout, RaisedFence, RaisedCancel):
        return
    logger.error("a raised %s was not delivered entry=%s", watch.raised.__name__, watch.entry.pk)
