"""The EntryError admin: failures shown readably and escaped, filters, requeue one by one or all
alike, and Django's own delete."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import CHANGE, DELETION
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from django_iq.admin.common import CELL_MAX_CHARS
from django_iq.models import Entry, EntryError, OperatorAction
from tests.admin.conftest import (
    change_url,
    changelist_url,
    column,
    listed_ids,
    log_entries,
    login,
    login_superuser,
    messages_of,
    run_action,
)
from tests.factories import EntryErrorFactory, QueueFactory

pytestmark = pytest.mark.django_db

RECORD = "tests.testapp.jobs.record"
NOOP = "tests.testapp.jobs.noop"


def test_traceback_is_shown_escaped_in_a_pre_block(client: Client) -> None:
    error = EntryErrorFactory(
        traceback='Traceback (most recent call last):\n  File "<script>alert(1)</script>"\n'
        "ValueError: a < b & c\n",
        message="<b>not bold</b>",
    )
    login(client, "view_entryerror")

    page = client.get(change_url(error)).content.decode()

    assert (
        '<pre style="white-space: pre-wrap">Traceback (most recent call last):\n'
        "  File &quot;&lt;script&gt;alert(1)&lt;/script&gt;&quot;\n"
        "ValueError: a &lt; b &amp; c\n</pre>"
    ) in page
    assert "&lt;b&gt;not bold&lt;/b&gt;" in page
    assert "<script>alert(1)</script>" not in page
    assert "<b>not bold</b>" not in page


def test_list_shows_exception_class_attempt_and_first_line_of_the_message(client: Client) -> None:
    EntryErrorFactory(
        exception_class="myapp.errors.PaymentDeclined",
        message="card refused\nsecond line",
        attempt=2,
        max_attempts=3,
    )
    login_superuser(client)

    response = client.get(changelist_url(EntryError))

    # The class's name and the message's first line, in the width the other columns leave; the
    # dotted path and the whole message in their titles.
    assert column(response, "error") == ["PaymentDeclined: card refused"]
    assert 'title="myapp.errors.PaymentDeclined"' in response.content.decode()
    assert 'title="card refused\nsecond line"' in response.content.decode()
    assert column(response, "attempt_display") == ["2 of 3"]


def test_a_long_message_is_clipped_in_the_list_and_whole_on_its_page(client: Client) -> None:
    message = "declined " + "x" * 20_000
    error = EntryErrorFactory(message=message)
    login_superuser(client)

    listed = client.get(changelist_url(EntryError)).content.decode()
    page = client.get(change_url(error)).content.decode()

    clipped = message[:CELL_MAX_CHARS] + "…"
    assert f'title="{clipped}"' in listed
    assert "x" * (CELL_MAX_CHARS + 1) not in listed
    assert message in page


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("queue__name__exact=emails", ["emails"]),
        (f"job_name={NOOP}", ["noop"]),
        ("exception_class=builtins.KeyError", ["key"]),
        ("is_final__exact=0", ["retrying"]),
        ("requeued=yes", ["requeued"]),
        ("is_final__exact=1&requeued=no", ["plain", "emails", "noop", "key"]),
    ],
)
def test_filters_select_errors_by_queue_job_exception_and_outcome(
    client: Client, query: str, expected: list[str]
) -> None:
    errors = {
        "plain": EntryErrorFactory(),
        "emails": EntryErrorFactory(queue=QueueFactory(name="emails")),
        "noop": EntryErrorFactory(job_name=NOOP),
        "key": EntryErrorFactory(exception_class="builtins.KeyError"),
        "retrying": EntryErrorFactory(is_final=False),
        "requeued": EntryErrorFactory(requeued_at=timezone.now()),
    }
    login_superuser(client)

    response = client.get(f"{changelist_url(EntryError)}?{query}")

    assert sorted(listed_ids(response)) == sorted(errors[name].pk for name in expected)


def test_search_finds_every_attempt_of_an_entry(client: Client) -> None:
    attempts = [EntryErrorFactory(entry_id=42, attempt=n, is_final=n == 2) for n in (1, 2)]
    EntryErrorFactory(entry_id=43)
    login_superuser(client)

    response = client.get(changelist_url(EntryError) + "?q=42")
    nonsense = client.get(changelist_url(EntryError) + "?q=not-an-id")

    assert sorted(listed_ids(response)) == sorted(e.pk for e in attempts)
    assert nonsense.status_code == 200


def test_requeue_enqueues_final_failures_and_skips_the_others(client: Client) -> None:
    final = EntryErrorFactory(args=["again"])
    retrying = EntryErrorFactory(is_final=False)
    done = EntryErrorFactory(requeued_at=timezone.now())
    login_superuser(client)

    response = run_action(client, EntryError, "requeue_errors", [final, retrying, done])

    (entry,) = Entry.objects.all()
    assert (entry.job_name, entry.args, entry.state) == (RECORD, ["again"], "pending")
    final.refresh_from_db()
    assert final.requeued_at is not None
    assert messages_of(response) == [
        f"Requeued 1 failed entry: {final.pk}. New entries: {entry.pk}. Skipped 2, not a final "
        f"failure, or already requeued: {retrying.pk}, {done.pk}."
    ]
    assert [(e.action_flag, e.object_id) for e in log_entries()] == [(CHANGE, str(final.pk))]


def test_requeue_matching_requeues_every_failure_of_the_same_job_and_exception(
    client: Client,
) -> None:
    selected = EntryErrorFactory()
    alike = EntryErrorFactory()
    other_exception = EntryErrorFactory(exception_class="builtins.KeyError")
    other_job = EntryErrorFactory(job_name=NOOP)
    login_superuser(client)

    response = run_action(client, EntryError, "requeue_matching", [selected])

    requeued = set(
        EntryError.objects.filter(requeued_at__isnull=False).values_list("pk", flat=True)
    )
    assert requeued == {selected.pk, alike.pk}
    assert not {other_exception.pk, other_job.pk} & requeued
    assert Entry.objects.count() == 2
    said = f"Requeued 2 failed entries matching job={RECORD} exception_class=builtins.ValueError."
    assert messages_of(response) == [said]
    (log,) = log_entries()
    assert (log.object_id, log.change_message) == (str(selected.pk), said)
    (audit,) = OperatorAction.objects.all()
    assert (audit.door, audit.actor, audit.action, audit.done, audit.message) == (
        "admin",
        "root",
        "requeue",
        2,
        said,
    )


def test_delete_asks_for_confirmation_then_deletes_and_logs(client: Client) -> None:
    error = EntryErrorFactory()
    login(client, "view_entryerror", "delete_entryerror")

    confirm = run_action(client, EntryError, "delete_selected", [error])
    deleted = run_action(client, EntryError, "delete_selected", [error], post="yes")

    assert confirm.status_code == 200
    assert "Are you sure" in confirm.content.decode()
    assert deleted.status_code == 302
    assert not EntryError.objects.exists()
    assert messages_of(deleted) == ["Successfully deleted 1 entry error."]
    assert [e.action_flag for e in log_entries()] == [DELETION]


def test_deleting_one_error_from_its_page_writes_the_audit_record_and_the_admin_log(
    client: Client,
) -> None:
    error, kept = EntryErrorFactory(), EntryErrorFactory()
    login(client, "view_entryerror", "delete_entryerror")

    response = client.post(
        reverse("admin:django_iq_entryerror_delete", args=[error.pk]), {"post": "yes"}
    )

    assert response.status_code == 302
    assert list(EntryError.objects.values_list("pk", flat=True)) == [kept.pk]
    (audit,) = OperatorAction.objects.all()
    assert (audit.door, audit.action, audit.target, audit.done) == (
        "admin",
        "delete",
        f"error records {error.pk}",
        1,
    )
    assert audit.message == f"Deleted 1 error record: {error.pk}."
    assert [(e.action_flag, e.object_id) for e in log_entries()] == [(DELETION, str(error.pk))]
