"""What every fault scenario shares: real worker and leader processes, the faults themselves
(signals, held row locks, killed backends), and the verdict read from what the jobs recorded.

The verdict is judged only from ``RecordedRun`` rows the job wrote (its pid, start and end
times) and from what is left in the queue's tables, never from the library's own account.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from django.db import connection, connections, transaction

from django_iq.models import Entry, EntryError, GroupLock, Worker
from tests.conftest import wait_until
from tests.processes import Command, command_env, pid_of, start_command
from tests.testapp.models import RecordedRun

INF = float("inf")
DATABASE_NAMES = {"postgresql": "PostgreSQL", "mysql": "MariaDB", "sqlite": "SQLite"}


@dataclass(frozen=True)
class FaultWindow:
    """A process that was killed or frozen from ``start`` (and thawed at ``end``)."""

    pid: int
    start: float
    end: float = INF


@dataclass
class Verdict:
    """One scenario's figures, as the suite prints them and docs/reliability.md keeps them."""

    scenario: str
    database: str
    entries: int
    faults: int
    reruns: int
    overlaps: list[str]
    lost: list[str]
    excused: int = 0
    left: list[str] = field(default_factory=list)

    def problems(self) -> list[str]:
        return [*self.overlaps, *(f"lost {token}" for token in self.lost), *self.left]


@dataclass
class Run:
    token: str
    group: str
    pid: int
    start: float
    end: float  # INF: the run never returned (its process died or is still frozen)


def recorded_runs(using: str = "default") -> list[Run]:
    """Every run the job recorded. A run that raised records no end: its end is when its worker
    wrote the failure (the error record of that token from that pid), else it never ended."""
    failures: dict[tuple[str, int], list[float]] = defaultdict(list)
    for error in EntryError.objects.using(using).exclude(worker_name=""):
        token = error.args[0] if isinstance(error.args, list) and error.args else None
        try:
            pid = pid_of(error.worker_name)
        except (IndexError, ValueError):  # not a process's name
            continue
        if isinstance(token, str):
            failures[(token, pid)].append(error.failed_at.timestamp())
    runs = []
    for r in RecordedRun.objects.using(using).order_by("started_at"):
        end = r.finished_at
        if end is None:
            end = min((t for t in failures[(r.token, r.pid)] if t >= r.started_at), default=INF)
        runs.append(Run(r.token, r.group_key, r.pid, r.started_at, end))
    return runs


def hit_by_fault(run: Run, windows: Iterable[FaultWindow]) -> bool:
    """A run was in flight on a process when it was killed or frozen."""
    return any(w.pid == run.pid and run.start <= w.start <= run.end for w in windows)


def judge(
    scenario: str,
    tokens: Iterable[str],
    windows: Iterable[FaultWindow],
    faults: int,
    using: str = "default",
) -> Verdict:
    """Every token ran to the end at least once; no two runs of one token or one group
    overlapped, except where one of them was in flight on a process the scenario killed or
    froze; nothing is left in the queue's tables."""
    windows = list(windows)
    expected = list(tokens)
    runs = recorded_runs(using)
    by_token: dict[str, list[Run]] = defaultdict(list)
    by_group: dict[str, list[Run]] = defaultdict(list)
    for run in runs:
        by_token[run.token].append(run)
        if run.group:
            by_group[run.group].append(run)
    lost = [t for t in expected if not any(r.end < INF for r in by_token.get(t, []))]
    reruns = sum(len(by_token[t]) - 1 for t in expected if len(by_token.get(t, [])) > 1)
    overlaps: list[str] = []
    excused = 0
    for label, groups in (("entry", by_token), ("group", by_group)):
        for key, members in groups.items():
            members.sort(key=lambda r: r.start)
            for i, a in enumerate(members):
                for b in members[i + 1 :]:
                    if b.start >= a.end:
                        continue
                    if hit_by_fault(a, windows) or hit_by_fault(b, windows):
                        excused += 1
                        continue
                    overlaps.append(
                        f"{label} {key}: pid {a.pid} ran {a.start:.3f}-{a.end:.3f} and "
                        f"pid {b.pid} started {b.start:.3f}"
                    )
    left = []
    if Entry.objects.using(using).exists():
        left.append(f"{Entry.objects.using(using).count()} entries left")
    if GroupLock.objects.using(using).exists():
        left.append(f"{GroupLock.objects.using(using).count()} group locks left")
    holding = Worker.objects.using(using).filter(stopped_at__isnull=False, locks__isnull=False)
    if holding.exists():
        left.append(f"{holding.distinct().count()} stopped workers holding locks")
    return Verdict(
        scenario=scenario,
        database=DATABASE_NAMES[connections[using].vendor],
        entries=len(expected),
        faults=faults,
        reruns=reruns,
        overlaps=overlaps,
        lost=lost,
        excused=excused,
        left=left,
    )


