"""Compaction for operators: ``iq_compact``, ``operations.compact`` and its audit record, and the
count of merged entries wherever queue statistics are shown."""

from __future__ import annotations

import io
import json

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse

from django_iq import operations
from django_iq.models import Entry, OperatorAction
from tests.factories import QueueFactory
from tests.ops.test_dashboard import cells
from tests.ops.test_prometheus import samples, value
from tests.testapp.jobs import invalidate, unfoldable

pytestmark = pytest.mark.django_db


def run(*args: str) -> str:
    out = io.StringIO()
    call_command("iq_compact", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def two_groups() -> None:
    """Three entries of group o1 in the default queue, two of o1 in emails."""
    for n in range(3):
        invalidate.enqueue("o1", [n])
    QueueFactory(name="emails")
    invalidate.using(queue="emails").enqueue("o1", [7])
    invalidate.using(queue="emails").enqueue("o1", [8])


def test_iq_compact_prints_what_it_merged_and_writes_an_audit_record() -> None:
    two_groups()

    output = run("--queue", "default")

    (merged,) = Entry.objects.filter(queue_id="default")
    assert output == (
        "Compacted 1 group (2 entries merged away): "
        f"{invalidate.name} default 'o1' (3 entries into entry {merged.pk}).\n"
    )
    assert Entry.objects.filter(queue_id="emails").count() == 2
    (audit,) = OperatorAction.objects.all()
    assert (audit.door, audit.action, audit.target, audit.done) == (
        "command",
        "compact",
        "queues default",
        1,
    )
    assert audit.actor.endswith("(iq_compact)")


def test_iq_compact_without_options_compacts_every_queue_and_job() -> None:
    two_groups()
    output = run()
    assert output.startswith("Compacted 2 groups (3 entries merged away): ")
    assert Entry.objects.count() == 2
    assert OperatorAction.objects.get().target == "all queues"


def test_iq_compact_reports_a_group_whose_fold_failed() -> None:
    unfoldable.enqueue("o1", [1])
    unfoldable.enqueue("o1", [2])
    output = run("--job", unfoldable.name)
    assert output == (
        "Compacted 0 groups (0 entries merged away). Skipped 1, merge raised ValueError: "
        f"cannot fold these: {unfoldable.name} default 'o1'.\n"
    )
    assert Entry.objects.count() == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--queue", "nope"], "Unknown queue: 'nope'"),
        (["--job", "tests.testapp.jobs.record"], "has no merge function"),
        (["--job", "tests.testapp.jobs.nope"], "is not a registered job"),
    ],
)
def test_iq_compact_refuses_unknown_queues_and_jobs_without_merge(
    args: list[str], message: str
) -> None:
    invalidate.enqueue("o1", [1])
    invalidate.enqueue("o1", [2])
    with pytest.raises(CommandError, match=message):
        run(*args)
    assert Entry.objects.count() == 2
    assert not OperatorAction.objects.exists()


def test_operations_compact_reports_queues_that_do_not_exist() -> None:
    outcome = operations.compact(operations.Actor("api", "ops"), queues=["default", "nope"])
    assert outcome.not_found == ["nope"]
    assert OperatorAction.objects.get().not_found == 1


def test_merged_counts_are_shown_by_prometheus_the_api_iq_status_and_the_dashboard(
    client: Client,
) -> None:
    two_groups()
    run()
    staff = User.objects.create_user("ops", is_staff=True)
    staff.user_permissions.add(
        *Permission.objects.filter(
            content_type__app_label="django_iq", codename__in=("view_queue", "view_worker")
        )
    )
    client.force_login(staff)

    metrics = samples(client.get("/iq/metrics/").content.decode())
    assert value(metrics, "django_iq_entries_merged_total", queue="default") == 2
    assert value(metrics, "django_iq_entries_merged_total", queue="emails") == 1

    api = client.get("/iq/api/queues/").json()
    assert {q["name"]: q["merged"] for q in api["queues"]} == {"default": 2, "emails": 1}

    status = json.loads(io_status("--json"))
    assert {q["name"]: q["merged"] for q in status["queues"]} == {"default": 2, "emails": 1}
    assert status["merged"] == 3

    page = client.get(reverse("admin:django_iq_dashboard"))
    assert page.status_code == 200, page
    rows = cells(page.content.decode())
    assert (rows["default"]["merged=2"], rows["emails"]["merged=1"]) == ("2", "1")


def io_status(*args: str) -> str:
    out = io.StringIO()
    call_command("iq_status", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()
