"""``runworker --processes``: worker processes forked and supervised, crashed ones restarted."""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from types import FrameType

from django.db import connections

from django_iq.models import Worker
from django_iq.worker import EXIT_ABANDONED, EXIT_OK, SAME_STOP_REQUEST_SECONDS, WorkerProcess

logger = logging.getLogger(__name__)

STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}


def run_supervisor(*, processes: int, burst: bool, **worker_options: object) -> int:
    """Run ``processes`` worker processes, restarting any that crash; return the exit code.

    Children are forked after database connections are closed. SIGTERM/SIGINT are passed on to
    the children; a second signal is passed on too, which stops them at once.
    """
    import multiprocessing

    context = multiprocessing.get_context("fork")
    stopping = threading.Event()
    signals_seen = 0

    children: dict[int, multiprocessing.process.BaseProcess] = {}
    first_signal_at = 0.0

    def start(index: int) -> None:
        # Stop signals stay blocked across the fork: the child inherits the mask and unblocks it
        # only once its own handlers are in place (_child_main), and the parent handles a signal
        # that arrived meanwhile only after the new child is in ``children``, so it is passed on.
        connections.close_all()
        process = context.Process(
            target=_child_main, args=(burst, worker_options), name=f"iq-worker-{index}"
        )
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            process.start()
            children[index] = process
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        nonlocal signals_seen, first_signal_at
        now = time.monotonic()
        if signals_seen and now - first_signal_at < SAME_STOP_REQUEST_SECONDS:
            return  # one stop request delivered twice (process group and parent)
        signals_seen += 1
        first_signal_at = first_signal_at or now
        stopping.set()
        for child in list(children.values()):
            if child.is_alive() and child.pid:
                os.kill(child.pid, signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    for index in range(processes):
        if not stopping.is_set():
            start(index)
    exit_code = EXIT_OK
    restarts = 0
    while children:
        for index, child in list(children.items()):
            child.join(0.2)
            if child.exitcode is None:
                continue
            del children[index]
            if stopping.is_set() or (burst and child.exitcode == EXIT_OK):
                exit_code = max(exit_code, 0 if child.exitcode == EXIT_OK else EXIT_ABANDONED)
                continue
            restarts += 1
            _mark_dead(child.pid)
            logger.error(
                "worker process crashed index=%s exitcode=%s; restarting"
                if child.exitcode
                else "worker process exited index=%s exitcode=%s; restarting",
                index,
                child.exitcode,
            )
            time.sleep(min(10.0, 0.5 * restarts))
            if not stopping.is_set():
                start(index)
    return exit_code


def _child_main(burst: bool, worker_options: dict[str, object]) -> None:
    # Forked with SIGTERM/SIGINT blocked and the parent's handlers still installed: put the
    # worker's own handlers in place first, then let a pending stop request through.
    process = WorkerProcess(burst=burst, **worker_options)  # type: ignore[arg-type]
    process.install_signal_handlers()
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    raise SystemExit(process.run(install_signal_handlers=False))


def _mark_dead(pid: int | None) -> None:
    """Tell recovery at once that a crashed child's locks are orphans (no heartbeat wait)."""
    if pid is None:
        return
    try:
        Worker.objects.mark_process_dead(socket.gethostname(), pid)
    except Exception:  # recovery still finds the child silent after WORKER_SILENT_AFTER_SECONDS
        logger.exception("could not mark crashed worker dead pid=%s", pid)
    finally:
        connections.close_all()
