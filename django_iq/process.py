"""What every long-running django_iq process shares: stop signals, its ``Worker`` row (register,
heartbeat, register again after being declared dead, mark stopped) and its connections.

``WorkerProcess``, ``Leader`` and ``Supervisor`` build on ``IQProcess``; each adds only its own
loop. A new kind of process starts here.
"""

from __future__ import annotations

import os
import secrets
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any, ClassVar

from django.db import InterfaceError, OperationalError, connections

from django_iq.bounds import text_problem
from django_iq.conf import host_name
from django_iq.dbconn import apply_network_timeouts, refresh_connections, with_db_retry
from django_iq.exceptions import InvalidProcessName
from django_iq.logs import get_logger, set_process_name
from django_iq.models import Worker

logger = get_logger(__name__)

EXIT_OK = 0
EXIT_ABANDONED = 1
# A worker that ran its --max-jobs-per-child or passed its --max-memory-per-child, finished its
# jobs and stopped: its supervisor starts a fresh one at once.
EXIT_RECYCLE = 3
# A worker that gave up a job stuck past its timeout (TIMEOUT_GRACE_SECONDS after JobTimeout was
# raised in it) and exited at once, its locks held: its supervisor ends the database sessions it
# left open, marks it dead (its locks go to recovery) and starts a fresh one at once.
EXIT_STUCK = 4
# A worker cut off from the database (no heartbeat completed for fencing.fence_after_seconds())
# that stopped its runs, and exited once it reached the database again, or at once when a run
# did not stop: its locks are held for recovery, as with EXIT_STUCK.
EXIT_FENCED = 5
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# Signals arriving this soon after the first are one stop request, not a second one: the same
# request reaching a process from its --processes parent and from its process group (or
# systemd's cgroup), not an operator insisting.
SAME_STOP_REQUEST_SECONDS = 1.0


# The longest ``--name`` (or node name standing for it): a process's name adds ":<pid>:" and
# its random part, a leader's ":leader" too, within the 200 characters of ``Worker.name``.
MAX_NAME_LENGTH = 150
# The random part of a process's name, in bytes (twice as many hex digits).
INSTANCE_BYTES = 6


def watch_parent(
    on_gone: Callable[[], object],
    keep_watching: Callable[[], bool] = lambda: True,
    interval: float = 1.0,
) -> threading.Thread:
    """Call ``on_gone()`` once, in a thread of its own, when this process's parent is gone
    (killed with SIGKILL: the process was handed to another parent), looking every
    ``interval`` seconds while ``keep_watching()``."""
    parent = os.getppid()

    def watch() -> None:
        while keep_watching():
            time.sleep(interval)  # a parent's death sends no event to wait on
            if os.getppid() != parent:
                on_gone()
                return

    thread = threading.Thread(target=watch, name="iq-parent", daemon=True)
    thread.start()
    return thread


# The longest node name a Worker row keeps (its ``host`` column).
MAX_HOST_LENGTH = 255


def check_name(name: str | None) -> str:
    """Return the prefix of a process's name: ``name``, or the node name when none is given.
    Raise ``InvalidProcessName`` when it, or the node name the row also keeps, is too long or
    is not printable text (NUL, a lone surrogate from bytes that are not UTF-8, a control
    character), before anything is written."""
    host = host_name()
    node = "node name (DJANGO_IQ_HOST_NAME or the host name)"
    _check_text(host, node, MAX_HOST_LENGTH)
    prefix = name or host
    _check_text(prefix, "name" if name else node, MAX_NAME_LENGTH)
    return prefix


def _check_text(text: str, given: str, limit: int) -> None:
    if len(text) > limit:
        raise InvalidProcessName(
            f"The {given} is {len(text)} characters long; at most {limit} are "
            f"allowed: {text[:40]!a}..."
        )
    problem = text_problem(text)
    if problem is None and not text.isprintable():
        position = next(i for i, character in enumerate(text) if not character.isprintable())
        problem = f"has a control character at position {position}"
    if problem is not None:
        raise InvalidProcessName(f"The {given} {text[:60]!a} {problem}; use printable text.")


def new_instance() -> str:
    """A random part for a process's name: hex digits, new for every process."""
    return secrets.token_hex(INSTANCE_BYTES)


def process_name(name: str | None, *, pid: int, instance: str, suffix: str = "") -> str:
    """A process's name: ``<name or node name>:<pid>:<instance><suffix>``.

    The random ``instance`` makes it unique by construction: processes given the same name on
    nodes of the same name, even with the same pid (each PID 1 in a container of its own), get
    names, and so ``Worker`` rows, of their own."""
    return f"{check_name(name)}:{pid}:{instance}{suffix}"


