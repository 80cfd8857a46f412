"""Fault injection: the database goes away under a running worker and leader, then comes back.

A TCP proxy between the processes and PostgreSQL drops every connection and refuses new ones
for a few seconds, which is what a database restart or a network cut looks like to them.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator

import pytest
from django.db import connection

from django_iq import enqueue_many
from django_iq.models import Entry, EntryError, GroupLock
from tests.conftest import wait_until
from tests.netproxy import OutageProxy
from tests.processes import command_env, database_url, finish, start_command
from tests.testapp.jobs import record_idempotent
from tests.testapp.models import JobRun

pytestmark = [pytest.mark.postgresql, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

JOBS = 3000


@pytest.fixture
def proxy() -> Iterator[OutageProxy]:
    settings = connection.settings_dict
    proxy = OutageProxy(settings["HOST"] or "127.0.0.1", int(settings["PORT"] or 5432))
    yield proxy
    proxy.close()


def through(proxy: OutageProxy) -> dict[str, str]:
    settings = connection.settings_dict
    direct = f"@{settings['HOST'] or '127.0.0.1'}:{settings['PORT'] or ''}/"
    url = database_url()
    assert direct in url
    return command_env(DATABASE_URL=url.replace(direct, f"@127.0.0.1:{proxy.port}/"))


@pytest.mark.parametrize("outage_seconds", [1.0, 6.0])
def test_a_database_outage_loses_no_entry_and_stops_no_process(
    proxy: OutageProxy, outage_seconds: float
) -> None:
    # 6 s is longer than WORKER_SILENT_AFTER_SECONDS in the test settings (3 s): the leader
    # may declare the worker dead when the database is back, and the worker registers again.
    enqueue_many(record_idempotent, [((f"o-{i}",), {"seconds": 0.002}) for i in range(JOBS)])
    env = through(proxy)
    worker = start_command("runworker", "--threads", "4", env=env)
    leader = start_command("runleader", env=env)
    wait_until(lambda: JobRun.objects.count() >= JOBS // 5, timeout=60, message="work to start")

    proxy.cut()
    time.sleep(outage_seconds)  # the outage's length is the parameter under test
    proxy.restore()

    wait_until(
        lambda: not Entry.objects.exists(), timeout=120, interval=0.5, message="work to finish"
    )
    assert worker.poll() is None, "the worker outlived the outage:\n" + worker.output()[-3000:]
    assert leader.poll() is None, "the leader outlived the outage:\n" + leader.output()[-3000:]
    outputs = []
    for command in (worker, leader):
        command.send_signal(signal.SIGTERM)
        code, output = finish(command, 60)
        assert code == 0, output[-3000:]
        outputs.append(output)

    assert "OperationalError" in outputs[0], "the worker saw the outage"
    assert set(JobRun.objects.values_list("token", flat=True)) == {f"o-{i}" for i in range(JOBS)}
    assert not EntryError.objects.filter(is_final=True).exists()
    assert not GroupLock.objects.exists()
    assert proxy.cuts == 1
