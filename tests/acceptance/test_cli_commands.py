"""The operator commands as real processes: exit codes, output, and ``iq_status --watch``
stopped by Ctrl-C (SIGINT) or by a supervisor's timeout (SIGTERM)."""

from __future__ import annotations

import json
import signal

import pytest

from django_iq.models import Entry, EntryError, Queue
from tests.conftest import wait_until
from tests.factories import EntryErrorFactory, EntryFactory, QueueFactory
from tests.processes import finish, manage, start_command

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

HEADER = "django_iq status at"


def test_status_json_printed_by_the_process_matches_the_database() -> None:
    EntryFactory.create_batch(3)
    EntryFactory(deferred=True)
    EntryErrorFactory(queue__name="emails")

    result = manage("iq_status", "--json")

    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    counts = {q["name"]: q["counts"] for q in document["queues"]}
    assert counts["default"]["pending"] == Entry.objects.pending().count() == 3
    assert counts["default"]["initial"] == 1
    assert counts["emails"]["failed"] == EntryError.objects.failed().count() == 1


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_watch_refreshes_until_stopped_and_exits_zero(signum: signal.Signals) -> None:
    QueueFactory(name="default")
    watcher = start_command("iq_status", "--watch", "0.2")

    wait_until(lambda: watcher.output().count(HEADER) >= 2, message="two refreshes of the report")
    watcher.send_signal(signum)
    code, output = finish(watcher, 30)

    assert code == 0, output
    assert output.count(HEADER) >= 2
    assert "\x1b" not in output, "no screen clearing when stdout is not a terminal"
    assert "Traceback" not in output


def test_pause_and_resume_exit_zero_and_report_what_they_did() -> None:
    QueueFactory(name="emails")

    paused = manage("iq_pause", "emails")
    assert (paused.returncode, paused.stdout) == (0, "Paused 1 queue: emails.\n"), paused.stderr
    assert Queue.objects.get(name="emails").is_paused

    resumed = manage("iq_resume", "emails")
    assert (resumed.returncode, resumed.stdout) == (0, "Resumed 1 queue: emails.\n")
    assert not Queue.objects.get(name="emails").is_paused


def test_bad_input_exits_non_zero_with_the_message_on_stderr() -> None:
    QueueFactory(name="default")

    result = manage("iq_pause", "nope")

    assert result.returncode == 1
    assert result.stdout == ""
    assert "CommandError: Unknown queue: 'nope'. Known queues: default, emails, reports." in (
        result.stderr
    )


def test_requeue_all_failed_in_a_process() -> None:
    EntryErrorFactory.create_batch(2)

    result = manage("iq_requeue", "--all-failed")

    assert (result.returncode, result.stdout) == (0, "Requeued 2 failed entries.\n"), result.stderr
    assert Entry.objects.pending().count() == 2