class IQProcess:
    """A long-running process: stops gracefully on the first SIGTERM/SIGINT and at once on the
    next, and (when ``role`` is set) keeps a ``Worker`` row alive with heartbeats.

    Subclasses set ``role`` (``None``: no row, as for the supervisor), give what their row
    reports in ``registration()``, and override ``on_stop_request`` / ``on_second_stop_request``
    to stop their own loops.
    """

    role: ClassVar[str | None] = None

    def __init__(self, name: str) -> None:
        self.name = name
        # Every log record of this process carries the name (django_iq/logs.py).
        set_process_name(name)
        # A database cut off without a reset (a partition) shows in bounded time.
        apply_network_timeouts()
        self.stopping = threading.Event()
        self.worker: Worker | None = None
        self._signals = 0
        self._first_signal_at = 0.0

    # -- stop signals ------------------------------------------------------------------------

    def install_signal_handlers(self) -> None:
        """Make SIGTERM/SIGINT stop this process (main thread only)."""
        for signum in STOP_SIGNALS:
            signal.signal(signum, self._on_signal)

    def maybe_install_signal_handlers(self, install: bool) -> None:
        if install and threading.current_thread() is threading.main_thread():
            self.install_signal_handlers()

    def stop(self) -> None:
        """Begin a graceful stop (what the first SIGTERM does)."""
        self.stopping.set()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        now = time.monotonic()
        if self._signals and now - self._first_signal_at < SAME_STOP_REQUEST_SECONDS:
            return  # one stop request delivered twice
        self._signals += 1
        self._first_signal_at = self._first_signal_at or now
        if self._signals == 1:
            self.on_stop_request(signum)
        else:
            self.on_second_stop_request(signum)

    def on_stop_request(self, signum: int) -> None:
        """The first stop signal: stop gracefully."""
        self.stop()
        logger.info("stopping name=%s signal=%s", self.name, signum)

    def on_second_stop_request(self, signum: int) -> None:
        """A second stop signal: leave at once."""
        logger.warning("stopping at once name=%s signal=%s", self.name, signum)
        os._exit(EXIT_ABANDONED)

    # -- the Worker row ----------------------------------------------------------------------

    def registration(self) -> dict[str, Any]:
        """What the row reports beyond name, role, host and pid."""
        return {"queues": [], "processing_threads": 0}

    def register(self) -> Worker:
        """Write this process's ``Worker`` row (retried while the database is away)."""
        self.worker = with_db_retry(self._register, "register")
        return self.worker

    def _register(self) -> Worker:
        """Write the row under this process's name (``ProcessNameTaken`` if a running process
        holds it; the stopped row this process left when declared dead is replaced)."""
        if self.role is None:
            raise TypeError(f"{type(self).__name__} keeps no Worker row")
        return Worker.objects.register(
            name=self.name,
            role=self.role,
            host=host_name(),
            pid=os.getpid(),
            **self.registration(),
        )

    def heartbeat(self, **load: Any) -> bool:
        """Beat; if the leader declared this process dead meanwhile, register again through
        ``rejoin()`` (unless stopping). Return whether the row was still alive."""
        if self.worker is None:
            raise RuntimeError("register() before the first heartbeat")
        refresh_connections()
        alive = Worker.objects.heartbeat(self.worker, **load)
        if not alive and not self.stopping.is_set():
            self.rejoin()
        return alive

    def rejoin(self) -> None:
        """Start over under a fresh row after being declared dead (or pruned) while alive."""
        self.worker = self._register()
        logger.warning(
            "declared dead while alive (no heartbeat in time); registered again name=%s",
            self.name,
        )

    def mark_stopped(self, before: Callable[[], object] | None = None) -> None:
        """Mark the row stopped, once more after a dropped connection; best effort, since a
        heartbeat gone silent says the same. ``before`` runs in the same try (a last flush)."""
        if self.worker is None:
            return
        for last_try in (False, True):
            try:
                refresh_connections()
                if before is not None:
                    before()
                Worker.objects.stop(self.worker)
                break
            except (OperationalError, InterfaceError):  # a connection the database dropped
                connections.close_all()
                if last_try:
                    logger.exception("could not mark stopped name=%s", self.name)
            except Exception:  # safe: logged, and an unmarked row is recovered as a silent worker
                logger.exception("could not mark stopped name=%s", self.name)
                break
        connections.close_all()
