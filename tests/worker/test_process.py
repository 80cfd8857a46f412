"""IQProcess, the base of the worker, the leader and the supervisor: its Worker row (register,
heartbeat, register again after being declared dead, mark stopped) and its stop signals."""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest

from django_iq import process as process_module
from django_iq.exceptions import InvalidProcessName
from django_iq.leader import Leader
from django_iq.models import Worker
from django_iq.process import MAX_NAME_LENGTH, SAME_STOP_REQUEST_SECONDS, IQProcess
from django_iq.supervisor import Supervisor
from django_iq.worker import WorkerProcess

pytestmark = pytest.mark.django_db(transaction=True)

IDLE = {"busy_threads": 0, "cpu_percent": 0.0, "memory_percent": 0.0, "is_throttled": False}


class Recorded(IQProcess):
    """A process whose stop requests are recorded instead of acted on."""

    role = Worker.Role.WORKER

    def __init__(self) -> None:
        super().__init__(f"test-process:{os.getpid()}")
        self.requests: list[tuple[str, int]] = []

    def registration(self) -> dict[str, Any]:
        return {"queues": ["emails"], "processing_threads": 3}

    def on_stop_request(self, signum: int) -> None:
        self.requests.append(("stop", signum))
        super().stop()

    def on_second_stop_request(self, signum: int) -> None:
        self.requests.append(("at once", signum))


def test_register_writes_the_row_with_what_the_process_reports() -> None:
    process = Recorded()

    worker = process.register()

    row = Worker.objects.get(pk=worker.pk)
    assert (row.name, row.role, row.pid, row.queues, row.processing_threads) == (
        process.name,
        "worker",
        os.getpid(),
        ["emails"],
        3,
    )
    assert row.stopped_at is None


def test_a_process_declared_dead_registers_again_on_its_next_heartbeat() -> None:
    process = Recorded()
    first = process.register()
    assert process.heartbeat(**IDLE) is True

    assert Worker.objects.declare_dead(first.pk, 0)
    assert process.heartbeat(**IDLE) is False

    assert process.worker is not None and process.worker.pk != first.pk
    live = Worker.objects.filter(stopped_at__isnull=True)
    assert list(live.values_list("pk", flat=True)) == [process.worker.pk]
    assert process.heartbeat(**IDLE) is True


def test_a_stopping_process_declared_dead_does_not_register_again() -> None:
    process = Recorded()
    first = process.register()
    process.stop()

    assert Worker.objects.declare_dead(first.pk, 0)
    assert process.heartbeat(**IDLE) is False

    assert process.worker == first
    assert not Worker.objects.filter(stopped_at__isnull=True).exists()


def test_mark_stopped_runs_the_last_flush_then_stops_the_row() -> None:
    process = Recorded()
    worker = process.register()
    flushed: list[bool] = []

    process.mark_stopped(before=lambda: flushed.append(True))

    assert flushed == [True]
    assert Worker.objects.get(pk=worker.pk).stopped_at is not None


