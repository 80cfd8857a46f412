"""Every count on the dashboard links to the admin changelist of the rows it counts: followed
with the test client, each link lists exactly as many rows as the number it sits on."""

from __future__ import annotations

import re
from collections.abc import Iterator
from html import unescape
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from django_iq import enqueue_many
from django_iq.models import Worker
from django_iq.worker import WorkerProcess
from tests.conftest import iq_settings_with
from tests.factories import EntryErrorFactory, EntryFactory, QueueFactory, WorkerFactory
from tests.testapp.jobs import always_fails, record

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _workers_stay_live() -> Iterator[None]:
    # The factories' workers send no heartbeats: keep them live while the links are followed.
    with iq_settings_with(WORKER_SILENT_AFTER_SECONDS=600):
        yield


COUNT_LINK = re.compile(r'<a href="([^"]+)" class="iq-count">(\d+)</a>')


def history_and_waiting_work() -> None:
    """Real runs (successes, failures, a job failing for good), then entries in every state
    across two queues, a group waiting behind its running entry, and workers live, throttled
    and stopped."""
    enqueue_many(record, [((f"done-{i}",), {}) for i in range(4)])
    always_fails.enqueue("the upstream API answered 503")
    assert WorkerProcess(burst=True, processing_threads=2).run(install_signal_handlers=False) == 0
    emails = QueueFactory(name="emails")
    EntryFactory.create_batch(3)
    EntryFactory.create_batch(2, queue=emails)
    running = EntryFactory(group_key="invoices-7", running=True)
    EntryFactory.create_batch(2, group_key="invoices-7", lock_key=running.lock_key)
    EntryFactory(queue=emails, running=True)
    EntryFactory(deferred=True)
    EntryFactory(disabled=True, queue=emails)
    EntryFactory(state="blocked")
    EntryErrorFactory(queue=emails)
    EntryErrorFactory(queue=emails, is_final=False)
    WorkerFactory(name="throttled-live", is_throttled=True)
    Worker.objects.stop(WorkerFactory(name="throttled-stopped", is_throttled=True))


def listed(client: Client, url: str) -> int:
    response = client.get(url)
    assert response.status_code == 200, url
    changelist: Any = response.context["cl"]
    return int(changelist.queryset.count())


def test_every_count_links_to_a_changelist_listing_as_many_rows(admin_client: Client) -> None:
    history_and_waiting_work()

    html = admin_client.get(reverse("admin:django_iq_dashboard")).content.decode()
    links = [(unescape(url), int(number)) for url, number in COUNT_LINK.findall(html)]

    mismatches = [
        (url, number, found)
        for url, number in links
        if (found := listed(admin_client, url)) != number
    ]
    assert mismatches == [], "each link's filter must select the rows its number counts"
    # Queue x state cells and totals, headline numbers, per-job runs and failures.
    assert len(links) >= 30
    numbers = dict(links)
    entries = reverse("admin:django_iq_entry_changelist")
    assert numbers[f"{entries}?queue__name__exact=default&state=computing"] == 3
    assert numbers[f"{entries}?queue__name__exact=default&state=running"] == 1
    assert numbers[f"{entries}?queue__name__exact=default&state=awaiting_compute"] == 3
    assert numbers[f"{entries}?state=computing"] == 4
    assert numbers[f"{entries}?state=running"] == 2
    workers = reverse("admin:django_iq_worker_changelist")
    assert numbers[f"{workers}?status=live&is_throttled__exact=1"] == 1


def test_a_jobs_row_links_its_runs_and_failures(admin_client: Client) -> None:
    history_and_waiting_work()

    html = admin_client.get(reverse("admin:django_iq_dashboard")).content.decode()
    row = re.search(rf'<tr data-job-stats="{always_fails.name}">(.*?)</tr>', html, re.S)
    assert row is not None
    (runs_url, runs), (failed_url, failed) = COUNT_LINK.findall(row.group(1))

    assert (int(runs), int(failed)) == (2, 2)
    assert f"job={always_fails.name}" in unescape(runs_url)
    assert listed(admin_client, unescape(runs_url)) == 2
    assert listed(admin_client, unescape(failed_url)) == 2
