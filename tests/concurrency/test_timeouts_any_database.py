"""A worker process stuck on a job blocked in C, on whichever database the suite runs on: the
entry is given up as timed out, the claim's lock goes, and the process exits with status 4 for
its supervisor to replace (docs/howto/timeouts.md)."""

from __future__ import annotations

import pytest

from django_iq.models import Entry, EntryError, GroupLock, Worker
from django_iq.process import EXIT_STUCK
from tests.processes import command_env, finish, start_command
from tests.testapp.jobs import blocks_in_c, record
from tests.testapp.models import RecordedRun

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_a_worker_process_stuck_on_a_job_gives_it_up_and_exits_with_status_4() -> None:
    stuck = blocks_in_c.using(max_attempts=1, group_key="g").enqueue("stuck", 8)
    after = record.using(group_key="g").enqueue("after")

    command = start_command(
        "runworker", "--threads", "1", env=command_env(DJANGO_IQ_TIMEOUT_GRACE_SECONDS="0.5")
    )
    code, output = finish(command, 60)

    assert code == EXIT_STUCK, output[-3000:]
    error = EntryError.objects.get(entry_id=stuck.pk)
    assert (error.exception_class, error.is_final) == ("django_iq.exceptions.JobTimeout", True)
    assert "given up" in error.message
    run = RecordedRun.objects.get(token="stuck")
    assert run.finished_at is None, "the process left while the job was still blocked"
    assert Entry.objects.get(pk=after.pk).state == "pending", "the claim's next entry is free"
    assert not GroupLock.objects.exists(), "nothing is left locked"
    assert Worker.objects.get(pid=command.pid).stopped_at is not None
