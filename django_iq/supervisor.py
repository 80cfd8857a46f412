"""``runworker --processes``: worker processes forked and supervised, crashed ones restarted."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from functools import partial
from multiprocessing.process import BaseProcess
from typing import Any

from django.db import connections

from django_iq.conf import host_name
from django_iq.logs import get_logger
from django_iq.models import Worker
from django_iq.process import (
    EXIT_ABANDONED,
    EXIT_FENCED,
    EXIT_OK,
    EXIT_RECYCLE,
    EXIT_STUCK,
    STOP_SIGNALS,
    IQProcess,
    check_name,
    new_instance,
    process_name,
    watch_parent,
)
from django_iq.worker import WorkerProcess

logger = get_logger(__name__)


class Supervisor(IQProcess):
    """Runs ``processes`` worker processes, restarting any that crash, and replacing at once
    any that exit to be recycled (``--max-jobs-per-child``, ``--max-memory-per-child``) or
    that gave up a job stuck past its timeout (``EXIT_STUCK``, once the database sessions it
    left open are ended and it is marked dead).

    Children are forked after database connections are closed; each stops gracefully if it
    finds the supervisor gone. SIGTERM/SIGINT are passed on to
    the children; a second signal is passed on too, which stops them at once. The supervisor
    keeps no ``Worker`` row of its own: each child registers itself.
    """

    def __init__(self, *, processes: int, burst: bool, **worker_options: Any) -> None:
        check_name(worker_options.get("name"))  # refused here, not in every child
        super().__init__(f"{host_name()}:{os.getpid()}:supervisor")
        self.processes = processes
        self.burst = burst
        self.worker_options = worker_options
        self.children: dict[int, BaseProcess] = {}
        # Each child's name, made from the random part given to it, to mark it dead by.
        self.child_names: dict[int, str] = {}
        self._context = multiprocessing.get_context("fork")

    def on_stop_request(self, signum: int) -> None:
        self.stop()
        self._pass_on()

    def on_second_stop_request(self, signum: int) -> None:
        self._pass_on()

    def _pass_on(self) -> None:
        for child in list(self.children.values()):
            if child.is_alive() and child.pid:
                os.kill(child.pid, signal.SIGTERM)

    def _start(self, index: int) -> None:
        # Stop signals stay blocked across the fork: the child inherits the mask and unblocks it
        # only once its own handlers are in place (_child_main), and the parent handles a signal
        # that arrived meanwhile only after the new child is in ``children``, so it is passed on.
        connections.close_all()
        instance = new_instance()
        options = {**self.worker_options, "instance": instance}
        process = self._context.Process(
            target=_child_main, args=(self.burst, options), name=f"iq-worker-{index}"
        )
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            process.start()
            self.children[index] = process
            if process.pid is not None:
                self.child_names[index] = process_name(
                    self.worker_options.get("name"), pid=process.pid, instance=instance
                )
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)

    def run(self, install_signal_handlers: bool = True) -> int:
        """Start the children and watch them until they have all stopped; return the exit code."""
        self.maybe_install_signal_handlers(install_signal_handlers)
        for index in range(self.processes):
            if not self.stopping.is_set():
                self._start(index)
        exit_code = EXIT_OK
        restarts = 0
        while self.children:
            for index, child in list(self.children.items()):
                child.join(0.2)
                if child.exitcode is None:
                    continue
                del self.children[index]
                if child.exitcode == EXIT_RECYCLE and not self.stopping.is_set():
                    # It finished its jobs and marked itself stopped: a fresh one, at once.
                    logger.info("worker process recycled index=%s pid=%s", index, child.pid)
                    self._start(index)
                    continue
                if child.exitcode in (EXIT_STUCK, EXIT_FENCED):
                    # It exited at once with a job stuck past its timeout, or with runs it
                    # stopped when cut off from the database, holding its locks: now that it is
                    # gone they go to recovery, once the database sessions it left open are
                    # ended (a statement of the job may still run in the server).
                    _mark_dead(self.child_names.get(index))
                    if not self.stopping.is_set():
                        logger.warning(
                            "worker process replaced index=%s pid=%s: %s",
                            index,
                            child.pid,
                            "a job was stuck past its timeout"
                            if child.exitcode == EXIT_STUCK
                            else "it was cut off from the database",
                        )
                        self._start(index)
                        continue
                if self.stopping.is_set() or (
                    self.burst and child.exitcode in (EXIT_OK, EXIT_RECYCLE)
                ):
                    clean = child.exitcode in (EXIT_OK, EXIT_RECYCLE)
                    if not clean:
                        # It may have exited at once with jobs still running at the end of
                        # its grace period, holding their locks: they go to recovery now,
                        # once the database sessions it left open are ended.
                        _mark_dead(self.child_names.get(index))
                    exit_code = max(exit_code, EXIT_OK if clean else EXIT_ABANDONED)
                    continue
                restarts += 1
                _mark_dead(self.child_names.get(index))
                logger.error(
                    "worker process crashed index=%s exitcode=%s; restarting"
                    if child.exitcode
                    else "worker process exited index=%s exitcode=%s; restarting",
                    index,
                    child.exitcode,
                )
                time.sleep(min(10.0, 0.5 * restarts))
                if not self.stopping.is_set():
                    self._start(index)
        return exit_code


def run_supervisor(*, processes: int, burst: bool, **worker_options: Any) -> int:
    """Run ``processes`` supervised worker processes; return the exit code."""
    return Supervisor(processes=processes, burst=burst, **worker_options).run()


def _child_main(burst: bool, worker_options: dict[str, Any]) -> None:
    # Forked with SIGTERM/SIGINT blocked and the parent's handlers still installed: put the
    # worker's own handlers in place first, then let a pending stop request through.
    process = WorkerProcess(burst=burst, **worker_options)
    process.install_signal_handlers()
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    watch_parent(partial(_orphaned, process), lambda: not process.stopping.is_set())
    raise SystemExit(process.run(install_signal_handlers=False))


def _orphaned(process: WorkerProcess) -> None:
    """The supervisor is gone (killed with SIGKILL): stop the way SIGTERM does, so that no
    worker runs on unsupervised (a restarted supervisor starts children of its own)."""
    logger.warning("the supervisor is gone: stopping name=%s", process.name)
    process.stop()


def _mark_dead(name: str | None) -> None:
    """Tell recovery at once that a crashed child's locks are orphans (no heartbeat wait)."""
    if name is None:
        return
    try:
        Worker.objects.mark_process_dead(name)
    except Exception:  # recovery still finds the child silent after WORKER_SILENT_AFTER_SECONDS
        logger.exception("could not mark crashed worker dead name=%s", name)
    finally:
        connections.close_all()