def test_one_stop_request_delivered_twice_is_one_request(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [100.0]
    monkeypatch.setattr(process_module.time, "monotonic", lambda: clock[0])
    process = Recorded()

    process._on_signal(signal.SIGTERM, None)
    clock[0] += SAME_STOP_REQUEST_SECONDS / 2
    process._on_signal(signal.SIGTERM, None)  # the same request, through the process group
    clock[0] += SAME_STOP_REQUEST_SECONDS
    process._on_signal(signal.SIGINT, None)  # an operator insisting

    assert process.requests == [("stop", signal.SIGTERM), ("at once", signal.SIGINT)]
    assert process.stopping.is_set()


def test_a_process_without_a_role_keeps_no_row() -> None:
    supervisor = Supervisor(processes=1, burst=True)

    with pytest.raises(TypeError, match="keeps no Worker row"):
        supervisor._register()

    assert not Worker.objects.exists()


def test_processes_given_one_name_in_one_process_register_rows_of_their_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # One pid and one node name for all four: what separates them is the random part alone,
    # as for workers that are each PID 1 in a container of their own.
    monkeypatch.setenv("DJANGO_IQ_HOST_NAME", "node")
    processes = [WorkerProcess(name="w"), WorkerProcess(name="w"), Leader(name="w"), Leader()]
    for process in processes:
        process.register()

    names = [process.name for process in processes]
    assert len(set(names)) == 4, names
    assert all(name.startswith(f"w:{os.getpid()}:") for name in names[:3])
    assert names[3].startswith(f"node:{os.getpid()}:") and names[3].endswith(":leader")
    rows = Worker.objects.live().order_by("pk")
    assert list(rows.values_list("name", "host", "pid")) == [
        (name, "node", os.getpid()) for name in names
    ]


@pytest.mark.parametrize("make", [WorkerProcess, Leader, Supervisor], ids=lambda m: m.__name__)
def test_an_over_long_name_is_refused_before_anything_is_written(make: Any) -> None:
    options = {"processes": 1, "burst": True} if make is Supervisor else {}

    with pytest.raises(InvalidProcessName, match=r"^The name is 300 characters long; at most 150"):
        make(name="x" * 300, **options)

    assert not Worker.objects.exists()


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("w\x00", "has a NUL character"),
        ("w\udc80", "lone surrogate"),
        ("w\nx", "control character at position 1"),
    ],
)
@pytest.mark.parametrize("make", [WorkerProcess, Leader, Supervisor], ids=lambda m: m.__name__)
def test_a_name_that_is_not_printable_text_is_refused_before_anything_is_written(
    make: Any, name: str, problem: str
) -> None:
    options = {"processes": 1, "burst": True} if make is Supervisor else {}

    with pytest.raises(InvalidProcessName, match=problem):
        make(name=name, **options)

    assert not Worker.objects.exists()


@pytest.mark.parametrize("host", ["n" * 256, "node\udc80", "node\t1"])
def test_a_node_name_the_row_cannot_keep_is_refused_even_beside_a_name(
    monkeypatch: pytest.MonkeyPatch, host: str
) -> None:
    monkeypatch.setenv("DJANGO_IQ_HOST_NAME", host)

    with pytest.raises(InvalidProcessName, match=r"^The node name \(DJANGO_IQ_HOST_NAME"):
        WorkerProcess(name="w")

    assert not Worker.objects.exists()


def test_an_over_long_node_name_standing_for_the_name_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DJANGO_IQ_HOST_NAME", "n" * (MAX_NAME_LENGTH + 1))

    with pytest.raises(InvalidProcessName, match=r"^The node name \(DJANGO_IQ_HOST_NAME"):
        WorkerProcess()

    longest = WorkerProcess(name="w" * MAX_NAME_LENGTH, instance="f" * 12)
    assert longest.name == f"{'w' * MAX_NAME_LENGTH}:{os.getpid()}:{'f' * 12}"
    # The longest a name can be, a leader's with a 7-digit pid, fits its column.
    leader = Leader(name="w" * MAX_NAME_LENGTH)
    leader.name = leader.name.replace(f":{os.getpid()}:", ":4194304:")
    assert Worker.objects.get(pk=leader.register().pk).name == leader.name


def test_a_worker_exiting_at_once_does_not_register_again_when_found_declared_dead() -> None:
    # Its row, declared dead, names the sessions it leaves open; registering again would
    # replace that row, and move its kept locks to a fresh row naming none.
    worker = WorkerProcess(name="host")
    row = worker.register()
    Worker.objects.filter(pk=row.pk).update(sessions=[[4242, 1.5]])
    Worker.objects.mark_stopped(Worker.objects.filter(pk=row.pk), died=True)
    worker.stuck = True

    alive = worker.heartbeat(
        busy_threads=1, cpu_percent=0.0, memory_percent=0.0, is_throttled=False, held_lock_ids=[]
    )

    assert not alive and worker.worker is not None and worker.worker.pk == row.pk
    assert list(Worker.objects.values_list("pk", "sessions")) == [(row.pk, [[4242, 1.5]])]
