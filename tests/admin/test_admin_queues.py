"""The Queue admin: counts per state read once per page, oldest waiting entry, pause and resume,
and edits of weight and concurrency through the manager."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import timedelta
from html import unescape
from unittest import mock

import pytest
from django.contrib.admin.models import ADDITION, CHANGE
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_iq.managers import QueueManager
from django_iq.models import Entry, OperatorAction, Queue
from tests.admin.conftest import (
    change_url,
    changelist_url,
    column,
    log_entries,
    login_superuser,
    messages_of,
    run_action,
)
from tests.conftest import iq_settings_with
from tests.factories import EntryErrorFactory, EntryFactory, QueueFactory
from tests.testapp.jobs import invalidate

pytestmark = pytest.mark.django_db

COUNT_COLUMNS = [
    "initial_count",
    "pending_count",
    "disabled_count",
    "computing_count",
    "awaiting_compute_count",
    "failed_count",
]


@pytest.fixture(autouse=True)
def _workers_stay_live() -> Iterator[None]:
    # Factory workers send no heartbeats: keep them live for the length of a test.
    with iq_settings_with(WORKER_SILENT_AFTER_SECONDS=600):
        yield


def fill_default_queue() -> None:
    EntryFactory.create_batch(2, deferred=True)
    EntryFactory(running=True)
    EntryFactory.create_batch(3)
    EntryFactory(disabled=True)
    EntryErrorFactory.create_batch(2)
    EntryErrorFactory(is_final=False)
    EntryErrorFactory(requeued_at=timezone.now())


def test_queue_list_shows_counts_per_state_from_one_stats_call(client: Client) -> None:
    fill_default_queue()
    QueueFactory(name="emails")
    login_superuser(client)

    with mock.patch.object(
        QueueManager, "stats", autospec=True, side_effect=QueueManager.stats
    ) as stats:
        response = client.get(changelist_url(Queue))

    assert stats.call_count == 1
    assert column(response, "queue_name") == ["default", "emails"]
    rows = list(zip(*(column(response, name) for name in COUNT_COLUMNS), strict=True))
    assert rows == [("2", "4", "1", "1", "3", "2"), ("0", "0", "0", "0", "0", "0")]


def test_counts_link_to_the_matching_entries_and_failures(client: Client) -> None:
    fill_default_queue()
    login_superuser(client)

    page = client.get(changelist_url(Queue)).content.decode()

    assert "/admin/django_iq/entry/?queue__name__exact=default&amp;state=computing" in page
    assert (
        "/admin/django_iq/entryerror/?queue__name__exact=default&amp;is_final__exact=1"
        "&amp;requeued=no" in page
    )


def test_each_count_links_to_a_list_of_as_many_entries_as_it_counts(
    client: Client,
) -> None:
    fill_default_queue()
    running = EntryFactory(group_key="orders-3", running=True)
    EntryFactory.create_batch(2, group_key="orders-3", lock_key=running.lock_key)
    login_superuser(client)

    page = client.get(changelist_url(Queue)).content.decode()
    links = re.findall(r'<a href="(/admin/django_iq/entry/\?[^"]+)">(\d+)</a>', page)

    listed = {
        unescape(url).rsplit("state=", 1)[1]: (int(count), client.get(unescape(url)))
        for url, count in links
    }
    assert {state: count for state, (count, _) in listed.items()} == {
        "initial": 2,
        "pending": 7,
        "disabled": 1,
        "computing": 4,
        "awaiting_compute": 3,
    }
    for count, response in listed.values():
        assert response.context["cl"].queryset.count() == count


def test_linked_failures_are_the_failed_count(client: Client) -> None:
    fill_default_queue()
    login_superuser(client)

    response = client.get(
        changelist_url(Queue).replace("queue", "entryerror")
        + "?queue__name__exact=default&is_final__exact=1&requeued=no"
    )

    assert len(response.context["cl"].result_list) == 2


def test_oldest_waiting_shows_how_long_the_oldest_ready_entry_has_waited(client: Client) -> None:
    EntryFactory(enqueued_at=timezone.now() - timedelta(minutes=5, seconds=3))
    EntryFactory(enqueued_at=timezone.now() - timedelta(hours=2), locked=True)
    QueueFactory(name="emails")
    login_superuser(client)

    response = client.get(changelist_url(Queue))

    assert column(response, "oldest_waiting") == ["5 minutes", "-"]


def test_queue_list_query_count_does_not_grow_with_queues_or_entries(client: Client) -> None:
    login_superuser(client)
    fill_default_queue()
    with CaptureQueriesContext(connection) as small:
        client.get(changelist_url(Queue))

    for index in range(6):
        queue = QueueFactory(name=f"extra-{index}")
        EntryFactory.create_batch(3, queue=queue)
        EntryErrorFactory(queue=queue)
    with CaptureQueriesContext(connection) as large:
        client.get(changelist_url(Queue))

    assert len(large.captured_queries) == len(small.captured_queries)


def test_the_list_says_paused_only_of_a_paused_queue_and_shows_no_cross_for_a_running_one(
    client: Client,
) -> None:
    QueueFactory(name="default")
    QueueFactory(name="emails", is_paused=True)
    login_superuser(client)

    response = client.get(changelist_url(Queue) + "?o=2.1")

    assert column(response, "queue_name") == ["emails", "default"], "paused ones first"
    assert column(response, "paused") == ["paused", "-"]
    assert "icon-no.svg" not in response.content.decode()


def test_pause_reports_queues_already_paused_and_logs_only_the_changed(client: Client) -> None:
    running = QueueFactory(name="default")
    paused = QueueFactory(name="emails", is_paused=True)
    login_superuser(client)

    response = run_action(client, Queue, "pause_queues", [running, paused])

    assert list(Queue.objects.values_list("name", "is_paused")) == [
        ("default", True),
        ("emails", True),
    ]
    assert messages_of(response) == ["Paused 1 queue: default. Skipped 1, already paused: emails."]
    assert [(e.object_repr, e.change_message) for e in log_entries(CHANGE)] == [
        ("default", "Paused the queue.")
    ]
    (audit,) = OperatorAction.objects.all()
    assert (audit.door, audit.actor, audit.action, audit.done, audit.skipped) == (
        "admin",
        "root",
        "pause",
        1,
        1,
    )
    assert audit.message == messages_of(response)[0]


def test_resume_serves_paused_queues_again(client: Client) -> None:
    paused = QueueFactory(name="emails", is_paused=True)
    login_superuser(client)

    response = run_action(client, Queue, "resume_queues", [paused])

    paused.refresh_from_db()
    assert paused.is_paused is False
    assert messages_of(response) == ["Resumed 1 queue: emails."]


def edit_form(queue: Queue, **changes: object) -> dict[str, object]:
    data: dict[str, object] = {
        "name": queue.name,
        "weight": queue.weight,
        "max_concurrency": queue.max_concurrency or "",
    }
    data.update(changes)
    return data


def test_weight_and_concurrency_are_edited_through_the_manager_and_nothing_else(
    client: Client,
) -> None:
    queue = QueueFactory(name="default")
    login_superuser(client)

    with mock.patch.object(
        QueueManager, "configure", autospec=True, side_effect=QueueManager.configure
    ) as configure:
        response = client.post(
            change_url(queue),
            edit_form(queue, weight=5, max_concurrency=2, name="renamed", is_paused="on"),
        )

    queue.refresh_from_db()
    assert response.status_code == 302
    assert (queue.name, queue.weight, queue.max_concurrency, queue.is_paused) == (
        "default",
        5,
        2,
        False,
    )
    configure.assert_called_once_with(mock.ANY, "default", weight=5, max_concurrency=2)
    (log,) = log_entries(CHANGE)
    assert "weight" in log.get_change_message().lower()


def test_a_weight_below_one_is_refused_with_a_form_error(client: Client) -> None:
    queue = QueueFactory(name="default", weight=3)
    login_superuser(client)

    response = client.post(change_url(queue), edit_form(queue, weight=0))

    queue.refresh_from_db()
    assert response.status_code == 200
    assert response.context["adminform"].form.errors["weight"] == [
        "Ensure this value is greater than or equal to 1."
    ]
    assert queue.weight == 3


def test_weight_is_editable_in_the_list(client: Client) -> None:
    queue = QueueFactory(name="default")
    login_superuser(client)

    response = client.post(
        changelist_url(Queue),
        {
            "form-TOTAL_FORMS": "1",
            "form-INITIAL_FORMS": "1",
            "form-0-id": queue.pk,
            "form-0-weight": "4",
            "form-0-max_concurrency": "",
            "_save": "Save",
        },
    )

    queue.refresh_from_db()
    assert response.status_code == 302
    assert queue.weight == 4
    assert [e.action_flag for e in log_entries()] == [CHANGE]


def test_a_queue_can_be_added_with_its_name(client: Client) -> None:
    login_superuser(client)

    response = client.post(
        "/admin/django_iq/queue/add/", {"name": "reports-2", "weight": 2, "max_concurrency": ""}
    )

    assert response.status_code == 302
    assert Queue.objects.filter(name="reports-2", weight=2, is_paused=False).exists()
    assert [e.action_flag for e in log_entries()] == [ADDITION]


def test_queues_cannot_be_deleted_from_the_admin(client: Client) -> None:
    queue = QueueFactory(name="default")
    login_superuser(client)

    response = client.post(change_url(queue) + "delete/", {"post": "yes"})

    assert response.status_code == 403
    assert Queue.objects.filter(pk=queue.pk).exists()


def test_compact_merges_the_selected_queues_and_shows_the_merged_count(client: Client) -> None:
    for n in range(3):
        invalidate.enqueue("o1", [n])
    invalidate.using(queue="emails").enqueue("o1", [7])
    invalidate.using(queue="emails").enqueue("o1", [8])
    login_superuser(client)

    response = run_action(client, Queue, "compact_queues", [Queue.objects.get(name="default")])

    (merged,) = Entry.objects.filter(queue_id="default")
    assert messages_of(response) == [
        "Compacted 1 group (2 entries merged away): "
        f"{invalidate.name} default 'o1' (3 entries into entry {merged.pk})."
    ]
    assert Entry.objects.filter(queue_id="emails").count() == 2, "only the selected queues"
    (audit,) = OperatorAction.objects.all()
    assert (audit.door, audit.action, audit.target, audit.done) == (
        "admin",
        "compact",
        "queues default",
        1,
    )
    assert [e.object_repr for e in log_entries(CHANGE)] == ["default"]
    # Off the list (the dashboard shows it too), on each queue's page.
    page = client.get(change_url(Queue.objects.get(name="default"))).content.decode()
    assert re.search(r'<div class="readonly">2</div>', page), "merged: 2"
