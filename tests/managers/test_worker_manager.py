"""Worker rows through their manager: register, heartbeat, stop, liveness."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from django_iq.exceptions import ProcessNameTaken
from django_iq.models import GroupLock, Worker
from tests.factories import (
    EntryFactory,
    WorkerFactory,
)
from tests.managers.conftest import claim_one

pytestmark = pytest.mark.django_db


# -- workers ----------------------------------------------------------------------------------


def register(name: str = "host:1") -> Worker:
    return Worker.objects.register(
        name=name, role="worker", host="host", pid=1, queues=["default"], processing_threads=4
    )


def test_register_records_the_process() -> None:
    worker = register()

    stored = Worker.objects.get(pk=worker.pk)
    assert (stored.name, stored.role, stored.host, stored.pid) == ("host:1", "worker", "host", 1)
    assert (stored.queues, stored.processing_threads, stored.stopped_at) == (["default"], 4, None)
    assert list(Worker.objects.live()) == [stored]


def test_registering_a_name_again_replaces_its_stopped_row() -> None:
    old = register()
    Worker.objects.mark_stopped(Worker.objects.filter(pk=old.pk), died=True)

    new = register()

    assert list(Worker.objects.values_list("pk", flat=True)) == [new.pk]
    assert new.pk != old.pk and new.stopped_at is None


def test_a_stopped_row_naming_sessions_to_end_is_neither_replaced_nor_pruned() -> None:
    # A process that exited at once with runs going on named its sessions in its row: whoever
    # releases its locks ends them first, so the row must stay until then.
    old = register()
    Worker.objects.mark_stopped(Worker.objects.filter(pk=old.pk), died=True)
    Worker.objects.filter(pk=old.pk).update(sessions=[[4242, 1.5]])
    Worker.objects.filter(pk=old.pk).update(stopped_at=timezone.now() - timedelta(days=30))

    with pytest.raises(ProcessNameTaken, match=r"names database sessions still to be ended"):
        register()
    assert Worker.objects.prune(60, 100) == 0

    assert Worker.objects.get().sessions == [[4242, 1.5]]
    Worker.objects.filter(pk=old.pk).update(sessions=[])
    assert Worker.objects.prune(60, 100) == 1


def test_registering_the_name_of_a_running_process_is_refused_and_leaves_it_alone() -> None:
    running = register()
    EntryFactory()
    claim = claim_one(running)

    with pytest.raises(
        ProcessNameTaken, match=r"^A running process is already registered as 'host:1'"
    ):
        register()

    assert list(Worker.objects.live()) == [running]
    assert GroupLock.objects.get(pk=claim.lock_id).worker_id == running.pk


def test_a_dead_process_is_marked_by_its_name_not_by_a_host_and_pid_it_shares() -> None:
    # Two containers with one host name, each worker PID 1 in its own.
    crashed = register("node:1:aaaaaaaaaaaa")
    other = register("node:1:bbbbbbbbbbbb")
    assert (crashed.host, crashed.pid) == (other.host, other.pid)

    assert Worker.objects.mark_process_dead(crashed.name) == 1

    assert Worker.objects.get(pk=crashed.pk).died
    assert list(Worker.objects.live()) == [other]


def test_heartbeat_records_load_and_held_locks() -> None:
    worker = register()

    assert Worker.objects.heartbeat(
        worker,
        busy_threads=3,
        cpu_percent=55.5,
        memory_percent=40.0,
        is_throttled=True,
        held_lock_ids=lambda: [9, 2],
    )

    stored = Worker.objects.get(pk=worker.pk)
    assert (stored.busy_threads, stored.cpu_percent, stored.memory_percent) == (3, 55.5, 40.0)
    assert (stored.is_throttled, stored.held_lock_ids) == (True, [2, 9])
    assert stored.held_at == stored.heartbeat_at, "the report is stamped in database time"


def test_stop_marks_the_worker_stopped_and_orphans_its_locks() -> None:
    worker = register()
    EntryFactory()
    claim = claim_one(worker)

    Worker.objects.stop(worker)

    stored = Worker.objects.get(pk=worker.pk)
    assert stored.stopped_at is not None and stored.busy_threads == 0 and not stored.died
    assert GroupLock.objects.get(pk=claim.lock_id).worker_id is None
    assert not Worker.objects.live().exists()
    beat = Worker.objects.heartbeat(
        worker, busy_threads=0, cpu_percent=0, memory_percent=0, is_throttled=False
    )
    assert beat is False, "a stopped worker's heartbeat tells it to stop"


def test_heartbeat_of_a_deleted_worker_returns_false() -> None:
    worker = register()
    Worker.objects.filter(pk=worker.pk).delete()

    beat = Worker.objects.heartbeat(
        worker, busy_threads=0, cpu_percent=0, memory_percent=0, is_throttled=False
    )
    assert beat is False


def test_live_excludes_workers_silent_for_longer_than_the_limit() -> None:
    register("fresh")
    WorkerFactory(name="silent", heartbeat_at=timezone.now() - timedelta(hours=1))

    assert list(Worker.objects.live(60).values_list("name", flat=True)) == ["fresh"]
    assert list(Worker.objects.silent(60).values_list("name", flat=True)) == ["silent"]
