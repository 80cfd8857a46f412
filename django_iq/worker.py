"""The runworker process: scheduling and processing threads, heartbeat, signals, graceful stop."""

from __future__ import annotations

import logging
import os
import queue as queue_module
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from django.db import connections, router, transaction

from django_iq.acks import AckWriter
from django_iq.cancels import RunCancels, cancel_payload_id
from django_iq.capacity import Capacity
from django_iq.conf import iq_settings
from django_iq.dbconn import (
    SharedConnection,
    close_idle_connections,
    refresh_connections,
    with_db_retry,
)
from django_iq.disabled_jobs import DisabledJobs
from django_iq.fencing import fence_after_seconds, fence_grace_seconds, fence_leaves_margin
from django_iq.governor import Decision, ResourceGovernor
from django_iq.logs import get_logger
from django_iq.managers import Claim
from django_iq.models import Entry, GroupLock, JobLimit, Worker
from django_iq.options import JobLimits
from django_iq.process import (
    EXIT_ABANDONED,
    EXIT_FENCED,
    EXIT_OK,
    EXIT_RECYCLE,
    EXIT_STUCK,
    IQProcess,
    new_instance,
    process_name,
)
from django_iq.processing import Processor
from django_iq.progress_reports import flush_held
from django_iq.recycling import RecyclingBudget
from django_iq.registry import autodiscover, registered_jobs
from django_iq.scheduling import ClaimGate, QueuePicker, Scheduler
from django_iq.stuck import SessionTracker
from django_iq.tally import Tally
from django_iq.timeouts import Watch, Watchdog
from django_iq.wakeup import Listener, Wakeups, listening_supported

logger = get_logger(__name__)

# Job names a worker logs at INFO when it starts; all of them at DEBUG.
LOGGED_JOB_NAMES = 10

# How long a process with a stuck run takes, at most, to write what it can before it exits.
STUCK_EXIT_SECONDS = 2.0
# A processing thread with nothing to run for this long closes its database session: an idle
# worker keeps only its duty connection and its listening one.
IDLE_SESSION_SECONDS = 2.0


