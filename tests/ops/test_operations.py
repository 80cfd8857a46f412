"""operations.py: each operator action, whichever door it comes through, says the same thing and
leaves one audit record written in the action's own transaction."""

from __future__ import annotations

import io
import json

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db import transaction
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from django_iq import operations
from django_iq.models import CronJob, DisabledJob, Entry, EntryError, OperatorAction, Queue
from tests.admin.conftest import messages_of, run_action
from tests.factories import CronJobFactory, EntryErrorFactory, EntryFactory, QueueFactory

pytestmark = pytest.mark.django_db

RECORD = "tests.testapp.jobs.record"
NOOP = "tests.testapp.jobs.noop"
ACTOR = operations.Actor(door=OperatorAction.Door.COMMAND, name="ops@host (test)")


def audits() -> list[tuple[str, str, int, int, int]]:
    return list(
        OperatorAction.objects.order_by("pk").values_list(
            "door", "action", "done", "skipped", "not_found"
        )
    )


def test_cancel_through_each_door_says_the_same_and_is_audited_once_per_door() -> None:
    superuser = User.objects.create_superuser("root", password="unused")
    admin = Client()
    admin.force_login(superuser)
    api = Client(enforce_csrf_checks=False)
    api.force_login(superuser)
    said = []
    for door in ("command", "admin", "api"):
        free, running = EntryFactory(), EntryFactory(locked=True)
        expected = (
            f"Cancelled 1 entry: {free.pk}. Cancel requested for 1 entry being run (the worker "
            f"stops them): {running.pk}."
        )
        if door == "command":
            out = io.StringIO()
            call_command("iq_cancel", "--id", str(free.pk), str(running.pk), stdout=out)
            said.append((out.getvalue().strip(), expected))
        elif door == "admin":
            response = run_action(admin, Entry, "cancel_entries", [free, running])
            said.append((messages_of(response)[0], expected))
        else:
            response = api.post(
                reverse("django_iq:api:entry-cancel"),
                json.dumps({"ids": [free.pk, running.pk]}),
                content_type="application/json",
            )
            said.append((response.json()["message"], expected))
        assert not Entry.objects.filter(pk=free.pk).exists()

    assert [message for message, _ in said] == [expected for _, expected in said]
    assert audits() == [
        ("command", "cancel", 2, 0, 0),
        ("admin", "cancel", 2, 0, 0),
        ("api", "cancel", 2, 0, 0),
    ]
    assert [a.actor for a in OperatorAction.objects.order_by("pk")][1:] == ["root", "root"]
    assert [a.user_pk for a in OperatorAction.objects.order_by("pk")] == [
        "",
        str(superuser.pk),
        str(superuser.pk),
    ]


def test_the_audit_record_rolls_back_with_the_action() -> None:
    entry = EntryFactory()

    with pytest.raises(RuntimeError), transaction.atomic():
        operations.cancel([entry.pk], ACTOR)
        raise RuntimeError("the caller's transaction fails")

    assert Entry.objects.filter(pk=entry.pk).exists()
    assert not OperatorAction.objects.exists()


def test_every_action_reports_done_skipped_and_not_found_in_one_shape() -> None:
    deferred, ready = EntryFactory(deferred=True), EntryFactory()
    final, retrying = EntryErrorFactory(), EntryErrorFactory(is_final=False)
    QueueFactory(name="emails")
    nightly, weekly = CronJobFactory(name="nightly"), CronJobFactory(name="weekly", disabled=True)
    CronJob.objects.schedule_next(nightly, timezone.now(), max_attempts=3)

    outcomes = [
        operations.run_now([deferred.pk, ready.pk, 404], ACTOR),
        operations.requeue([final.pk, retrying.pk, 404], ACTOR),
        operations.pause(["emails", "nowhere"], ACTOR),
        operations.resume(["emails", "default"], ACTOR),
        operations.disable([RECORD], ACTOR),
        operations.disable([RECORD], ACTOR),
        operations.enable([RECORD, NOOP], ACTOR),
        operations.set_cron_enabled([nightly, weekly], False, ACTOR),
        operations.run_cron_now([CronJob.objects.get(name="weekly")], ACTOR),
    ]

    assert [(o.action, o.done, o.skipped, o.not_found) for o in outcomes] == [
        ("run_now", [deferred.pk], {ready.pk: operations.NOT_DEFERRED}, [404]),
        ("requeue", [final.pk], {retrying.pk: operations.NOT_A_FINAL_FAILURE}, [404]),
        ("pause", ["emails"], {}, ["nowhere"]),
        ("resume", ["emails"], {"default": operations.NOT_PAUSED}, []),
        ("disable", [RECORD], {}, []),
        ("disable", [], {RECORD: operations.ALREADY_DISABLED}, []),
        ("enable", [RECORD], {NOOP: operations.NOT_DISABLED}, []),
        ("disable", ["nightly"], {"weekly": operations.ALREADY_DISABLED}, []),
        ("run_now", [], {"weekly": operations.CRON_NOT_STARTED}, []),
    ]
    assert [
        message for (message,) in OperatorAction.objects.order_by("pk").values_list("message")
    ] == [o.message for o in outcomes]
    assert Queue.objects.get(name="emails").is_paused is False
    assert not DisabledJob.objects.exists()
    assert EntryError.objects.get(pk=final.pk).requeued_at is not None


def test_requeue_all_is_audited_with_its_count() -> None:
    EntryErrorFactory.create_batch(3)

    outcome = operations.requeue_all(ACTOR)

    assert (outcome.done_count, outcome.message) == (3, "Requeued 3 failed entries.")
    assert audits() == [("command", "requeue", 3, 0, 0)]
    assert OperatorAction.objects.get().target == "failed entries (all)"


def test_requeue_matching_refuses_to_run_without_a_filter() -> None:
    EntryErrorFactory()

    with pytest.raises(ValueError, match="needs a job"):
        operations.requeue_matching(ACTOR)

    assert not OperatorAction.objects.exists()
    assert EntryError.objects.failed().count() == 1


def test_a_long_list_is_counted_not_listed() -> None:
    entries = EntryFactory.create_batch(operations.LISTED_ITEMS + 1)

    outcome = operations.cancel([e.pk for e in entries], ACTOR)

    assert outcome.message == f"Cancelled {operations.LISTED_ITEMS + 1} entries: 21 of them."
    assert OperatorAction.objects.get().target.endswith(" and 1 more")
