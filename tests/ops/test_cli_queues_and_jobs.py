"""``iq_pause``, ``iq_resume``, ``iq_disable`` and ``iq_enable`` through call_command: what each
changes, what it prints, how it refuses bad input."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.management import CommandError
from django.utils import timezone

from django_iq.models import (
    DisabledJob,
    Entry,
    OperatorAction,
    Queue,
)
from tests.factories import (
    DisabledJobFactory,
    EntryFactory,
    QueueFactory,
)
from tests.ops.conftest import NOOP, RECORD, run

pytestmark = pytest.mark.django_db


# -- iq_pause / iq_resume --------------------------------------------------------------------


def paused() -> dict[str, bool]:
    return dict(Queue.objects.values_list("name", "is_paused"))


def test_pause_pauses_each_queue_named_and_reports_them() -> None:
    QueueFactory(name="default")
    QueueFactory(name="emails")

    output = run("iq_pause", "default", "emails")

    assert output == "Paused 2 queues: default, emails.\n"
    assert paused() == {"default": True, "emails": True}


def test_pause_creates_a_declared_queue_that_has_no_row_yet() -> None:
    output = run("iq_pause", "reports")

    assert output == "Paused 1 queue: reports.\n"
    assert paused() == {"reports": True}


def test_pause_reports_queues_already_paused() -> None:
    QueueFactory(name="default", is_paused=True)
    QueueFactory(name="emails")

    output = run("iq_pause", "default", "emails")

    assert output == "Paused 1 queue: emails. Skipped 1, already paused: default.\n"
    assert run("iq_pause", "emails") == "Paused 0 queues. Skipped 1, already paused: emails.\n"
    audits = list(OperatorAction.objects.order_by("pk").values_list("door", "action", "message"))
    assert audits == [
        ("command", "pause", "Paused 1 queue: emails. Skipped 1, already paused: default."),
        ("command", "pause", "Paused 0 queues. Skipped 1, already paused: emails."),
    ]
    assert "(iq_pause)" in OperatorAction.objects.first().actor


def test_pause_refuses_unknown_queues_before_pausing_any() -> None:
    QueueFactory(name="default")

    with pytest.raises(CommandError) as raised:
        run("iq_pause", "default", "nope", "emial")

    assert str(raised.value) == (
        "Unknown queues: 'nope', 'emial' (did you mean 'emails'?). "
        "Known queues: default, emails, reports."
    )
    assert paused() == {"default": False}


def test_resume_serves_paused_queues_again() -> None:
    QueueFactory(name="default", is_paused=True)
    QueueFactory(name="emails")

    output = run("iq_resume", "default", "emails")

    assert output == "Resumed 1 queue: default. Skipped 1, not paused: emails.\n"
    assert paused() == {"default": False, "emails": False}


def test_resume_refuses_an_unknown_queue() -> None:
    with pytest.raises(
        CommandError, match=r"Unknown queue: 'defualt' \(did you mean 'default'\?\)"
    ):
        run("iq_resume", "defualt")


# -- iq_disable / iq_enable ------------------------------------------------------------------


def test_disable_disables_the_jobs_waiting_entries_and_later_ones() -> None:
    EntryFactory.create_batch(2)
    EntryFactory(deferred=True)
    EntryFactory(job_name=NOOP)

    output = run("iq_disable", RECORD)

    assert output == f"Disabled 1 job: {RECORD} (3 entries).\n"
    assert Entry.objects.disabled().filter(job_name=RECORD).count() == 3
    assert Entry.objects.pending().filter(job_name=NOOP).count() == 1
    assert DisabledJob.objects.filter(job_name=RECORD).exists()
    assert (
        run("iq_disable", RECORD)
        == f"Disabled 0 jobs. Skipped 1, already disabled: {RECORD} (0 entries).\n"
    )


def test_disable_refuses_an_unregistered_job_with_a_suggestion() -> None:
    EntryFactory()

    with pytest.raises(CommandError) as raised:
        run("iq_disable", NOOP, "tests.testapp.jobs.recrd")

    assert str(raised.value).startswith(
        "'tests.testapp.jobs.recrd' is not a registered job. Did you mean 'tests.testapp.jobs.record'?"
    )
    assert not DisabledJob.objects.exists(), "nothing is disabled when one name is wrong"


def test_enable_returns_entries_to_pending_or_deferred_by_their_run_at() -> None:
    DisabledJobFactory(job_name=RECORD)
    EntryFactory.create_batch(2, disabled=True)
    EntryFactory(disabled=True, run_at=timezone.now() + timedelta(hours=1))

    output = run("iq_enable", RECORD, NOOP)

    assert output == (f"Enabled 1 job: {RECORD} (3 entries). Skipped 1, not disabled: {NOOP}.\n")
    assert Entry.objects.pending().count() == 2
    assert Entry.objects.initial().count() == 1
    assert not DisabledJob.objects.exists()


def test_enable_accepts_a_disabled_job_that_is_no_longer_registered() -> None:
    DisabledJobFactory(job_name="gone.jobs.old")
    EntryFactory(job_name="gone.jobs.old", disabled=True)

    output = run("iq_enable", "gone.jobs.old")

    assert output == "Enabled 1 job: gone.jobs.old (1 entry).\n"
    assert not DisabledJob.objects.exists()


def test_enable_refuses_an_unknown_job() -> None:
    with pytest.raises(CommandError, match=r"'nope\.job' is not a registered job"):
        run("iq_enable", "nope.job")
