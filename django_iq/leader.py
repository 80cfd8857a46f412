"""The leader: election through a lease row in the database, and the loop running its duties."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import connections, router, transaction
from django.utils import timezone

from django_iq.conf import iq_settings
from django_iq.dbconn import refresh_connections
from django_iq.duties import Duty, default_duties
from django_iq.exceptions import LeadershipLost
from django_iq.logs import get_logger
from django_iq.models import LeaderLease, Worker
from django_iq.process import EXIT_OK, IQProcess, new_instance, process_name
from django_iq.queries import bound_transaction
from django_iq.registry import autodiscover
from django_iq.stuck import SessionTracker

logger = get_logger(__name__)

# A duty that keeps failing is logged, with its traceback, at most this often: a pass runs
# every LEADER_POLL_SECONDS, and one failure a pass would bury every other line.
DUTY_FAILURE_LOG_EVERY = timedelta(minutes=1)


@dataclass
class LeaderPass:
    """What one pass of the leader loop did: each duty's result, or its error."""

    is_leader: bool
    ran: dict[str, Any] = field(default_factory=dict)
    failed: dict[str, Exception] = field(default_factory=dict)


@dataclass
class FailureLog:
    """When a duty's failure was last logged, and how many failed passes were not since."""

    logged_at: datetime
    unlogged: int = 0


