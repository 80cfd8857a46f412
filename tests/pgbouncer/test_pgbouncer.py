"""django_iq through PgBouncer in transaction pooling mode, with real processes: enqueue, workers
(listening directly or polling), leader election and failover, recovery of a killed worker's
entry, and the admin. Judged by the rows the jobs recorded and by what each client sees."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.contrib import admin

from django_iq.models import Entry, EntryError, GroupLock, LeaderLease, Queue
from tests.conftest import wait_until
from tests.factories import EntryErrorFactory, QueueFactory
from tests.pgbouncer.conftest import POOL_SIZE, Pooler
from tests.processes import (
    ROOT,
    Command,
    elect_one_of_two_leaders,
    lease_holder,
    pid_of,
    start_command,
)
from tests.testapp.jobs import recorded, wait_for_file
from tests.testapp.models import JobRun, RecordedRun

pytestmark = [pytest.mark.postgresql, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

NO_NOTIFICATIONS = "notifications do not reach the listening connection"


def shell(pooler: Pooler, code: str, **env: str) -> str:
    """Run ``code`` in ``python -m django shell`` through the pooler; return its output."""
    done = subprocess.run(
        [sys.executable, "-m", "django", "shell", "--verbosity", "0", "-c", code],
        cwd=ROOT,
        env=pooler.env(**env),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def stop(*commands: Command) -> str:
    """SIGTERM each command; assert each exits 0; return their output together."""
    for command in commands:
        command.send_signal(signal.SIGTERM)
    outputs = []
    for command in commands:
        code, output = command.finish(60)
        assert code == 0, output[-3000:]
        outputs.append(output)
    return "\n".join(outputs)


def test_single_and_bulk_enqueues_through_the_pooler(pooler: Pooler) -> None:
    # 2,500 entries go through COPY, 50 through one INSERT, one through the single enqueue.
    output = shell(
        pooler,
        "from django_iq import enqueue_many\n"
        "from tests.testapp.jobs import recorded\n"
        "recorded.enqueue('single')\n"
        "enqueue_many(recorded, [((f'copy-{i}',), {}) for i in range(2500)])\n"
        "enqueue_many(recorded, [((f'insert-{i}',), {}) for i in range(50)])\n"
        "print('enqueued')\n",
    )

    assert output.strip() == "enqueued"
    tokens = {args[0] for args in Entry.objects.values_list("args", flat=True)}
    assert tokens == {"single"} | {f"copy-{i}" for i in range(2500)} | {
        f"insert-{i}" for i in range(50)
    }
    assert Entry.objects.filter(job_name=recorded.name, state="pending").count() == 2551


@pytest.mark.parametrize("listen_directly", [True, False], ids=["listen-direct", "polling"])
def test_worker_processes_through_the_pooler_run_each_entry_once(
    pooler: Pooler, listen_directly: bool
) -> None:
    count = 300
    for i in range(count):
        recorded.enqueue(f"job-{i}")
    # Listening directly, workers poll only every 30 s: a late entry that starts at once was
    # announced by a notification. Without the direct alias they poll every 0.05 s.
    env = {"DJANGO_IQ_POLL_INTERVAL_SECONDS": "30"} if listen_directly else {}
    workers = [
        start_command(
            "runworker", "--threads", "2", env=pooler.env(listen_directly=listen_directly, **env)
        )
        for _ in range(3)
    ]
    wait_until(lambda: RecordedRun.objects.count() >= count, timeout=120, message="the drain")
    if not listen_directly:
        for worker in workers:
            wait_until(
                lambda worker=worker: NO_NOTIFICATIONS in worker.output(),
                timeout=60,
                message="each worker to find that notifications do not reach it",
            )
    else:
        time.sleep(1.0)  # let the schedulers go idle: the next entry must wake them

    enqueued_at = float(
        shell(
            pooler,
            "import time\n"
            "from tests.testapp.jobs import recorded\n"
            "recorded.enqueue('late')\n"
            "print(time.time())\n",
        )
    )
    wait_until(
        lambda: RecordedRun.objects.filter(token="late").exists(), timeout=60, message="late"
    )
    output = stop(*workers)

    late = RecordedRun.objects.get(token="late")
    assert late.started_at - enqueued_at < 10, "started long before the 30 s poll"
    runs = list(RecordedRun.objects.values_list("token", "pid", "finished_at"))
    assert len(runs) == count + 1, "each entry ran exactly once"
    assert {token for token, _, _ in runs} == {f"job-{i}" for i in range(count)} | {"late"}
    assert all(finished is not None for _, _, finished in runs)
    assert len({pid for _, pid, _ in runs}) >= 2, "the work was shared"
    assert not Entry.objects.exists() and not GroupLock.objects.exists()
    assert "Traceback" not in output
    assert (NO_NOTIFICATIONS in output) is (not listen_directly)


def session_timeouts(pooler: Pooler) -> set[tuple[str, str]]:
    """The lock and idle-transaction timeouts every server connection of the pool has: as
    many clients as the pool has connections, each inside a transaction, hold them all."""
    clients = [pooler.connect() for _ in range(POOL_SIZE)]
    try:
        seen = set()
        for client in clients:
            lock = client.execute("SHOW lock_timeout").fetchone()
            idle = client.execute("SHOW idle_in_transaction_session_timeout").fetchone()
            assert lock is not None and idle is not None
            seen.add((str(lock[0]), str(idle[0])))
        return seen
    finally:
        for client in clients:
            client.close()


def test_leaders_through_the_pooler_elect_one_fail_over_and_leave_no_session_setting(
    pooler: Pooler,
) -> None:
    active, standby, active_name = elect_one_of_two_leaders(pooler.env())
    assert "leader elected" in active.output() and "leader elected" not in standby.output()

    active.kill_hard()
    wait_until(
        lambda: lease_holder() and lease_holder() != active_name,
        timeout=20,
        message="the standby to lead",
    )
    assert pid_of(lease_holder()) == standby.pid
    assert LeaderLease.objects.get().epoch == 2
    time.sleep(1.0)  # the new leader runs its duties' fenced transactions meanwhile
    output = stop(standby)
    assert "leadership released" in output and "Traceback" not in output

    # The leaders bounded every transaction of theirs; no server connection kept a bound.
    assert session_timeouts(pooler) == {("0", "0")}
    # What a session-level SET through the pooler does instead: the bound stays on the server
    # connection, for the next client's transactions.
    with pooler.connect(autocommit=True) as client:
        client.execute("SET lock_timeout = '1234ms'")
    assert ("1234ms", "0") in session_timeouts(pooler)


def test_a_killed_workers_entry_is_recovered_and_run_by_another_through_the_pooler(
    pooler: Pooler, tmp_path: Path
) -> None:
    release = tmp_path / "release"
    wait_for_file.enqueue("survivor", str(release))
    leader = start_command("runleader", env=pooler.env())
    doomed = start_command("runworker", "--threads", "1", env=pooler.env())
    wait_until(
        lambda: JobRun.objects.filter(token__startswith="survivor:started:").exists(),
        message="the first run to start",
    )

    doomed.kill_hard()
    release.touch()
    rescuer = start_command("runworker", "--threads", "1", env=pooler.env())
    wait_until(
        lambda: JobRun.objects.filter(token="survivor").exists(),
        timeout=60,
        message="another worker to finish it",
    )

    starts = JobRun.objects.filter(token__startswith="survivor:started:")
    assert set(starts.values_list("pid", flat=True)) == {doomed.pid, rescuer.pid}
    error = EntryError.objects.get()
    assert error.exception_class == "django_iq.exceptions.WorkerLost" and error.attempt == 1
    wait_until(
        lambda: not Entry.objects.exists() and not GroupLock.objects.exists(), message="clean up"
    )
    output = stop(leader, rescuer)
    assert "recovered lock=" in output and "Traceback" not in output


def admin_pages() -> list[str]:
    """Every django_iq model's changelist the admin has (the dashboard's is its page)."""
    return sorted(
        m._meta.model_name for m in admin.site._registry if m._meta.app_label == "django_iq"
    )


def test_the_admin_through_the_pooler_lists_and_pauses_a_queue(pooler: Pooler) -> None:
    for i in range(5):
        recorded.enqueue(f"listed-{i}")
    EntryErrorFactory()
    reports = QueueFactory(name="reports")
    pages = admin_pages()
    assert {"entry", "queue", "runoutcome", "batch"} <= set(pages)

    output = shell(
        pooler,
        "from django.contrib.auth.models import User\n"
        "from django.test import Client\n"
        "from django.urls import reverse\n"
        "client = Client()\n"
        "client.force_login(User.objects.create_superuser('pooled', 'p@example.com', 'pw'))\n"
        f"for page in {pages!r}:\n"
        "    url = reverse(f'admin:django_iq_{page}_changelist')\n"
        "    print(page, client.get(url, follow=True).status_code)\n"
        "response = client.post(reverse('admin:django_iq_queue_changelist'), "
        f"{{'action': 'pause_queues', '_selected_action': [{reports.pk}]}})\n"
        "print('action', response.status_code)\n",
    )

    statuses = dict(line.split() for line in output.strip().splitlines())
    assert statuses == {**dict.fromkeys(pages, "200"), "action": "302"}
    assert Queue.objects.get(pk=reports.pk).is_paused
