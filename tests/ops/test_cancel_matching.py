"""Cancel by filter: every waiting entry of a job or a queue, counted first (the dry run), through
each door (``iq_cancel --job/--queue``, ``POST /entries/cancel/`` with filters, the queue and
entry admin actions with their confirmation page), each cancel audited; entries a worker holds
are left alone."""

from __future__ import annotations

import json

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission, User
from django.core.management import CommandError
from django.test import Client
from django.urls import reverse

from django_iq.models import Entry, OperatorAction, Queue, RunOutcome
from tests.admin.conftest import messages_of, run_action
from tests.factories import EntryFactory, QueueFactory
from tests.ops.conftest import run

pytestmark = pytest.mark.django_db

OTHER_JOB = "tests.testapp.jobs.noop"


@pytest.fixture
def entries() -> dict[str, list[Entry]]:
    emails = QueueFactory(name="emails")
    return {
        "waiting": [EntryFactory(queue=emails), EntryFactory(queue=emails, deferred=True)],
        "held": [EntryFactory(queue=emails, locked=True)],
        "other_job": [EntryFactory(queue=emails, job_name=OTHER_JOB)],
        "other_queue": [EntryFactory()],
    }


def left(entries: dict[str, list[Entry]]) -> set[str]:
    ids = set(Entry.objects.values_list("pk", flat=True))
    return {name for name, rows in entries.items() if all(e.pk in ids for e in rows)}


def test_the_command_counts_first_then_cancels_the_waiting_entries_of_a_queue(
    entries: dict[str, list[Entry]],
) -> None:
    assert run("iq_cancel", "--queue", "emails", "--dry-run") == (
        "Would cancel 3 waiting entries matching queue=emails.\n"
    )
    assert left(entries) == set(entries) and not OperatorAction.objects.exists()

    assert run("iq_cancel", "--queue", "emails") == (
        "Cancelled 3 waiting entries matching queue=emails.\n"
    )
    assert left(entries) == {"held", "other_queue"}
    assert RunOutcome.objects.filter(status="cancelled").count() == 3
    (action,) = OperatorAction.objects.all()
    assert (action.door, action.action, action.done, action.target) == (
        "command",
        "cancel",
        3,
        "waiting entries matching queue=emails",
    )


def test_the_command_cancels_the_waiting_entries_of_a_job_in_a_queue(
    entries: dict[str, list[Entry]],
) -> None:
    assert run("iq_cancel", "--job", OTHER_JOB, "--queue", "emails") == (
        f"Cancelled 1 waiting entry matching job={OTHER_JOB} queue=emails.\n"
    )
    assert left(entries) == {"waiting", "held", "other_queue"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "Say which entries to cancel"),
        (("--id", "1", "--queue", "emails"), "Give either --id or --job/--queue, not both."),
        (("--id", "1", "--dry-run"), "--dry-run counts the entries of --job/--queue"),
        (("--queue", "nope"), "nope"),
    ],
)
def test_the_command_refuses_what_it_cannot_do_and_changes_nothing(
    entries: dict[str, list[Entry]], args: tuple[str, ...], message: str
) -> None:
    with pytest.raises(CommandError, match=message):
        run("iq_cancel", *args)
    assert left(entries) == set(entries)


def test_the_api_counts_first_then_cancels_by_filter(entries: dict[str, list[Entry]]) -> None:
    client = Client()
    client.force_login(User.objects.create_superuser("root", password="unused"))
    path = reverse("django_iq:api:entry-cancel")

    def post(body: object) -> tuple[int, object]:
        response = client.post(path, json.dumps(body), content_type="application/json")
        return response.status_code, response.json()

    assert post({"queue": "emails", "dry_run": True}) == (
        200,
        {
            "count": 3,
            "dry_run": True,
            "matching": {"queue": "emails"},
            "message": "Would cancel 3 waiting entries matching queue=emails.",
        },
    )
    assert left(entries) == set(entries)
    status, body = post({"queue": "emails"})
    assert (status, body["count"], body["dry_run"]) == (200, 3, False)
    assert left(entries) == {"held", "other_queue"}
    (log,) = LogEntry.objects.all()
    assert log.object_repr == "waiting entries matching queue=emails"
    assert post({"ids": [1], "queue": "emails"})[0] == 400
    assert post({"queue": "emails", "dry_run": "yes"})[0] == 400
    assert post({"job": ""})[0] == 400
    assert post({})[0] == 400


def test_the_queue_action_shows_the_counts_and_cancels_once_confirmed(
    entries: dict[str, list[Entry]],
) -> None:
    client = Client()
    client.force_login(User.objects.create_superuser("root", password="unused"))
    emails = Queue.objects.get(name="emails")

    page = run_action(client, Queue, "cancel_waiting_entries", [emails])

    assert page.status_code == 200
    assert "emails: 3 waiting entries" in page.content.decode()
    assert left(entries) == set(entries), "nothing before the confirmation"
    done = run_action(client, Queue, "cancel_waiting_entries", [emails], confirm="yes")
    assert messages_of(done) == ["Cancelled 3 waiting entries matching queue=emails."]
    assert left(entries) == {"held", "other_queue"}


def test_the_entry_action_cancels_every_waiting_entry_of_the_selected_jobs(
    entries: dict[str, list[Entry]],
) -> None:
    client = Client()
    client.force_login(User.objects.create_superuser("root", password="unused"))
    chosen = entries["other_job"]

    page = run_action(client, Entry, "cancel_jobs_waiting", chosen)
    assert f"{OTHER_JOB}: 1 waiting entry" in page.content.decode()
    done = run_action(client, Entry, "cancel_jobs_waiting", chosen, confirm="yes")

    assert messages_of(done) == [f"Cancelled 1 waiting entry matching job={OTHER_JOB}."]
    assert left(entries) == {"waiting", "held", "other_queue"}


def test_a_user_without_the_cancel_permission_is_not_offered_the_action() -> None:
    user = User.objects.create_user("staff", password="unused", is_staff=True)
    for codename in ("view_queue", "pause_queue"):
        user.user_permissions.add(Permission.objects.get(codename=codename))
    client = Client()
    client.force_login(user)
    QueueFactory(name="emails")

    response = client.get(reverse("admin:django_iq_queue_changelist"))

    assert response.status_code == 200
    assert "pause_queues" in response.content.decode(), "the actions it may take are there"
    assert "cancel_waiting_entries" not in response.content.decode()
