"""The dashboard's headline, leader panel, running entries and worker flags: red where
something is wrong, with who leads and what runs where since when."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from django_iq.dashboard.panels import RUNNING_LIMIT
from django_iq.dashboard.views import dashboard_data
from django_iq.models import Entry, GroupLock, LeaderLease, Worker
from tests.conftest import iq_settings_with
from tests.factories import EntryFactory, WorkerFactory

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _workers_stay_live() -> Iterator[None]:
    # Factory workers send no heartbeats: keep them live for the length of a test.
    with iq_settings_with(WORKER_SILENT_AFTER_SECONDS=600):
        yield


def page(client: Client) -> str:
    return client.get(reverse("admin:django_iq_dashboard")).content.decode()


def text_of(html: str, element_id: str) -> str:
    found = re.search(rf'id="{element_id}"[^>]*>(?:<a [^>]*>)?([^<]*)<', html)
    assert found, f"no #{element_id} on the page"
    return found.group(1)


def elect(name: str = "leader-host:77") -> None:
    WorkerFactory(name=name, role=Worker.Role.LEADER, host="leader-host", pid=77)
    assert LeaderLease.objects.acquire(name, 30) is not None


def test_with_a_leader_and_a_live_worker_the_headline_says_healthy(admin_client: Client) -> None:
    elect()
    WorkerFactory()

    html = page(admin_client)

    assert text_of(html, "iq-status") == "healthy"
    assert 'id="iq-leader-live" data-leader="live"' in html
    assert text_of(html, "iq-leader-live") == "leader-host"
    assert 'id="iq-alarms"' not in html


def test_the_leader_panel_names_the_holder_its_host_pid_and_how_long_it_has_led() -> None:
    elect()

    leader = dashboard_data(timezone.now() + timedelta(seconds=5)).leader

    assert leader is not None
    assert (leader.holder, leader.host, leader.pid, leader.epoch, leader.is_live) == (
        "leader-host:77",
        "leader-host",
        77,
        1,
        True,
    )
    assert leader.held_seconds is not None and 4 <= leader.held_seconds < 60
    assert 0 < leader.expires_in_seconds <= 30


def test_no_leader_is_red_and_counted_as_a_problem(admin_client: Client) -> None:
    WorkerFactory()

    html = page(admin_client)

    assert text_of(html, "iq-status") == "1 problem"
    assert 'id="iq-leader-live" data-leader="missing"' in html
    assert 'class="iq-broken" id="iq-leader-live"' in html
    assert 'data-alarm-reason="no_leader"' in html


def test_a_leader_whose_lease_expired_shows_as_missing_with_the_lapsed_holder() -> None:
    elect()
    WorkerFactory()

    data = dashboard_data(timezone.now() + timedelta(seconds=45))

    assert data.leader is not None
    assert (data.leader.holder, data.leader.is_live) == ("leader-host:77", False)
    assert data.leader.expires_in_seconds < 0
    assert [p.reason for p in data.problems] == ["no_leader"]


def test_only_stopped_workers_means_no_live_worker_in_the_headline(admin_client: Client) -> None:
    elect()
    Worker.objects.stop(WorkerFactory())

    html = page(admin_client)

    assert text_of(html, "iq-status") == "1 problem"
    assert 'data-alarm-reason="no_live_worker" data-alarm-queue=""' in html


def test_only_a_live_worker_is_flagged_throttled(admin_client: Client) -> None:
    WorkerFactory(name="live-throttled", is_throttled=True)
    WorkerFactory(
        name="dead-throttled",
        is_throttled=True,
        heartbeat_at=timezone.now() - timedelta(minutes=10),
    )
    Worker.objects.stop(WorkerFactory(name="stopped-throttled", is_throttled=True))

    html = page(admin_client)

    assert text_of(html, "iq-throttled") == "1"
    dead = re.search(r'<tr data-worker="dead-throttled">.*?</tr>', html, re.S)
    live = re.search(r'<tr data-worker="live-throttled">.*?</tr>', html, re.S)
    assert dead is not None and live is not None
    assert 'data-throttled="no">\u2013<' in dead.group(0)
    assert 'data-throttled="yes"><span class="iq-broken">throttled</span>' in live.group(0)
    # A stopped process is counted under the table, not listed.
    assert 'data-worker="stopped-throttled"' not in html


def test_running_entries_show_since_when_and_where_and_not_their_groups_waiting_entries(
    admin_client: Client,
) -> None:
    worker = WorkerFactory(name="web-3:901", host="web-3", pid=901)
    running = EntryFactory(group_key="invoices-9", running=True, lock__worker=worker)
    waiting = EntryFactory(group_key="invoices-9", lock_key=running.lock_key)

    data = dashboard_data(timezone.now())
    html = page(admin_client)

    (shown,) = data.running
    assert (shown.entry_id, shown.job_name, shown.worker, shown.host, shown.pid) == (
        running.pk,
        running.job_name,
        "web-3:901",
        "web-3",
        901,
    )
    assert f'data-running-entry="{running.pk}"' in html
    assert f'data-running-entry="{waiting.pk}"' not in html
    assert f'href="{reverse("admin:django_iq_entry_change", args=[running.pk])}"' in html
    # Computing counts the group's lock, running the entry its worker runs.
    assert (data.totals["computing"], data.totals["running"]) == (2, 1)
    assert data.totals["awaiting_compute"] == 0


def test_running_entries_show_their_last_progress_report(admin_client: Client) -> None:
    reporting = EntryFactory(running=True)
    silent = EntryFactory(running=True)
    lock = GroupLock.objects.get(key=reporting.lock_key)
    Entry.objects.report_progress(
        reporting.pk, lock.pk, done=2, total=5, note="pages", reported_at=timezone.now()
    )

    html = page(admin_client)

    shown = {run.entry_id: run.progress for run in dashboard_data(timezone.now()).running}
    assert shown[silent.pk] == ""
    assert re.match(r"2 of 5 \(40%\) — pages, reported .* ago$", shown[reporting.pk])
    row = re.search(rf'<tr data-running-entry="{reporting.pk}">.*?</tr>', html, re.S)
    assert row is not None and "2 of 5 (40%) — pages, reported" in row.group(0)


def test_the_running_list_is_bounded_and_links_to_all_of_them(admin_client: Client) -> None:
    for _ in range(RUNNING_LIMIT + 3):
        EntryFactory(running=True)

    html = page(admin_client)

    assert html.count("data-running-entry=") == RUNNING_LIMIT
    assert f"The {RUNNING_LIMIT} longest running of {RUNNING_LIMIT + 3}" in html
    all_running = reverse("admin:django_iq_entry_changelist") + "?state=running"
    assert f'<a href="{all_running}" class="iq-count">all running entries</a>' in html