def charged_outside_the_body(using: str = "default") -> list[str]:
    """Error records of failures that did not happen in the job's body (its frame is not in
    the traceback): attempts charged for the queue's own errors."""
    return [
        f"{e.job_name} {e.args} attempt {e.attempt}: {e.exception_class}: {e.message[:120]}"
        for e in EntryError.objects.using(using).order_by("pk")
        if ", in recorded\n" not in e.traceback
    ]


def env_with(**settings: float | str) -> dict[str, str]:
    """The test settings, with ``DJANGO_IQ_<KEY>`` overrides for the processes."""
    return command_env(**{f"DJANGO_IQ_{key}": str(value) for key, value in settings.items()})


def start_worker(*args: str, env: dict[str, str] | None = None) -> Command:
    return start_command("runworker", *args, env=env)


def start_leader(*args: str, env: dict[str, str] | None = None) -> Command:
    return start_command("runleader", *args, env=env)


def stop_all(commands: Iterable[Command], timeout: float = 60) -> None:
    """SIGTERM the live ones and wait for every one."""
    commands = list(commands)
    for command in commands:
        if command.poll() is None:
            try:
                command.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
    for command in commands:
        try:
            command.finish(timeout)
        except AssertionError:
            pass


def kill_hard(command: Command) -> FaultWindow:
    """SIGKILL a process and every child of it (as an OOM kill of the unit would)."""
    command.kill_hard()  # returns once the process is gone
    return FaultWindow(command.pid, time.time())


def children(command: Command) -> list[int]:
    try:
        return [p.pid for p in psutil.Process(command.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _wait_until_every_thread_is(pid: int, states: str, signal_name: str) -> None:
    """Wait until every thread of the process is in one of ``states`` (letters of
    /proc/<pid>/task/<tid>/stat; a stop or a death reaches the threads one by one), or it is
    gone (reaped)."""

    def state(tid: str) -> str:
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except (FileNotFoundError, ProcessLookupError):  # the thread is gone since it was listed
            return "X"
        # The state follows the command name, in parentheses, which may hold any character.
        return stat.rsplit(")", 1)[1].split()[0]

    def reached() -> bool:
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except (FileNotFoundError, ProcessLookupError):
            return True
        return all(state(tid) in states for tid in tasks)

    wait_until(reached, timeout=10, interval=0.001, message=f"{signal_name} to reach {pid}")


def kill_pid(pid: int) -> FaultWindow:
    """SIGKILL one process. The window opens once it is dead, not when the signal is sent: a
    run it recorded in between (the sender may wait for the CPU after reading the clock) was
    still hit by the kill."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    _wait_until_every_thread_is(pid, "ZX", "SIGKILL")
    return FaultWindow(pid, time.time())


def freeze(pid: int) -> float:
    """SIGSTOP a process; return the moment it is stopped (as ``kill_pid``, not when sent)."""
    os.kill(pid, signal.SIGSTOP)
    _wait_until_every_thread_is(pid, "TtZX", "SIGSTOP")
    return time.time()


def thaw(pid: int, stopped_at: float) -> FaultWindow:
    """SIGCONT a process frozen at ``stopped_at``; the window closes once it is sent."""
    os.kill(pid, signal.SIGCONT)
    return FaultWindow(pid, stopped_at, time.time())


def all_done(tokens: set[str], using: str = "default") -> bool:
    finished = set(
        RecordedRun.objects.using(using)
        .filter(finished_at__isnull=False, token__in=tokens)
        .values_list("token", flat=True)
        .distinct()
    )
    # A cron job's waiting entry is not work to finish: it always exists.
    return finished == tokens and not Entry.objects.using(using).filter(cron_job=None).exists()


def wait_for_all(tokens: set[str], timeout: float, using: str = "default") -> None:
    wait_until(
        lambda: all_done(tokens, using),
        timeout=timeout,
        interval=0.25,
        message=f"{len(tokens)} entries to finish",
    )


def wait_for_no_locks(timeout: float = 30, using: str = "default") -> None:
    wait_until(
        lambda: not GroupLock.objects.using(using).exists(),
        timeout=timeout,
        message="recovery to release every lock",
    )


@contextmanager
def row_held(sql: str, params: list[object], seconds: float) -> Iterator[threading.Thread]:
    """Hold a row lock from another connection for ``seconds``, in a thread; the block runs
    while it is held (it begins once the lock is taken)."""
    taken = threading.Event()

    def hold() -> None:
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(sql, params)
                taken.set()
                time.sleep(seconds)  # the fault: the row stays locked this long
        finally:
            taken.set()
            connections.close_all()

    thread = threading.Thread(target=hold)
    thread.start()
    taken.wait(30)
    try:
        yield thread
    finally:
        thread.join(seconds + 30)


def backend_pids(application_prefix: str = "") -> list[int]:
    """PostgreSQL backends of the test database other than this session."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
            " AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
        )
        return [row[0] for row in cursor.fetchall()]


def terminate_backends() -> int:
    """``pg_terminate_backend`` every other session of the test database; return how many."""
    pids = backend_pids()
    with connection.cursor() as cursor:
        for pid in pids:
            cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
    return len(pids)