class Leader(IQProcess):
    """One ``runleader`` process: a candidate that, once elected, runs the duties.

    Every write a duty makes happens inside ``fence()``: a transaction that first renews the
    lease by compare-and-set on (holder, epoch). A leader whose lease expired or was taken
    over therefore cannot write anything, even if it does not know yet that it lost.
    """

    role = Worker.Role.LEADER

    def __init__(
        self,
        *,
        name: str | None = None,
        duties: Sequence[Duty] | None = None,
        lease_seconds: float | None = None,
        poll_seconds: float | None = None,
    ) -> None:
        super().__init__(
            process_name(name, pid=os.getpid(), instance=new_instance(), suffix=":leader")
        )
        self.duties = list(duties) if duties is not None else default_duties()
        self.lease_seconds = lease_seconds or iq_settings.LEADER_LEASE_SECONDS
        self.poll_seconds = poll_seconds or iq_settings.LEADER_POLL_SECONDS
        self.epoch: int | None = None
        self._last_run: dict[str, float] = {}
        self._failures: dict[str, FailureLog] = {}
        self._last_heartbeat = 0.0
        # Its database sessions, reported with its heartbeats when they change (operators see
        # what each process holds against the server's limit).
        self.sessions = SessionTracker(router.db_for_write(Worker))
        self._reported_sessions: list[int] | None = None
        # When the last renewal (or taking) of the lease that committed was sent (monotonic):
        # the lease the database stamped then runs out no sooner than lease_seconds later.
        self._renew_sent = 0.0

    @property
    def is_leader(self) -> bool:
        return self.epoch is not None

    @contextmanager
    def fence(self) -> Iterator[None]:
        """A transaction that commits only if this process still holds the lease."""
        if self.epoch is None:
            raise LeadershipLost(f"{self.name} is not the leader.")
        with self._bounded():
            if not LeaderLease.objects.renew(self.name, self.epoch, self.lease_seconds):
                self._lose("lease expired or taken over")
                raise LeadershipLost(f"{self.name} lost the lease (epoch {self.epoch}).")
            yield

    @contextmanager
    def _bounded(self) -> Iterator[None]:
        """A transaction the server ends if this process leaves it idle for a lease (a paused
        leader would otherwise hold the lease row locked and block its successor), in which a
        statement waits at most a third of a lease for a row lock (declaring a worker dead
        waits for its heartbeat; the row is tried again on the next pass).

        The bounds are set in each transaction, not once per connection: through a pooler in
        transaction mode, a session setting would not follow this process to its next
        transaction and would reach other clients' transactions instead.
        """
        alias = router.db_for_write(LeaderLease)
        with transaction.atomic(using=alias):
            bound_transaction(alias, self.lease_seconds, self.lease_seconds / 3)
            yield

    def _lease_held_here(self) -> bool:
        """Whether the lease, by this process's own clock, is still surely held: a leader cut
        off from the database (its statements hang) stops acting a poll before its lease can
        pass to another candidate, without waiting on the database to be told. Its writes are
        fenced by the lease anyway (``fence()``); this stops what a duty does outside them."""
        held_for = time.monotonic() - self._renew_sent
        if held_for < self.lease_seconds - self.poll_seconds:
            return True
        self._lose(f"lease not renewed for {held_for:.1f}s (lease {self.lease_seconds:g}s)")
        return False

    def _lose(self, why: str) -> None:
        if self.epoch is not None:
            logger.warning("leadership lost name=%s epoch=%s: %s", self.name, self.epoch, why)
        self.epoch = None

    def run_once(self, now: datetime | None = None) -> LeaderPass:
        """Heartbeat, take or renew the lease, then run each duty whose interval has passed.

        Each duty runs on its own: one that raises is logged (see ``_duty_failed``) and tried
        again after its interval, and the duties after it still run in this pass, so a
        failing cron sync never holds up recovery, pruning or compaction. Only a lost lease
        ends the pass.
        """
        refresh_connections()
        now = now or timezone.now()
        self._heartbeat()
        # Taking or renewing the lease locks its row: in a bounded transaction, and the outcome
        # is believed only once that transaction has committed.
        sent = time.monotonic()
        with self._bounded():
            if self.epoch is None:
                taken = LeaderLease.objects.acquire(self.name, self.lease_seconds)
            else:
                renewed = LeaderLease.objects.renew(self.name, self.epoch, self.lease_seconds)
        if self.epoch is None:
            self.epoch = taken
            if taken is not None:
                logger.info("leader elected name=%s epoch=%s", self.name, taken)
                self._last_run.clear()
                self._renew_sent = sent
        elif not renewed:
            self._lose("could not renew")
        else:
            self._renew_sent = sent
        result = LeaderPass(self.is_leader)
        if self.epoch is None:
            return result
        clock = time.monotonic()
        for duty in self.duties:
            if clock - self._last_run.get(duty.name, float("-inf")) < duty.interval_seconds:
                continue
            if not self._lease_held_here():
                result.is_leader = False
                return result
            try:
                result.ran[duty.name] = duty.run_once(now, self.fence)
            except LeadershipLost:
                result.is_leader = False
                return result
            except Exception as exc:  # one duty's failure must not stop the others
                result.failed[duty.name] = exc
                self._duty_failed(duty.name, now)
                refresh_connections()  # a connection the failure left unusable is replaced
            else:
                self._duty_recovered(duty.name)
            self._last_run[duty.name] = clock
        return result

    def _duty_failed(self, name: str, now: datetime) -> None:
        """Log a duty's failure with its traceback, at most once per ``DUTY_FAILURE_LOG_EVERY``
        for each duty (saying how many failures went unlogged since the last line)."""
        last = self._failures.get(name)
        if last is not None and last.logged_at <= now < last.logged_at + DUTY_FAILURE_LOG_EVERY:
            last.unlogged += 1
            return
        unlogged = last.unlogged if last is not None else 0
        logger.exception(
            "leader duty failed name=%s duty=%s%s",
            self.name,
            name,
            f" ({unlogged} more failures since the last report)" if unlogged else "",
        )
        self._failures[name] = FailureLog(now)

    def _duty_recovered(self, name: str) -> None:
        """After failures, log once that the duty runs again."""
        if self._failures.pop(name, None) is not None:
            logger.info("leader duty recovered name=%s duty=%s", self.name, name)

    def _heartbeat(self) -> None:
        if (
            self.worker is None
            or time.monotonic() - self._last_heartbeat < iq_settings.HEARTBEAT_INTERVAL_SECONDS
        ):
            return
        self._last_heartbeat = time.monotonic()
        sessions = sorted(self.sessions.open_ids())
        changed = sessions != self._reported_sessions
        alive = self.heartbeat(
            busy_threads=0,
            cpu_percent=0.0,
            memory_percent=0.0,
            is_throttled=False,
            session_ids=sessions if changed else None,
        )
        # A fresh row (registered again after being declared dead) names none yet.
        self._reported_sessions = sessions if alive else None

    def run(self, install_signal_handlers: bool = True) -> int:
        """Campaign and lead until SIGTERM/SIGINT; release the lease on the way out."""
        self.maybe_install_signal_handlers(install_signal_handlers)
        self.sessions.start()
        try:
            return self._run()
        finally:
            self.sessions.stop()

    def _run(self) -> int:
        autodiscover()
        self.register()
        logger.info(
            "leader candidate started name=%s lease_seconds=%s poll_seconds=%s",
            self.name,
            self.lease_seconds,
            self.poll_seconds,
        )
        while not self.stopping.is_set():
            try:
                self.run_once()
            except Exception:  # a loop supervisor: a failed pass is logged and retried
                logger.exception("leader pass failed name=%s", self.name)
                connections.close_all()
            self.stopping.wait(self.poll_seconds)
        self._step_down()
        return EXIT_OK

    def on_stop_request(self, signum: int) -> None:
        self.stop()
        logger.info("leader stopping name=%s signal=%s", self.name, signum)

    def _step_down(self) -> None:
        try:
            if self.epoch is not None and LeaderLease.objects.release(self.name, self.epoch):
                logger.info("leadership released name=%s epoch=%s", self.name, self.epoch)
            self.epoch = None
        except Exception:  # best effort: the lease expires by itself within LEADER_LEASE_SECONDS
            logger.exception("could not release leadership name=%s", self.name)
        finally:
            connections.close_all()
        self.mark_stopped()
        logger.info("leader stopped name=%s", self.name)
