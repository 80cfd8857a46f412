"""The connection budget, read from the server: the sessions each kind of django_iq process holds
in ``pg_stat_activity``, idle and busy, attributed to processes by their TCP ports.

At most 2 sessions per idle worker process, threads + 2 per busy one, 2 per leader, none for the
``--processes`` supervisor; no session left idle in a transaction.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

import psutil
import pytest
from django.db import connection

from tests.conftest import wait_until
from tests.faults.harness import env_with, stop_all, wait_for_all
from tests.processes import Command, start_command
from tests.testapp.jobs import recorded

pytestmark = [pytest.mark.slow, pytest.mark.postgresql, pytest.mark.django_db(transaction=True)]

TIMING = {"HEARTBEAT_INTERVAL_SECONDS": 0.5, "POLL_INTERVAL_SECONDS": 0.2}
# A processing thread closes its session after 2 s with nothing to run; then a heartbeat or two.
IDLE_AFTER_SECONDS = 4.0


def server_sessions() -> dict[int, str]:
    """The state of each client session of the test database, by the client's TCP port."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT client_port, state, now() - state_change > interval '1 second' "
            "FROM pg_stat_activity WHERE datname = current_database() AND client_port > 0 "
            "AND pid <> pg_backend_pid()"
        )
        rows = cursor.fetchall()
    return {port: ("stuck " if long else "") + (state or "") for port, state, long in rows}


def ports_of(pid: int) -> set[int]:
    """The local ports of the TCP connections process ``pid`` has open to the server."""
    server_port = int(connection.settings_dict["PORT"] or 5432)
    try:
        found = psutil.Process(pid).net_connections(kind="tcp")
    except psutil.NoSuchProcess:
        return set()
    return {c.laddr.port for c in found if c.raddr and c.raddr.port == server_port}


def sessions_of(pids: Iterable[int]) -> dict[int, list[str]]:
    """Each process's server sessions (their states), read from ``pg_stat_activity``."""
    sessions = server_sessions()
    return {pid: [sessions[port] for port in ports_of(pid) if port in sessions] for pid in pids}


def worker_pids(supervisor: Command) -> list[int]:
    return [child.pid for child in psutil.Process(supervisor.pid).children()]


def test_each_kind_of_process_keeps_within_its_session_budget() -> None:
    env = env_with(**TIMING)
    leader = start_command("runleader", env=env)
    two = start_command("runworker", "--threads", "2", env=env)
    four = start_command("runworker", "--threads", "4", env=env)
    supervisor = start_command("runworker", "--processes", "2", "--threads", "1", env=env)
    commands = [leader, two, four, supervisor]
    try:
        wait_until(
            lambda: (
                all("worker started" in c.output() for c in (two, four))
                and supervisor.output().count("worker started") == 2
                and "leader elected" in leader.output()
            ),
            timeout=60,
            message="the workers and the leader to start",
        )
        children = worker_pids(supervisor)
        threads = {two.pid: 2, four.pid: 4, **dict.fromkeys(children, 1)}

        # Busy: more 3-second runs than threads, each run using the ORM (its own session).
        tokens = {f"busy-{i}" for i in range(16)}
        recorded.enqueue_many([((token,), {"seconds": 3.0}) for token in sorted(tokens)])
        busy_seen: dict[int, int] = dict.fromkeys(threads, 0)
        busy_counts: list[dict[int, list[str]]] = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not all(
            busy_seen[pid] >= n for pid, n in threads.items()
        ):
            counts = sessions_of([*threads, leader.pid, supervisor.pid])
            busy_counts.append(counts)
            for pid in threads:
                busy_seen[pid] = max(busy_seen[pid], len(counts[pid]))
            time.sleep(0.1)  # the sampling interval: every sample is judged, not a condition
        wait_for_all(tokens, timeout=60)

        # Idle: nothing to run for a while.
        time.sleep(IDLE_AFTER_SECONDS)  # the idleness under test: its sessions must close
        idle_counts = [sessions_of([*threads, leader.pid, supervisor.pid]) for _ in range(10)]
    finally:
        stop_all(commands)

    over = [
        (pid, states)
        for counts in busy_counts
        for pid, states in counts.items()
        if pid in threads and len(states) > threads[pid] + 2
    ]
    assert not over, f"busy workers over threads + 2: {over[:5]}"
    # Every processing thread held a session of its own while it ran: the budget is measured
    # at full use, not at rest.
    assert all(busy_seen[pid] >= n for pid, n in threads.items()), (busy_seen, threads)
    for counts in [*busy_counts, *idle_counts]:
        assert len(counts[leader.pid]) <= 2, counts[leader.pid]
        assert counts[supervisor.pid] == [], "the supervisor holds no session"
        stuck = [states for states in counts.values() if "stuck idle in transaction" in states]
        assert not stuck, f"a session left idle in a transaction: {stuck}"
    for counts in idle_counts:
        idle_over = {pid: states for pid, states in counts.items() if len(states) > 2}
        assert not idle_over, f"idle processes over 2 sessions: {idle_over}"
