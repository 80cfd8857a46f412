"""Worker and leader processes: registration, heartbeats, death and pruning."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from django.db import IntegrityError, connections, models, router, transaction
from django.db.models.functions import Now

from django_iq.appmodels import iq
from django_iq.conf import iq_settings
from django_iq.exceptions import ProcessNameTaken
from django_iq.queries import db_now_plus, end_sessions, named_sessions, sessions_left

if TYPE_CHECKING:
    from django_iq.models import (
        Worker,
    )


class WorkerManager(models.Manager["Worker"]):
    """Worker and leader processes: registration, heartbeats (in database time), death."""

    def register(
        self,
        *,
        name: str,
        role: str,
        host: str,
        pid: int,
        queues: list[str],
        processing_threads: int,
        job_names: list[str] | None = None,
    ) -> Worker:
        """Record a starting process under its unique ``name``. ``job_names``: the jobs
        registered in a worker process (what it claims).

        A stopped row of that name (the one a process left when it was declared dead, before
        it registers again) is replaced. A running row is never touched: the name is refused
        with ``ProcessNameTaken``, since deleting it would orphan a live process's claims. Nor
        is a stopped row naming database sessions still to be ended (``sessions``): its locks
        wait for them.
        """
        db = router.db_for_write(self.model)
        with transaction.atomic(using=db):
            stopped = self.using(db).filter(name=name, stopped_at__isnull=False)
            stopped.filter(sessions=[]).delete()
            if stopped.exists():
                raise ProcessNameTaken(
                    f"The stopped process registered as {name!r} names database sessions still "
                    f"to be ended before its locks are released; its row is kept until then."
                )
            try:
                with transaction.atomic(using=db):
                    worker = self.using(db).create(
                        name=name,
                        role=role,
                        host=host,
                        pid=pid,
                        queues=queues,
                        processing_threads=processing_threads,
                        job_names=sorted(job_names or []),
                    )
            except IntegrityError:
                raise ProcessNameTaken(
                    f"A running process is already registered as {name!r}; this one is "
                    f"refused rather than take over its row and its claims."
                ) from None
            self.using(db).filter(pk=worker.pk).update(started_at=Now(), heartbeat_at=Now())
        return worker

    def heartbeat(
        self,
        worker: Worker,
        *,
        busy_threads: int,
        cpu_percent: float,
        memory_percent: float,
        is_throttled: bool,
        held_lock_ids: Callable[[], Iterable[int]] | Iterable[int] | None = None,
        session_ids: list[int] | None = None,
    ) -> bool:
        """Record that ``worker`` is alive, its load and the locks it holds; return False if
        its row is gone or it was declared dead (it must then register again).

        The row is locked before anything is read or stamped. A heartbeat that waited for the
        row (another transaction held it) is stamped with the database's time once it has the
        row, so the leader, waiting behind it to declare the worker dead, sees it in time and
        leaves the worker alone. ``held_lock_ids`` (a callable is read under the row lock) is
        stamped ``held_at`` in the same database time: no claim of this worker can commit
        between that reading and the write, since claims hold the row with a shared lock.
        ``session_ids`` (given when they changed): the server ids of the process's open
        connections, named in ``sessions`` so that whoever releases its locks after it died
        without a word (a SIGKILL, an out-of-memory kill) ends them first.
        """
        db = router.db_for_write(self.model)
        features = connections[db].features
        with transaction.atomic(using=db):
            running = list(
                self.using(db)
                .select_for_update(no_key=features.has_select_for_no_key_update)
                .filter(pk=worker.pk, stopped_at__isnull=True)
                .values_list("pk", flat=True)
            )
            if not running:
                return False
            fields: dict[str, Any] = {
                "heartbeat_at": Now(),
                "busy_threads": busy_threads,
                "cpu_percent": cpu_percent,
                "memory_percent": memory_percent,
                "is_throttled": is_throttled,
            }
            if held_lock_ids is not None:
                held = held_lock_ids() if callable(held_lock_ids) else held_lock_ids
                fields.update(held_lock_ids=sorted(held), held_at=Now())
            if session_ids is not None:
                fields["sessions"] = named_sessions(db, session_ids)
            self.using(db).filter(pk=worker.pk).update(**fields)
        return True

    def declare_dead(self, worker_id: int, silent_after_seconds: float) -> bool:
        """Mark a running worker stopped and dead if it is still silent once its row is locked;
        return whether it was. Its locks keep pointing at it, for recovery to release.

        One conditional UPDATE: it waits for a heartbeat or a claim holding the row and then
        re-checks the heartbeat on the row as they left it, so a heartbeat that was late (its
        row held by another transaction) but landed first keeps the worker alive, and no claim
        of the worker can commit after this one does. The caller runs it in a fenced
        transaction of its own, before releasing anything.
        """
        return (
            self.filter(
                pk=worker_id,
                stopped_at__isnull=True,
                heartbeat_at__lt=db_now_plus(-silent_after_seconds),
            ).update(stopped_at=Now(), busy_threads=0, died=True)
            > 0
        )

    def stop(self, worker: Worker) -> None:
        """Mark ``worker`` as stopped (a clean exit: its sessions close with it, and are
        forgotten); its remaining locks become orphans for recovery."""
        self.mark_stopped(self.filter(pk=worker.pk))

    def mark_stopped(self, workers: models.QuerySet[Worker], *, died: bool = False) -> int:
        """Mark ``workers`` stopped (``died``: found dead, not a clean exit, once the sessions
        they named are ended; else a clean exit, whose sessions close with it) and orphan their
        locks; return how many were running."""
        with transaction.atomic(using=router.db_for_write(self.model)):
            ids = list(workers.filter(stopped_at__isnull=True).values_list("pk", flat=True))
            fields: dict[str, Any] = {"stopped_at": Now(), "busy_threads": 0, "died": died}
            if not died:
                fields["sessions"] = []
            self.filter(pk__in=ids).update(**fields)
            iq.GroupLock.objects.filter(worker_id__in=ids).update(worker=None)
        return len(ids)

    def mark_process_dead(self, name: str) -> int:
        """Mark the worker of a process known to have died (its supervisor saw it exit), found
        by its unique name (host and pid alone are shared by processes in containers), once
        the sessions it left open are over (``end_sessions``); return how many were marked.
        A worker whose sessions are not over yet is left running, for recovery to find silent.
        """
        workers = self.filter(name=name, stopped_at__isnull=True)
        over = [worker.pk for worker in workers if self.end_sessions(worker)]
        return self.mark_stopped(self.filter(pk__in=over), died=True)

    def record_sessions(self, worker: Worker, ids: list[int]) -> list[list[Any]]:
        """Name the database sessions ``worker``'s process leaves open as it exits at once
        (server ids of its connections, see ``django_iq.stuck``); return them."""
        db = router.db_for_write(self.model)
        sessions = named_sessions(db, ids)
        self.using(db).filter(pk=worker.pk).update(sessions=sessions)
        return sessions

    def end_sessions(self, worker: Worker, wait_seconds: float = 10.0) -> bool:
        """End in the server the sessions a dead worker's process left open (their statements
        stop, their transactions roll back), and wait up to ``wait_seconds`` for them to be
        gone; return whether they are (then they are forgotten). Called only once the process
        is known to be gone: its supervisor saw it exit, or it was declared dead."""
        if not worker.sessions:
            return True
        db = router.db_for_write(self.model)
        sessions = [list(session) for session in worker.sessions]
        end_sessions(db, sessions)
        deadline = time.monotonic() + wait_seconds
        while (sessions := sessions_left(db, sessions)) and time.monotonic() < deadline:
            time.sleep(0.05)  # a backend told to end takes a moment to exit
        if sessions:
            return False
        self.using(db).filter(pk=worker.pk).update(sessions=[])
        worker.sessions = []
        return True

    def silent(self, silent_after_seconds: float) -> models.QuerySet[Worker]:
        """Running workers whose last heartbeat is older than ``silent_after_seconds``."""
        return self.filter(
            stopped_at__isnull=True, heartbeat_at__lt=db_now_plus(-silent_after_seconds)
        )

    def live(self, silent_after_seconds: float | None = None) -> models.QuerySet[Worker]:
        """Running workers that have sent a heartbeat within ``silent_after_seconds``."""
        silent = silent_after_seconds or iq_settings.WORKER_SILENT_AFTER_SECONDS
        return self.filter(stopped_at__isnull=True, heartbeat_at__gte=db_now_plus(-silent))

    def live_queue_lists(self) -> list[list[str]]:
        """The queue lists of the live worker processes (leaders left out); an empty list
        serves every queue."""
        rows = self.live().filter(role="worker").values_list("queues", flat=True)
        return [list(names or []) for names in rows]

    def live_processing_threads(self) -> int:
        """The processing threads of the live worker processes (leaders left out)."""
        threads = self.live().filter(role="worker").aggregate(n=models.Sum("processing_threads"))
        return int(threads["n"] or 0)

    def live_sessions(self) -> list[list[Any]]:
        """The database sessions each live process last reported (``sessions``)."""
        return [list(found or []) for found in self.live().values_list("sessions", flat=True)]

    def prune(self, stopped_before_seconds: float, batch_size: int) -> int:
        """Delete up to ``batch_size`` rows of workers stopped longer ago than given, but none
        naming database sessions still to be ended (``sessions``)."""
        ids = list(
            self.filter(
                stopped_at__lt=db_now_plus(-stopped_before_seconds), sessions=[]
            ).values_list("pk", flat=True)[:batch_size]
        )
        return self.filter(pk__in=ids).delete()[0] if ids else 0
