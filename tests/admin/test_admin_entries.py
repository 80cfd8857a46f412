"""The Entry admin: a query count and a count cost that do not grow with the table, filters on
stored and inferred states, exact group-key search, and what each action reports and logs."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.admin.models import ADDITION, CHANGE, DELETION
from django.contrib.messages import get_messages
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_iq.admin import EstimatedCountPaginator
from django_iq.models import DisabledJob, Entry
from tests.admin.conftest import (
    change_url,
    changelist_url,
    column,
    listed_ids,
    log_entries,
    login_superuser,
    messages_of,
    run_action,
)
from tests.conftest import iq_settings_with
from tests.factories import DisabledJobFactory, EntryFactory, GroupLockFactory, QueueFactory

pytestmark = pytest.mark.django_db

RECORD = "tests.testapp.jobs.record"
NOOP = "tests.testapp.jobs.noop"


def changelist_queries(client: Client, query: str = "") -> list[str]:
    with CaptureQueriesContext(connection) as captured:
        response = client.get(changelist_url(Entry) + query)
    assert response.status_code == 200
    return [q["sql"] for q in captured.captured_queries]


# -- cost on a large table ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "query", ["", "?state=computing", "?state=awaiting_compute", f"?job={RECORD}&q=g1"]
)
def test_entry_changelist_query_count_does_not_grow_with_the_table(
    client: Client, query: str
) -> None:
    login_superuser(client)
    EntryFactory(group_key="g1", locked=True)
    EntryFactory.create_batch(4, group_key="g1")
    small = changelist_queries(client, query)

    EntryFactory.create_batch(100, group_key="g1")
    EntryFactory.create_batch(100, locked=True)
    EntryFactory.create_batch(95)
    large = changelist_queries(client, query)

    assert len(large) == len(small), "a query per listed row: check list_display for relations"


def test_entry_changelist_counts_at_most_the_cap(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(EstimatedCountPaginator, "count_cap", 10)
    EntryFactory.create_batch(25)
    login_superuser(client)

    queries = changelist_queries(client, "?state=pending")
    response = client.get(changelist_url(Entry) + "?state=pending")

    counts = [sql for sql in queries if "COUNT(" in sql.upper() and "django_iq_entry" in sql]
    assert counts and all("LIMIT 11" in sql for sql in counts), counts
    assert response.context["cl"].result_count == 11
    assert "more than 10 entries" in " ".join(response.content.decode().split())


def test_entry_changelist_counts_exactly_below_the_cap(client: Client) -> None:
    EntryFactory.create_batch(3)
    login_superuser(client)

    response = client.get(changelist_url(Entry))

    assert response.context["cl"].result_count == 3
    assert "3 entries" in " ".join(response.content.decode().split())


@pytest.mark.postgresql
def test_unfiltered_changelist_reads_the_planner_estimate_on_postgresql(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(EstimatedCountPaginator, "count_cap", 10)
    EntryFactory.create_batch(25)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE django_iq_entry")
    login_superuser(client)

    queries = changelist_queries(client)
    response = client.get(changelist_url(Entry))

    assert not [sql for sql in queries if "COUNT(" in sql.upper()], "counted despite an estimate"
    assert response.context["cl"].paginator.is_estimate
    assert "about 25 entries" in " ".join(response.content.decode().split())


@pytest.mark.postgresql
def test_filtered_changelist_counts_with_a_cap_even_with_an_estimate(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(EstimatedCountPaginator, "count_cap", 10)
    EntryFactory.create_batch(25)
    EntryFactory.create_batch(2, deferred=True)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE django_iq_entry")
    login_superuser(client)

    response = client.get(changelist_url(Entry) + "?state=initial")

    assert response.context["cl"].result_count == 2
    assert not response.context["cl"].paginator.is_estimate


def test_entry_changelist_never_offers_facet_counts(client: Client) -> None:
    EntryFactory()
    login_superuser(client)

    response = client.get(changelist_url(Entry) + "?_facets=1")

    assert response.context["cl"].add_facets is False


# -- filters and search ------------------------------------------------------------------------


@pytest.fixture
def entries_in_every_state() -> dict[str, Any]:
    return {
        "initial": EntryFactory(deferred=True),
        "disabled": EntryFactory(disabled=True),
        "computing": EntryFactory(running=True),
        "awaiting_compute": EntryFactory(),
    }


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        ("initial", ["initial"]),
        ("pending", ["computing", "awaiting_compute"]),
        ("computing", ["computing"]),
        ("running", ["computing"]),
        ("awaiting_compute", ["awaiting_compute"]),
        ("disabled", ["disabled"]),
    ],
)
@iq_settings_with(WORKER_SILENT_AFTER_SECONDS=600)  # the factory's worker sends no heartbeat
def test_state_filter_selects_stored_and_inferred_states(
    client: Client, entries_in_every_state: dict[str, Any], state: str, expected: list[str]
) -> None:
    login_superuser(client)

    response = client.get(changelist_url(Entry) + f"?state={state}")

    assert sorted(listed_ids(response)) == sorted(entries_in_every_state[n].pk for n in expected)


@iq_settings_with(WORKER_SILENT_AFTER_SECONDS=600)  # the factory's worker sends no heartbeat
def test_state_column_shows_the_inferred_state_of_pending_entries(
    client: Client, entries_in_every_state: dict[str, Any]
) -> None:
    login_superuser(client)

    response = client.get(changelist_url(Entry))

    assert sorted(column(response, "status")) == [
        "awaiting compute",
        "computing (running)",
        "disabled",
        "initial",
    ]


def test_queue_and_job_filters_select_their_entries(client: Client) -> None:
    emails = QueueFactory(name="emails")
    wanted = EntryFactory(queue=emails, job_name=NOOP)
    EntryFactory(queue=emails, job_name=RECORD)
    EntryFactory(job_name=NOOP)
    login_superuser(client)

    response = client.get(changelist_url(Entry) + f"?queue__name__exact=emails&job={NOOP}")

    assert listed_ids(response) == [wanted.pk]


def test_job_filter_lists_registered_and_disabled_jobs_without_reading_entries(
    client: Client,
) -> None:
    DisabledJobFactory(job_name="gone.module.job")
    login_superuser(client)

    response = client.get(changelist_url(Entry))

    (job_filter,) = [f for f in response.context["cl"].filter_specs if f.title == "job"]
    choices = [value for value, _ in job_filter.lookup_choices]
    assert {RECORD, NOOP, "gone.module.job"} <= set(choices)


def test_search_matches_a_group_key_exactly(client: Client) -> None:
    grouped = [EntryFactory(group_key="customer-7"), EntryFactory(group_key="customer-7")]
    EntryFactory(group_key="customer-70")
    EntryFactory()
    login_superuser(client)

    exact = client.get(changelist_url(Entry) + "?q=customer-7")
    partial = client.get(changelist_url(Entry) + "?q=customer")

    assert sorted(listed_ids(exact)) == sorted(e.pk for e in grouped)
    assert listed_ids(partial) == []


def test_search_matches_an_entry_id(client: Client) -> None:
    wanted = EntryFactory()
    EntryFactory()
    login_superuser(client)

    response = client.get(changelist_url(Entry) + f"?q={wanted.pk}")

    assert listed_ids(response) == [wanted.pk]


def test_group_key_column_links_to_the_whole_group(client: Client) -> None:
    EntryFactory(group_key="customer-7")
    login_superuser(client)

    response = client.get(changelist_url(Entry))

    assert f'href="{changelist_url(Entry)}?q=customer-7"' in response.content.decode()


def test_change_page_shows_who_holds_the_group_lock(client: Client) -> None:
    entry = EntryFactory()
    lock = GroupLockFactory(entry_for_key=entry, track_entry=True)
    login_superuser(client)

    response = client.get(change_url(entry))

    assert f"held by {lock.worker.name} since" in response.content.decode()
    assert "computing" in response.content.decode()


def test_change_page_shows_the_last_progress_reported_and_how_long_ago(client: Client) -> None:
    entry = EntryFactory()
    lock = GroupLockFactory(entry_for_key=entry, track_entry=True)
    Entry.objects.report_progress(
        entry.pk,
        lock.pk,
        done=40,
        total=100,
        note="rows",
        reported_at=timezone.now() - timedelta(seconds=3),
    )
    login_superuser(client)

    html = client.get(change_url(entry)).content.decode()

    assert re.search(r"40 of 100 \(40%\) — rows, reported 3(\.\d)? s ago", html), html


def test_change_page_says_when_no_progress_was_reported(client: Client) -> None:
    entry = EntryFactory()
    login_superuser(client)

    assert "none reported" in client.get(change_url(entry)).content.decode()


# -- actions: what they report and log ---------------------------------------------------------


def test_disable_job_disables_every_entry_of_the_selected_entries_jobs(client: Client) -> None:
    selected = EntryFactory(job_name=RECORD)
    sibling = EntryFactory(job_name=RECORD, deferred=True)
    other = EntryFactory(job_name=NOOP)
    login_superuser(client)

    response = run_action(client, Entry, "disable_jobs", [selected])

    states = dict(Entry.objects.values_list("pk", "state"))
    assert (states[selected.pk], states[sibling.pk], states[other.pk]) == (
        "disabled",
        "disabled",
        "pending",
    )
    assert messages_of(response) == [f"Disabled 1 job: {RECORD} (2 entries)."]
    (log,) = log_entries()
    assert (log.action_flag, log.object_repr, log.change_message) == (
        ADDITION,
        f"{RECORD} (disabled)",
        "Disabled the job (2 entries).",
    )


def test_enable_job_enables_entries_and_says_which_jobs_were_not_disabled(
    client: Client,
) -> None:
    DisabledJobFactory(job_name=RECORD)
    disabled = EntryFactory(job_name=RECORD, disabled=True)
    running = EntryFactory(job_name=NOOP)
    login_superuser(client)

    response = run_action(client, Entry, "enable_jobs", [disabled, running])

    disabled.refresh_from_db()
    assert disabled.state == "pending"
    assert not DisabledJob.objects.exists()
    assert messages_of(response) == [
        f"Enabled 1 job: {RECORD} (1 entry). Skipped 1, not disabled: {NOOP}."
    ]
    assert [(e.action_flag, e.change_message) for e in log_entries()] == [
        (DELETION, "Enabled the job (1 entry).")
    ]


def test_run_now_makes_deferred_entries_pending_and_reports_the_others(client: Client) -> None:
    deferred = EntryFactory(deferred=True)
    ready = EntryFactory()
    login_superuser(client)

    response = run_action(client, Entry, "run_now", [deferred, ready])

    deferred.refresh_from_db()
    assert deferred.state == "pending"
    assert messages_of(response) == [
        f"Made pending now 1 entry: {deferred.pk}. "
        f"Skipped 1, not deferred (only initial entries can run now): {ready.pk}."
    ]
    assert [(e.action_flag, e.object_id) for e in log_entries()] == [(CHANGE, str(deferred.pk))]


def test_cancel_requests_the_cancel_of_entries_a_worker_runs_and_says_so(client: Client) -> None:
    free = EntryFactory()
    running = EntryFactory(locked=True)
    login_superuser(client)

    response = run_action(client, Entry, "cancel_entries", [free, running])

    assert list(Entry.objects.values_list("pk", flat=True)) == [running.pk]
    assert Entry.objects.get(pk=running.pk).cancel_requested_at is not None
    (message,) = get_messages(response.wsgi_request)
    assert str(message) == (
        f"Cancelled 1 entry: {free.pk}. Cancel requested for 1 entry being run (the worker "
        f"stops them): {running.pk}."
    )
    assert sorted((e.action_flag, e.object_id) for e in log_entries()) == sorted(
        [(DELETION, str(free.pk)), (CHANGE, str(running.pk))]
    )


def test_entries_cannot_be_deleted_around_the_cancel_action(client: Client) -> None:
    entry = EntryFactory(locked=True)
    login_superuser(client)

    page = client.get(changelist_url(Entry))
    delete = client.post(change_url(entry) + "delete/", {"post": "yes"})

    assert "delete_selected" not in dict(page.context["action_form"].fields["action"].choices)
    assert delete.status_code == 403
    assert Entry.objects.filter(pk=entry.pk).exists()


# The factory's worker sends no heartbeat: keep it live for the length of the test.
@iq_settings_with(WORKER_SILENT_AFTER_SECONDS=600)
def test_entries_waiting_behind_their_groups_running_entry_are_computing_not_running(
    client: Client,
) -> None:
    """Computing means one thing on every surface: the group's lock is held by a live worker.
    Of a group's computing entries, the one its worker runs is also ``running``."""
    running = EntryFactory(group_key="invoices-42", running=True)
    behind = [EntryFactory(group_key="invoices-42", lock_key=running.lock_key) for _ in range(2)]
    free = EntryFactory()
    login_superuser(client)

    page = client.get(changelist_url(Entry) + "?q=invoices-42")
    computing = client.get(changelist_url(Entry) + "?state=computing")
    running_now = client.get(changelist_url(Entry) + "?state=running")
    awaiting = client.get(changelist_url(Entry) + "?state=awaiting_compute")

    states = dict(zip(listed_ids(page), column(page, "status"), strict=True))
    assert states == {
        running.pk: "computing (running)",
        behind[0].pk: "computing",
        behind[1].pk: "computing",
    }
    assert sorted(listed_ids(computing)) == sorted([running.pk, *(e.pk for e in behind)])
    assert listed_ids(running_now) == [running.pk]
    assert listed_ids(awaiting) == [free.pk]