class WorkerProcess(IQProcess):
    """One worker process.

    Scheduling threads claim entries into a hand-over queue that holds at most as many claims
    as there are idle processing threads; processing threads run them. ``stop()`` (SIGTERM,
    SIGINT) stops claiming, releases claims not started, and waits up to
    ``SHUTDOWN_GRACE_SECONDS`` for running jobs; a second signal exits at once.
    """

    role = Worker.Role.WORKER

    def __init__(
        self,
        *,
        queues: Sequence[str] | None = None,
        processing_threads: int | None = None,
        scheduling_threads: int | None = None,
        burst: bool = False,
        name: str | None = None,
        governor: ResourceGovernor | None = None,
        shutdown_grace_seconds: float | None = None,
        job_names: Sequence[str] | None = None,
        max_jobs: int | None = None,
        max_memory_mb: int | None = None,
        instance: str | None = None,
    ) -> None:
        """``name``: the prefix of the process's name (default: the node name), at most
        ``MAX_NAME_LENGTH`` characters (``InvalidProcessName``); the pid and ``instance``, a
        random part (a new one by default), follow it. ``job_names``: the jobs to claim; by
        default every job registered in the process once it has imported the job modules.
        ``max_jobs`` / ``max_memory_mb``: claim no more than that many entries in all / nothing
        more once the process's resident memory passes that many MiB, then finish the jobs in
        hand and exit with ``EXIT_RECYCLE``."""
        super().__init__(process_name(name, pid=os.getpid(), instance=instance or new_instance()))
        self.job_names: list[str] | None = sorted(job_names) if job_names is not None else None
        self.queues = list(queues) if queues else None
        self.processing_threads = processing_threads or iq_settings.PROCESSING_THREADS
        self.scheduling_threads = scheduling_threads or iq_settings.SCHEDULING_THREADS
        self.burst = burst
        self.governor = governor or ResourceGovernor()
        self.grace_seconds = (
            iq_settings.SHUTDOWN_GRACE_SECONDS
            if shutdown_grace_seconds is None
            else shutdown_grace_seconds
        )
        self.picker = QueuePicker()
        self.tally = Tally()
        self.handover: queue_module.Queue[Claim | None] = queue_module.Queue()
        # Read before each start: a claim of a job disabled after it was taken is handed back.
        self.disabled_jobs = DisabledJobs()
        # Heartbeats go on through a graceful stop, until the worker marks itself stopped:
        # jobs finishing within the grace period must not look like a dead worker's.
        self._heartbeats_end = threading.Event()
        # Scheduling threads sleep on these between passes; a finished claim, a stop, or a
        # notification from the listener wakes them.
        self.wakeups = Wakeups()
        self.listener: Listener | None = None
        self._busy = 0
        self._busy_lock = threading.Lock()
        self.processed = 0
        self.failed = 0
        self._threads: list[threading.Thread] = []
        # Locks of claims handed over and not yet finished, reported with each heartbeat.
        self._held: set[int] = set()
        self._held_lock = threading.Lock()
        self._gate = ClaimGate()
        # The one session of the worker's own duties: scheduling passes, acknowledgements and
        # heartbeats take turns on it. Processing threads keep a session each while busy (the
        # jobs' own ORM work uses it), and the listener one of its own: threads + 2 in all.
        self.duty = SharedConnection(router.db_for_write(Entry))
        # Successes written in batches (one transaction for many jobs) by a thread of its own.
        self.acks = AckWriter(
            self.name, on_settled=self._released, on_lost=self._outcome_lost, shared=self.duty
        )
        self._schedulers: list[Scheduler] = []
        # Recycling: the entries it may still claim (max_jobs, max_memory_mb); set once the
        # budget is spent and every claim in hand finished, to exit with EXIT_RECYCLE.
        self.budget = RecyclingBudget(self.name, max_jobs, max_memory_mb)
        self.recycling = False
        # The claims it may take: threads, prefetch, budget, successes waiting to be written.
        self.capacity = Capacity(self.processing_threads, self.budget)
        # Times jobs out; a job stuck past its timeout's grace period stops this process. Its
        # thread, which never waits on the database, also checks the fence (_check_fence).
        self.watchdog = Watchdog(
            iq_settings.TIMEOUT_GRACE_SECONDS,
            self._on_stuck,
            on_tick=self._check_fence,
            tick_seconds=min(0.25, iq_settings.HEARTBEAT_INTERVAL_SECONDS / 4),
        )
        # The cancels requested for its claimed and running entries (django_iq.cancels).
        self.cancels = RunCancels(self.watchdog.request_cancel)
        # Self-fencing (django_iq.fencing): when the last heartbeat that completed was sent
        # (monotonic), when the worker fenced itself (None: it is not fenced), and the claims
        # it stopped then, held for recovery to count their attempts, and those it did not
        # start (released as it exits, or run once it reaches the database again).
        self._last_heartbeat_ok = time.monotonic()
        self._fenced_at: float | None = None
        self._fenced_claims: list[Claim] = []
        self._parked: queue_module.Queue[Claim] = queue_module.Queue()
        # Locks of the claims whose runs are going on in the processing threads, and of those
        # among them left on a dead row for recovery (registered again while they were told to
        # stop). Changed and read with ``_fence_lock`` held, as the stopped claims are: a run
        # that ends stopped just as a heartbeat completes is seen by the heal, or sees it.
        self._in_process: set[int] = set()
        self._left_to_recovery: set[int] = set()
        self._fence_lock = threading.RLock()
        # Locks of claims in hand that recovery released while this worker was declared dead.
        self._revoked: set[int] = set()
        # Set once the process exits at once with runs still going (stuck past their timeout,
        # or still running at the end of a stop): it then keeps its locks and is never marked
        # stopped. Set and read with ``_exit_lock`` held, as marking the row stopped is, so
        # that a run given up while the row is being marked stopped cannot lose its lock.
        self.stuck = False
        self._exit_lock = threading.RLock()
        self._marked_stopped = False
        # An outcome could not be written: its claim stays held, and the process stops to be
        # replaced (EXIT_ABANDONED), so that recovery releases the claim counting its attempt.
        self.outcome_lost = False
        # This process's connections to the queue's database, named in its row with the
        # heartbeats (when they change) and as it exits at once with runs going on.
        self.sessions = SessionTracker(router.db_for_write(Worker))
        self._reported_sessions: list[int] | None = None
        # Registered jobs with caps or rate limits, claimed under them (set by run()).
        self.limited_jobs: dict[str, JobLimits] = {}

    # -- counters ---------------------------------------------------------------------------

    def idle_threads(self, prefetch: bool = True) -> int:
        """Claims this worker may take now (``Capacity.room``): none while it exits, keeps a
        claim whose outcome it could not write, or is cut off from the database."""
        if self.stuck or self.outcome_lost or self._fenced_at is not None:
            return 0
        return self.capacity.room(
            in_hand=self._busy + self.handover.qsize(),
            acks_pending=self.acks.pending(),
            prefetch=prefetch,
        )

    def free_threads(self) -> int:
        """Claims that a processing thread would start at once (no prefetch): the room for
        claims of jobs with caps or rate limits, where a claim counts as a start."""
        return self.idle_threads(prefetch=False)

    def _due_for_recycling(self) -> bool:
        """Out of claims (max_jobs or memory) with every claim in hand finished and written."""
        return self.budget.spent() and self._finished_locally()

    def record_runs(self, queue: str, runs: list[tuple[str, float, bool]]) -> None:
        """Record the durations of a claim's runs (job name, seconds, success): fairness,
        metrics and the prefetch."""
        for job_name, seconds, ok in runs:
            self.picker.record(queue, seconds)
            self.tally.add(queue, job_name, seconds, ok)
            self.capacity.record(seconds)

    # -- lifecycle --------------------------------------------------------------------------

    def run(self, install_signal_handlers: bool = True) -> int:
        """Run until stopped (or, with ``burst``, until nothing is claimable); return the exit code."""
        self.maybe_install_signal_handlers(install_signal_handlers)
        self.sessions.start()
        try:
            return self._run()
        finally:
            self.sessions.stop()

    def _run(self) -> int:
        autodiscover()
        if self.job_names is None:
            # What this process can run: it claims entries of these jobs only, so an entry of
            # a job deployed elsewhere (or not yet here) waits for a worker that knows it.
            self.job_names = sorted(registered_jobs())
        jobs = registered_jobs()
        self.limited_jobs = {
            name: jobs[name].options.limits()
            for name in self.job_names
            if name in jobs and jobs[name].options.is_limited
        }
        self._log_jobs(self.job_names)
        self.register()
        self._last_heartbeat_ok = time.monotonic()
        job_names = self.job_names
        with_db_retry(
            lambda: JobLimit.objects.publish(self.limited_jobs, unlimited=job_names),
            "publish job limits",
        )
        # The main thread only waits from here on: an idle connection kept open would be found
        # dead at shutdown after any database restart.
        connections.close_all()
        logger.info(
            "worker started name=%s queues=%s processing_threads=%s scheduling_threads=%s burst=%s",
            self.name,
            ",".join(self.queues or ["*"]),
            self.processing_threads,
            self.scheduling_threads,
            self.burst,
        )
        self.acks.start()
        self.watchdog.start()
        for index in range(self.processing_threads):
            self._start(self._processing_loop, f"iq-processing-{index}")
        for index in range(self.scheduling_threads):
            self._start(self._scheduling_loop, f"iq-scheduling-{index}")
        self._start(self._heartbeat_loop, "iq-heartbeat")
        if listening_supported() and not self.burst:
            self.listener = Listener(self.queues, self._work_arrived, self.stopping)
            self._start(self.listener.run, "iq-listener")
        while not self.stopping.wait(0.2):
            pass
        return self._shutdown()

    def _log_jobs(self, names: list[str]) -> None:
        """Say at start which jobs this worker runs (a missing jobs module shows at once): the
        count and the first names at INFO, every name at DEBUG."""
        if not names:
            logger.info(
                "no jobs registered name=%s: is the jobs module imported? Put @job functions "
                "in a jobs.py of an installed app or list their module in "
                'DJANGO_IQ["JOB_MODULES"]; see docs/getting-started.md#a-first-job',
                self.name,
            )
            return
        shown = ", ".join(names[:LOGGED_JOB_NAMES])
        more = len(names) - LOGGED_JOB_NAMES
        logger.info(
            "jobs registered name=%s count=%s jobs=%s%s",
            self.name,
            len(names),
            shown,
            f" and {more} more (all at DEBUG, runworker -v 3)" if more > 0 else "",
        )
        logger.debug("jobs registered name=%s jobs=%s", self.name, ", ".join(names))

    def registration(self) -> dict[str, Any]:
        return {
            "queues": self.queues or [],
            "processing_threads": self.processing_threads,
            "job_names": self.job_names,
        }

    def rejoin(self) -> None:
        """Start over under a fresh ``Worker`` row after being declared dead.

        Heartbeats that could not reach the database for ``WORKER_SILENT_AFTER_SECONDS`` (a
        database outage, a network partition, a paused VM) make the leader declare this worker
        dead and recover its claims. Claiming waits while the row is replaced, so no new claim
        is made under the dead row. Jobs still running finish; their success still removes the
        entry (``complete`` reports the lost lock, which is logged).

        Not while the process is exiting at once (``stuck``): its row names the sessions it
        leaves open, and its kept locks must wait for them there, not move to a fresh row.
        """
        if self.stuck:
            logger.warning("declared dead while exiting at once; not registering again")
            return
        with self._fence_lock:
            # The claims it stopped, and those told to stop whose runs are still ending, stay
            # on the dead row for recovery to count their attempts: this process no longer
            # holds them, and a run that ends stopped later is let go (_processing_loop).
            stopped, self._fenced_claims = self._fenced_claims, []
            stopping = set(self._in_process) if self._fenced_at is not None else set()
            self._left_to_recovery |= stopping
        for claim in stopped:
            self._forget(claim)
        with self._held_lock:
            self._held -= stopping
        if stopped or stopping:
            logger.warning(
                "declared dead while cut off from the database: %s claim(s) stopped then and "
                "%s still stopping are left to recovery name=%s",
                len(stopped),
                len(stopping),
                self.name,
            )
        registering = time.monotonic()
        with self._gate.closed():
            with transaction.atomic(using=router.db_for_write(Worker)):
                worker = self._register()
                # Claims still held here (running, or waiting for the ack writer) that recovery
                # has not released yet are this worker's again, so recovery leaves them alone.
                held = self.held_locks()
                if held:
                    GroupLock.objects.adopt(held, worker)
                    kept = GroupLock.objects.filter(pk__in=held, worker=worker)
                    # Released by recovery meanwhile: perhaps running elsewhere already, so a
                    # claim of these not started yet never starts here.
                    self._revoked.update(set(held) - set(kept.values_list("pk", flat=True)))
            self.worker = worker
            self._reported_sessions = None  # the fresh row names none yet
            for scheduler in self._schedulers:
                scheduler.worker = worker
            self._last_heartbeat_ok = registering  # stamped after this
            self._unfence()
        logger.warning(
            "worker was declared dead (no heartbeat for %ss); its claims were recovered; "
            "registered again name=%s",
            iq_settings.WORKER_SILENT_AFTER_SECONDS,
            self.name,
        )

    def stop(self) -> None:
        """Begin a graceful stop (what SIGTERM does)."""
        super().stop()
        self.wakeups.wake_all()

    def on_stop_request(self, signum: int) -> None:
        self.stop()
        logger.info(
            "stopping name=%s signal=%s grace_seconds=%s", self.name, signum, self.grace_seconds
        )

    def mark_stopped(self, before: Callable[[], object] | None = None) -> None:
        """Mark the row stopped, unless runs are going on that the process gives up (a run
        stuck past its timeout, runs still going at the end of a stop): the process is then
        exiting at once (``_exit_keeping_locks``), and its locks must stay until it is known
        to be gone, so the calling thread waits for that exit."""
        with self._exit_lock:
            if not self.stuck:
                self._marked_stopped = True
                super().mark_stopped(before)
                return
        threading.Event().wait()

    def on_second_stop_request(self, signum: int) -> None:
        if self.stuck:
            return  # the process is exiting at once already
        logger.warning("stopping at once name=%s signal=%s", self.name, signum)
        # No claim is made from here on, so none can start unseen between the look at the
        # runs going on and the row marked stopped.
        with self._gate.closed():
            self._release_unstarted()
            # Held now: running, or just taken by a processing thread not yet counted busy, or
            # waiting for the ack writer (whose successes the exit still writes).
            if self._busy or self.held_locks():
                self._exit_keeping_locks(EXIT_ABANDONED, "stopping at once with jobs running")
            self.acks.close(timeout=2.0)  # successes already in hand: write them if it is quick
            self._heartbeats_end.set()
            self.mark_stopped(before=self.tally.flush)
        os._exit(EXIT_ABANDONED)

    def _start(self, target: object, name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)  # type: ignore[arg-type]
        thread.start()
        self._threads.append(thread)

    def _shutdown(self) -> int:
        for thread in self._threads:
            if thread.name.startswith("iq-scheduling"):
                thread.join()
        released = self._release_unstarted()
        for _ in range(self.processing_threads):
            self.handover.put(None)
        deadline = time.monotonic() + self.grace_seconds
        processors = [t for t in self._threads if t.name.startswith("iq-processing")]
        for thread in processors:
            thread.join(max(0.0, deadline - time.monotonic()))
        abandoned = sum(thread.is_alive() for thread in processors)
        if abandoned:
            # Their runs go on, and a statement of theirs may go on in the server after this
            # process is gone: their locks stay until both are over (_exit_keeping_locks).
            self._exit_keeping_locks(
                EXIT_ABANDONED,
                f"{abandoned} job(s) still running after the grace period of "
                f"{self.grace_seconds:g}s",
            )
        # Jobs that finished are written before the worker is marked stopped (which would hand
        # their locks to recovery and run them again).
        self.acks.close()
        self._heartbeats_end.set()
        for thread in self._threads:
            if thread.name == "iq-heartbeat":
                thread.join(10.0)
            elif thread.name == "iq-listener":
                thread.join(2.0)
        self.mark_stopped(before=self.tally.flush)
        self.duty.close()
        logger.info(
            "worker stopped name=%s processed=%s failed=%s released=%s abandoned=%s",
            self.name,
            self.processed,
            self.failed,
            released,
            abandoned,
        )
        self.watchdog.stop()
        if abandoned or self.outcome_lost:
            return EXIT_ABANDONED
        return EXIT_RECYCLE if self.recycling else EXIT_OK

    def _release_unstarted(self) -> int:
        lock_ids = []
        for waiting in (self.handover, self._parked):
            while True:
                try:
                    claim = waiting.get_nowait()
                except queue_module.Empty:
                    break
                if claim is not None:
                    lock_ids.append(claim.lock_id)
                    self._forget(claim)
        if lock_ids:
            refresh_connections()
            with_db_retry(lambda: GroupLock.objects.release(lock_ids), "release")
            logger.info("released unstarted claims count=%s", len(lock_ids))
        return len(lock_ids)

    # -- threads ----------------------------------------------------------------------------

    def _scheduling_loop(self) -> None:
        if self.worker is None:
            raise RuntimeError("run() registers the worker before starting threads")
        scheduler = Scheduler(
            worker=self.worker,
            queues=self.queues,
            governor=self.governor,
            picker=self.picker,
            idle_threads=self.idle_threads,
            hand_over=self._hand_over,
            detect_idle=self.burst,
            job_names=self.job_names,
            limited_jobs=self.limited_jobs,
            free_threads=self.free_threads,
        )
        self._schedulers.append(scheduler)
        wake = self.wakeups.event()
        try:
            while not self.stopping.is_set():
                # Cleared before the pass, so a wake-up that comes during it is not lost.
                wake.clear()
                # Taken before the pass: a claim of ours that finished during the pass may have
                # released a group whose other entries the pass saw as locked.
                idle_before = self._finished_locally()
                try:
                    # The duty connection first, then the gate: a heartbeat holding the one
                    # while it waits on the other (registering again) never meets a pass
                    # holding them the other way round.
                    with self.duty.use(), self._gate.scheduling_pass():
                        result = scheduler.run_once()
                except Exception:  # a loop supervisor: log, back off, go on
                    logger.exception("scheduling pass failed name=%s", self.name)
                    self.duty.close()
                    connections.close_all()
                    self.stopping.wait(min(5.0, iq_settings.POLL_INTERVAL_SECONDS * 10))
                    continue
                if self.burst and result.is_idle and idle_before and self._finished_locally():
                    logger.info("burst done name=%s: nothing claimable left", self.name)
                    self.stop()
                    break
                if self._due_for_recycling():
                    logger.info(
                        "recycling name=%s after %s entries: exiting to be replaced",
                        self.name,
                        self.budget.claimed,
                    )
                    self.recycling = True
                    self.stop()
                    break
                if result.sleep_seconds:
                    wake.wait(result.sleep_seconds)
        finally:
            scheduler.close()

    def _hand_over(self, claim: Claim) -> None:
        with self._held_lock:
            self._held.add(claim.lock_id)
        self.budget.took(len(claim.entries))
        self.handover.put(claim)

    def _forget(self, claim: Claim) -> None:
        with self._held_lock:
            self._held.discard(claim.lock_id)

    def _released(self, claim: Claim) -> None:
        """A claim is fully written: stop reporting its lock, and let the schedulers look."""
        self._forget(claim)
        job_name = claim.entries[0].job_name if claim.entries else None
        if job_name in self.limited_jobs:
            for scheduler in self._schedulers:
                scheduler.limited_job_finished(job_name)
        self.wakeups.wake_all()

    def _outcome_lost(self, claim: Claim, entry: Entry | None) -> None:
        """The outcome of ``entry`` (None: of some entry of ``claim``) could not be written
        (the database away past the retries, the record refused, a bug). The claim stays in
        the held set, so heartbeats keep reporting its lock and recovery leaves it alone while
        this process lives: released now, its entry would run again with the attempt never
        counted, and again each time. The process stops to be replaced instead (exit status
        ``EXIT_ABANDONED``); its stop marks it stopped, and recovery then releases the lock,
        counting the attempt."""
        entries = [entry] if entry is not None else claim.entries
        logger.error(
            "could not write the outcome of entry=%s job=%s lock=%s: keeping its lock; stopping "
            "name=%s to be replaced (exit status %s), after which recovery counts its attempt",
            ",".join(str(e.pk) for e in entries),
            entries[0].job_name if entries else "",
            claim.lock_id,
            self.name,
            EXIT_ABANDONED,
        )
        self.outcome_lost = True
        self.stop()

    def _work_arrived(self, queue: str | None) -> None:
        """The listener heard of ready work in ``queue`` (None: in any queue): wake the
        schedulers if a thread could take it, having them read the queues again if the queue
        is new to them. A cancel's notification goes to ``self.cancels`` instead."""
        cancelled = cancel_payload_id(queue)
        if cancelled is not None:
            self.cancels.heard(cancelled)
            return
        for scheduler in self._schedulers:
            scheduler.queue_heard_of(queue)
        if self.idle_threads() > 0:
            self.wakeups.wake_all()

    def held_locks(self) -> list[int]:
        with self._held_lock:
            return sorted(self._held)

    def _finished_locally(self) -> bool:
        # A claim is held from hand-over until its processing thread is done with it, so this
        # has no window between the hand-over queue and the busy count.
        with self._held_lock:
            return not self._held

    def _processing_loop(self) -> None:
        processor = Processor(
            self.name, self.acks, self.watchdog, self.disabled_jobs, cancels=self.cancels.ids
        )
        try:
            while True:
                try:
                    claim = self.handover.get(timeout=IDLE_SESSION_SECONDS)
                except queue_module.Empty:
                    close_idle_connections()  # idle: the session goes, the next job opens one
                    claim = self.handover.get()
                if claim is None:
                    return
                with self._busy_lock:
                    self._busy += 1
                try:
                    self._wait_for_the_fence()
                    if self._fenced_at is not None:
                        self._parked.put(claim)  # not started while cut off
                        continue
                    if claim.lock_id in self._revoked:
                        logger.warning(
                            "claim lock=%s not started: recovery released it while this worker "
                            "was declared dead name=%s",
                            claim.lock_id,
                            self.name,
                        )
                        self._revoked.discard(claim.lock_id)
                        self._released(claim)
                        continue
                    with self._fence_lock:
                        self._in_process.add(claim.lock_id)
                    try:
                        result = processor.run_claim(claim, self.stopping.is_set)
                    finally:
                        with self._fence_lock:
                            self._in_process.discard(claim.lock_id)
                            left = claim.lock_id in self._left_to_recovery
                            self._left_to_recovery.discard(claim.lock_id)
                    for started_at, latency in result.starts:
                        self.tally.add_start(claim.queue, started_at, latency)
                    if result.abandoned:
                        continue  # given up by _on_stuck, which settled the claim
                    if result.fenced:
                        # Stopped, cut off from the database: its lock stays held, and
                        # recovery counts the attempt (_heal exits the process; rejoin leaves
                        # it on the dead row).
                        if left:
                            continue  # on the dead row: no longer this process's
                        with self._fence_lock:
                            self._fenced_claims.append(claim)
                            healed = self._fenced_at is None
                        if healed:  # not expected: the heal waits for runs told to stop
                            self._exit_fenced(
                                "a run stopped while cut off ended after the database was "
                                "reached again"
                            )
                        continue
                    self.record_runs(claim.queue, result.runs)
                    with self._busy_lock:
                        self.processed += result.done
                        self.failed += result.failed
                    # A claim whose last entry succeeded is settled by the ack writer
                    # (on_settled) once that success is written.
                    if result.settled:
                        self._released(claim)
                except Exception:  # a loop supervisor: the claim's lock is left for recovery
                    logger.exception("processing failed name=%s lock=%s", self.name, claim.lock_id)
                    self._outcome_lost(claim, None)
                finally:
                    with self._busy_lock:
                        self._busy -= 1
                    self.wakeups.wake_all()
        finally:
            connections.close_all()

    def _on_stuck(self, watch: Watch) -> None:
        """A job went on ``TIMEOUT_GRACE_SECONDS`` past its timeout (blocked in C code, where
        ``JobTimeout`` cannot reach it): exit at once (``EXIT_STUCK``), for the supervisor to
        start a fresh process. Runs in the watchdog thread.

        The run cannot be stopped, only ended with its process, so nothing it holds is
        released here: its entry's and group's lock stays until its process is gone and its
        database sessions are over (``_exit_keeping_locks``). The other runs of the process are
        cut with it; their entries are retried as when a worker dies, each attempt counted.
        A cancelled run that did not stop within the grace is given up the same way.
        """
        if watch.cancelled:
            logger.error(
                "cancelled job still running entry=%s job=%s grace=%ss: giving it up; exiting "
                "at once name=%s to be replaced (exit status %s)",
                watch.entry.pk,
                watch.entry.job_name,
                iq_settings.TIMEOUT_GRACE_SECONDS,
                self.name,
                EXIT_STUCK,
            )
            self._exit_keeping_locks(EXIT_STUCK, "a cancelled job did not stop", watch)
            return
        logger.error(
            "job stuck past its timeout entry=%s job=%s timeout=%ss grace=%ss: giving it up; "
            "exiting at once name=%s to be replaced (exit status %s)",
            watch.entry.pk,
            watch.entry.job_name,
            watch.seconds,
            iq_settings.TIMEOUT_GRACE_SECONDS,
            self.name,
            EXIT_STUCK,
        )
        self._exit_keeping_locks(EXIT_STUCK, "a job was stuck past its timeout", watch)

    # -- self-fencing -----------------------------------------------------------------------

    def _check_fence(self) -> None:
        """In the watchdog thread: fence this worker once no heartbeat has completed for
        ``fence_after_seconds()`` (it stops claiming; ``WorkerFenced`` is raised in its runs),
        and exit at once if a run is still going ``fence_grace_seconds()`` later, before the
        leader may declare the worker dead and give its entries to another worker."""
        now = time.monotonic()
        if self._fenced_at is None:
            silent = self._past_the_fence()
            if silent is None:
                return
            self._fenced_at = now
            runs = self.watchdog.fence()
            logger.error(
                "no heartbeat completed for %.1fs (fence after %.1fs, silence limit %ss): cut "
                "off from the database; stopping %s run(s) and claiming nothing until it is "
                "reached again name=%s",
                silent,
                fence_after_seconds(),
                iq_settings.WORKER_SILENT_AFTER_SECONDS,
                runs,
                self.name,
            )
            self.wakeups.wake_all()
            return
        if self.watchdog.running() and now - self._fenced_at >= fence_grace_seconds():
            self._exit_keeping_locks(
                EXIT_FENCED,
                f"{self.watchdog.running()} run(s) still going {fence_grace_seconds():g}s after "
                "WorkerFenced was raised in them, cut off from the database",
                settle=False,
            )

    def _wait_for_the_fence(self) -> None:
        """Before a claim starts: if no heartbeat has completed for ``fence_after_seconds()``
        (the process was frozen or cut off, and its watchdog has not looked since it went on),
        wait until the watchdog fences it or a heartbeat completes. A process thawed after the
        silence limit would otherwise start a claim in hand, whose lock recovery may have
        released meanwhile, in the moment before its watchdog runs."""
        while (
            self._fenced_at is None
            and not self.stopping.is_set()
            and self._past_the_fence() is not None
        ):
            time.sleep(0.02)

    def _past_the_fence(self) -> float | None:
        """Seconds without a completed heartbeat, once they reach ``fence_after_seconds()``;
        None before, and for a worker the fence does not apply to (not registered, or settings
        that leave it no room, which check django_iq.E021 refuses)."""
        if self.worker is None or not fence_leaves_margin():
            return None
        silent = time.monotonic() - self._last_heartbeat_ok
        return silent if silent >= fence_after_seconds() else None

    def _heal(self) -> None:
        """A heartbeat completed (this row is alive) after the worker fenced itself: resume if
        it held nothing it stopped; else exit for its supervisor, keeping the stopped claims'
        locks for recovery to count their attempts."""
        if self._fenced_at is None:
            return
        with self._fence_lock:
            if self._fenced_claims:
                self._exit_fenced("reached the database again after stopping its runs")
            stopping = len(self._in_process)
            if not stopping:
                self._unfence()
        if stopping:
            # Every run going on was told to stop when the fence came: each ends stopped (the
            # next heartbeat then exits), or in time (claiming resumes), or the fence's grace
            # ends the process. Claiming meanwhile would leave a run that ends stopped after it
            # holding its lock under a live row, which recovery never looks at.
            logger.warning(
                "reached the database again; %s run(s) told to stop have not ended: claiming "
                "nothing until they do name=%s",
                stopping,
                self.name,
            )
            return
        logger.warning("reached the database again; claiming again name=%s", self.name)

    def _unfence(self) -> None:
        if self._fenced_at is not None and not self._fenced_claims:
            self._fenced_at = None
            self.watchdog.unfence()
            while True:  # the claims not started while cut off run now
                try:
                    self.handover.put(self._parked.get_nowait())
                except queue_module.Empty:
                    break
            self.wakeups.wake_all()

    def _exit_fenced(self, why: str) -> None:
        """Exit (``EXIT_FENCED``) keeping the locks of the claims stopped by the fence; those
        never started are released as the process exits."""
        self._exit_keeping_locks(EXIT_FENCED, why)

    def _exit_keeping_locks(
        self, code: int, why: str, watch: Watch | None = None, *, settle: bool = True
    ) -> None:
        """Exit at once with ``code``, runs still going (stuck past their timeout, or still
        running at the end of a stop), keeping their locks: the process is not marked stopped
        (that would make their locks orphans, released by recovery while the runs, or their
        statements in the server, still act). Whoever learns the process is gone (its
        supervisor seeing it exit, or recovery finding it silent) ends the database sessions it
        names first (``_settle_exit``), then releases its locks, counting the attempts.

        The first caller exits the process; one coming later (the watchdog and a stop at the
        same moment), or one finding the row already marked stopped, returns at once or waits
        for that exit."""
        with self._exit_lock:
            if self.stuck:
                if threading.current_thread() is threading.main_thread():
                    return  # a signal handler or the shutdown: the other caller exits
                threading.Event().wait()
            if self._marked_stopped:
                # Only once no processing thread runs is the row marked stopped: no run is
                # left to keep a lock for.
                logger.error("marked stopped, yet exiting with runs going name=%s", self.name)
            self.stuck = True
        logger.error(
            "exiting at once name=%s (exit status %s): %s; the locks of the runs going on stay "
            "until this process is gone and its database sessions are ended",
            self.name,
            code,
            why,
        )
        # Claiming stops (idle_threads), and the schedulers see it now.
        self.wakeups.wake_all()
        if settle:
            settled = threading.Thread(
                target=self._settle_exit, args=(watch,), name="iq-exit", daemon=True
            )
            settled.start()
            settled.join(STUCK_EXIT_SECONDS)
            if settled.is_alive():
                logger.error("exiting before the runs given up were settled name=%s", self.name)
        for handler in logging.getLogger().handlers:
            handler.flush()
        os._exit(code)

    def _settle_exit(self, watch: Watch | None) -> None:
        """Before the process exits: name its open database sessions in its ``Worker`` row
        (first: a statement blocked in the server must be ended before the lock goes), count the
        stuck run's attempt as timed out (``watch``, if one is), release claims not started,
        and write the successes already in hand. Each step is a transaction of its own; those
        not done in time are left to recovery."""
        try:
            # This thread's connection is opened first, so it is named too; then no other
            # thread of this process opens one that could not be named.
            refresh_connections()
            connections[self.sessions.db].ensure_connection()
            self.sessions.close_to_others()
            if self.worker is not None:
                Worker.objects.record_sessions(self.worker, self.sessions.open_ids())
            if watch is not None:
                claim = watch.context[0]
                Processor(self.name, self.acks).give_up(watch)
                seconds = time.monotonic() - watch.started
                self.tally.add(claim.queue, watch.entry.job_name, seconds, ok=False)
            self._release_unstarted()
            self.acks.close(timeout=STUCK_EXIT_SECONDS / 2)
            self.tally.flush()
        except Exception:  # safe: the process exits anyway; recovery counts what was not written
            logger.exception("could not settle the runs given up name=%s", self.name)

    def _heartbeat_loop(self) -> None:
        if self.worker is None:
            raise RuntimeError("run() registers the worker before starting threads")
        try:
            while not self._heartbeats_end.wait(iq_settings.HEARTBEAT_INTERVAL_SECONDS):
                decision = self.governor.last
                try:
                    with self.duty.use():
                        self._beat(decision)
                except Exception:  # heartbeats resume when the database is back
                    logger.exception("heartbeat failed name=%s", self.name)
                    self.duty.close()
                    connections.close_all()
        finally:
            connections.close_all()

    def _beat(self, decision: Decision) -> None:
        """One heartbeat, on the duty connection: load, held locks, sessions when changed."""
        # Read before the heartbeat opens its connection, so a reconnection of the heartbeat's
        # own is reported by the next one.
        sessions = sorted(self.sessions.open_ids())
        changed = sessions != self._reported_sessions
        # Taken with the duty connection in hand, so a wait behind a scheduling pass or a
        # batch of acknowledgements does not count as the database's delay.
        sent = time.monotonic()
        # The held set is read once the heartbeat holds the worker's row, so no claim of ours
        # commits between that reading and the report.
        alive = self.heartbeat(
            busy_threads=self._busy,
            cpu_percent=decision.cpu_percent,
            memory_percent=decision.memory_percent,
            is_throttled=decision.is_throttled,
            held_lock_ids=self.held_locks,
            session_ids=sessions if changed else None,
        )
        # Sent before this heartbeat was stamped: the fence counts from here, unless it
        # registered again after it (rejoin stamps the fresh row later than this was sent, and
        # the time the heartbeat and the new row took must not bring the fence closer).
        self._last_heartbeat_ok = max(self._last_heartbeat_ok, sent)
        if alive:
            self._reported_sessions = sessions
            self._heal()
            self.cancels.look(self.held_locks())
            # The progress its runs held back, on this heartbeat's connection.
            flush_held()
        self.tally.flush()
