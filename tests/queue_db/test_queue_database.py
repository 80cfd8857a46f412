"""django_iq with its tables on a database of their own (``DJANGO_IQ["DATABASE"] = "queue"``
and ``QueueRouter``): migrations, enqueue, a real worker and leader, the admin pages, API
tokens of users who live in the application's database, the testing helpers, and enqueueing
on the application transaction's commit."""

from __future__ import annotations

import io
import json

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.management import call_command
from django.db import connections, router, transaction
from django.test import Client, override_settings
from django.urls import reverse

import django_iq
from django_iq.models import ApiToken, Entry, Queue, RunOutcome, Worker
from django_iq.testing import run_jobs
from tests.conftest import wait_until
from tests.processes import command_env, database_url, start_command, stop_cleanly
from tests.testapp.jobs import record, returns_after
from tests.testapp.models import JobRun

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "queue"])

User = get_user_model()


def queue_env(**extra: str) -> dict[str, str]:
    """What a worker or leader of this project is started with: both databases."""
    return command_env(
        DJANGO_SETTINGS_MODULE="tests.settings_queue_db",
        DATABASE_URL=database_url(alias="default"),
        QUEUE_DATABASE_URL=database_url(alias="queue"),
        **extra,
    )


def tables(alias: str) -> set[str]:
    with connections[alias].cursor() as cursor:
        return set(connections[alias].introspection.table_names(cursor))


def test_django_iqs_tables_live_on_the_queue_database_and_the_applications_do_not() -> None:
    on_queue, on_app = tables("queue"), tables("default")

    assert {"django_iq_entry", "django_iq_grouplock", "django_iq_apitoken"} <= on_queue
    assert not {name for name in on_app if name.startswith("django_iq_")}
    assert "auth_user" in on_app and "auth_user" not in on_queue
    assert "testapp_jobrun" in on_app and "testapp_jobrun" not in on_queue
    assert router.db_for_write(Entry) == "queue" and router.db_for_write(User) == "default"


def test_a_real_worker_and_leader_run_what_is_enqueued() -> None:
    leader = start_command("runleader", env=queue_env())
    worker = start_command("runworker", "--threads", "2", env=queue_env())
    wait_until(
        lambda: Worker.objects.filter(stopped_at__isnull=True).count() == 2,
        message="the leader and the worker to start",
    )

    entries = [record.enqueue(f"queued-{i}") for i in range(5)]
    results = [outcome.status for outcome in django_iq.as_completed(entries, timeout=30)]
    stop_cleanly(worker, leader)

    assert results == ["succeeded"] * 5
    # The jobs wrote to the application's database, their outcomes are on the queue's.
    assert sorted(JobRun.objects.values_list("token", flat=True)) == [
        f"queued-{i}" for i in range(5)
    ]
    assert RunOutcome.objects.using("queue").filter(status="succeeded").count() == 5


def test_an_enqueue_on_the_applications_commit_follows_its_transaction() -> None:
    """The application's ``transaction.atomic()`` does not hold the queue's writes: an entry
    enqueued inside it is there even if the application rolls back. Enqueued on its commit
    (``transaction.on_commit``), a rollback enqueues nothing."""
    with pytest.raises(RuntimeError), transaction.atomic():
        JobRun.objects.create(token="rolled-back", started_at=0, pid=0)
        transaction.on_commit(lambda: record.enqueue("never"))
        raise RuntimeError("the view fails")
    assert not Entry.objects.exists() and not JobRun.objects.exists()

    with transaction.atomic():
        JobRun.objects.create(token="committed", started_at=0, pid=0)
        transaction.on_commit(lambda: record.enqueue("after-commit"))
        assert not Entry.objects.exists(), "not before the commit"
    assert [e.args for e in Entry.objects.all()] == [["after-commit"]]


def test_the_testing_helpers_run_entries_on_the_queue_database() -> None:
    entry = returns_after.enqueue(42)

    [outcome] = run_jobs()

    assert outcome.succeeded and outcome.return_value == 42
    assert django_iq.wait(entry, timeout=5) == 42


def test_run_on_commit_runs_the_entries_of_the_queue_database() -> None:
    with override_settings(DJANGO_IQ={**settings.DJANGO_IQ, "RUN_ON_COMMIT": True}):
        record.enqueue("on-commit")
    assert JobRun.objects.filter(token="on-commit").exists()
    assert not Entry.objects.exists()


def test_the_admin_pages_and_the_dashboard_read_the_queue_database(client: Client) -> None:
    client.force_login(User.objects.create_superuser("root"))
    shown = record.enqueue("shown")
    Queue.objects.ensure("emails")

    pages = [
        reverse("admin:django_iq_entry_changelist"),
        reverse("admin:django_iq_queue_changelist"),
        reverse("admin:django_iq_apitoken_changelist"),
        reverse("admin:django_iq_apitoken_add"),
        reverse("admin:django_iq_dashboard"),
    ]
    for page in pages:
        response = client.get(page)
        assert response.status_code == 200, page
    listed = client.get(reverse("admin:django_iq_entry_changelist"))
    assert list(listed.context["cl"].result_list) == [shown]
    page = client.get(reverse("admin:django_iq_entry_change", args=[shown.pk]))
    assert page.status_code == 200 and "shown" in page.content.decode()


def test_iq_status_reads_django_iqs_tables_on_the_queue_database() -> None:
    record.enqueue("sized")
    out = io.StringIO()

    call_command("iq_status", "--json", stdout=out)

    listed = json.loads(out.getvalue())["tables"]
    assert {table["database"] for table in listed} == {"queue"}
    assert [table["table"] for table in listed if table["error"]] == []
    entries = next(table for table in listed if table["table"] == "django_iq_entry")
    assert entries["size_bytes"] > 0


def test_a_token_made_in_the_admin_acts_as_its_user_in_the_api(client: Client) -> None:
    root = User.objects.create_superuser("root")
    robot = User.objects.create_user("robot", is_staff=True)
    client.force_login(root)

    made = client.post(reverse("admin:django_iq_apitoken_add"), {"name": "ci", "user": robot.pk})
    assert made.status_code == 302, made.content[:500]
    row = ApiToken.objects.get()
    assert row.user == robot and row._state.db == "queue"

    _, token = ApiToken.objects.issue(robot, "script")
    robot.user_permissions.add(*Permission.objects.filter(content_type__app_label="django_iq"))
    answer = Client().get("/iq/api/queues/", headers={"Authorization": f"Bearer {token}"})
    assert answer.status_code == 200, answer.content[:500]

    robot.delete()  # in the application's database: its tokens, in the queue's, are revoked
    assert ApiToken.objects.filter(revoked_at__isnull=True).count() == 0
