"""Every django_iq changelist fits a 1280x800 window with the admin's navigation sidebar open, as
it is by default: with long job names, long exception messages and every column filled, nothing
sticks out to the right (no scrolling sideways, in the page or in the list), rows stay one or
two lines tall, and the long texts cut short keep their whole value in a ``title``.

Screenshots of every list are saved under ``test-artifacts/<test name>/``.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.contrib import admin
from django.urls import reverse
from django.utils import timezone

pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
from playwright.sync_api import Page, expect

from django_iq import operations
from django_iq.models import (
    ApiToken,
    Batch,
    CronJob,
    Dashboard,
    Entry,
    EntryError,
    JobLimit,
    OperatorAction,
    Queue,
)
from tests.browser.test_admin_in_browser import log_in, shot
from tests.factories import (
    CronJobFactory,
    DisabledJobFactory,
    EntryErrorFactory,
    EntryFactory,
    GroupLockFactory,
    LeaderLeaseFactory,
    QueueFactory,
    RunOutcomeFactory,
    WorkerFactory,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser]

LONG_JOB = "billing.tasks.invoices.reconcile_customer_invoices_with_the_payment_provider"
LONG_QUEUE = "notifications-high-priority"
LONG_WORKER = "web-1.production.eu-west-1.compute.internal:424242"
LONG_MESSAGE = (
    "HTTPSConnectionPool(host='api.payments.example.com', port=443): Max retries exceeded with "
    "url: /v2/customers/cus_8f7a6d5c4b3a2918/invoices?status=open&limit=100 (Caused by "
    "NewConnectionError('<urllib3.connection.HTTPSConnection object at 0x7f3a2c1b9d90>: Failed "
    "to establish a new connection: [Errno 111] Connection refused'))"
)
LONG_EXCEPTION = "requests.exceptions.ConnectionError"

# The admin's own measure: the result table's right edge within #content, and no horizontal
# scrolling of the page or of the list's scroll box (.results).
MEASURE = """() => {
  const content = document.querySelector('#content').getBoundingClientRect();
  const table = document.querySelector('#result_list');
  const results = document.querySelector('#changelist .results');
  const rows = [...document.querySelectorAll('#result_list tbody tr')];
  const counter = document.querySelector('.actions .action-counter');
  return {
    sidebarOpen: !!document.querySelector('#main.shifted'),
    pageScroll: document.documentElement.scrollWidth - window.innerWidth,
    tableRight: table ? table.getBoundingClientRect().right : 0,
    contentRight: content.right,
    listScroll: results ? results.scrollWidth - results.clientWidth : 0,
    rows: rows.length,
    tallestRow: Math.max(0, ...rows.map(row => row.getBoundingClientRect().height)),
    counterLines: counter
      ? Math.round(counter.getBoundingClientRect().height
          / parseFloat(getComputedStyle(counter).lineHeight || '16'))
      : 0,
  };
}"""


def long_rows() -> None:
    """A row or more in every django_iq list, each text as long as real ones get."""
    now = timezone.now()
    queue = QueueFactory(name=LONG_QUEUE, weight=10, max_concurrency=25)
    QueueFactory(name="default")
    worker = WorkerFactory(
        name=LONG_WORKER, host="web-1.production.eu-west-1.compute.internal", pid=424242
    )
    for state, count in (("pending", 3), ("initial", 2), ("disabled", 1), ("blocked", 1)):
        for n in range(count):
            EntryFactory(
                queue=queue,
                job_name=LONG_JOB,
                state=state,
                group_key=f"customer-8f7a6d5c4b3a2918-{state}-{n}",
                run_at=now + timedelta(days=400, seconds=17),
                attempts=2,
            )
    running = EntryFactory(queue=queue, job_name=LONG_JOB, group_key="customer-8f7a6d5c4b3a")
    GroupLockFactory(entry_for_key=running, worker=worker, track_entry=True)
    for n in range(13):
        EntryErrorFactory(
            queue=queue,
            job_name=LONG_JOB,
            entry_id=90_000_000 + n,
            attempt=n % 5 + 1,
            max_attempts=5,
            exception_class=LONG_EXCEPTION,
            message=LONG_MESSAGE,
            worker_name=LONG_WORKER,
            is_final=n % 2 == 0,
            requeued_at=now if n % 3 == 0 else None,
        )
    CronJobFactory(
        name="reconcile-customer-invoices-every-ten-seconds",
        schedule="",
        every_seconds=10,
        timezone="America/Argentina/Buenos_Aires",
        job_name=LONG_JOB,
        queue=queue,
        last_run_at=now,
        last_outcome="failed",
        last_entry_id=90_000_000,
        next_run_at=now + timedelta(seconds=10),
    )
    CronJobFactory(
        name="nightly-warehouse-export",
        schedule="30 2 * * 1-5",
        timezone="Europe/Amsterdam",
        job_name=LONG_JOB,
        queue=queue,
    )
    DisabledJobFactory(job_name=LONG_JOB)
    for n in range(3):
        RunOutcomeFactory(
            job_name=LONG_JOB,
            queue=LONG_QUEUE,
            worker_name=LONG_WORKER,
            entry_id=90_000_000 + n,
            duration_seconds=12345.678,
        )
    LeaderLeaseFactory(holder=LONG_WORKER, epoch=123456, acquired_at=now)
    JobLimit.objects.create(
        job_name=LONG_JOB,
        max_concurrency=25,
        max_concurrency_per_node=5,
        rate_count=100,
        rate_period_seconds=60,
    )
    Batch.objects.create(on_complete=LONG_JOB, total=2000, failed=12, closed_at=now)
    actor = operations.Actor.of_command("iq_pause")
    operations.pause([LONG_QUEUE], actor)
    operations.resume([LONG_QUEUE], actor)
    operations.set_cron_enabled(CronJob.objects.all(), False, actor)
    ApiToken.objects.issue(
        _staff("ci-robot-for-the-nightly-warehouse-export"),
        "nightly-warehouse-export-and-invoice-reconciliation",
        expires_at=now + timedelta(days=90),
    )
    assert OperatorAction.objects.count() == 3 and Entry.objects.count() == 8
    assert EntryError.objects.count() == 13 and Queue.objects.count() == 2


def _staff(name: str) -> Any:
    from django.contrib.auth.models import User

    return User.objects.create_user(name, is_staff=True)


def django_iq_changelists() -> list[str]:
    """The changelist of every model django_iq registers but the dashboard, whose page has a
    test of its own (test_dashboard_in_browser.py)."""
    return sorted(
        reverse(f"admin:django_iq_{model._meta.model_name}_changelist")
        for model in admin.site._registry
        if model._meta.app_label == "django_iq" and model is not Dashboard
    )


def test_every_changelist_fits_1280_by_800_with_the_sidebar_open(
    page: Page, live_server: object, artifacts: Path
) -> None:
    base = str(live_server)
    long_rows()
    page.set_viewport_size({"width": 1280, "height": 800})
    log_in(page, base)
    lists = django_iq_changelists()
    assert len(lists) >= 12, lists

    too_wide = {}
    for url in lists:
        page.goto(base + url)
        expect(page.locator("#result_list tbody tr").first).to_be_visible()
        name = url.strip("/").rsplit("/", 1)[-1]
        shot(page, artifacts, name)
        measured = page.evaluate(MEASURE)
        assert measured["sidebarOpen"], f"{url}: the navigation sidebar is closed"
        problems = [
            f"page scrolls {measured['pageScroll']}px sideways"
            if measured["pageScroll"] > 0
            else "",
            f"list scrolls {measured['listScroll']}px sideways"
            if measured["listScroll"] > 0
            else "",
            f"table ends at {measured['tableRight']:.0f}px, past the content's "
            f"{measured['contentRight']:.0f}px"
            if measured["tableRight"] > measured["contentRight"] + 0.5
            else "",
            f"a row is {measured['tallestRow']:.0f}px tall" if measured["tallestRow"] > 60 else "",
            f"the selection counter takes {measured['counterLines']} lines"
            if measured["counterLines"] > 1
            else "",
        ]
        if any(problems):
            too_wide[url] = [problem for problem in problems if problem]

    assert not too_wide, "\n".join(f"{url}: {problems}" for url, problems in too_wide.items())


def test_long_texts_cut_short_in_the_lists_keep_their_whole_value_in_a_title(
    page: Page, live_server: object, artifacts: Path
) -> None:
    base = str(live_server)
    long_rows()
    page.set_viewport_size({"width": 1280, "height": 800})
    log_in(page, base)

    page.goto(base + reverse("admin:django_iq_entryerror_changelist"))
    row = page.locator("#result_list tbody tr").first
    expect(row.locator(f'[title="{LONG_MESSAGE}"]')).to_have_count(1)
    expect(row.locator(f'[title="{LONG_EXCEPTION}"]')).to_have_count(1)
    expect(row.locator(f'[title="{LONG_JOB}"]')).to_have_count(1)

    page.goto(base + reverse("admin:django_iq_cronjob_changelist"))
    row = page.locator("#result_list tbody tr", has_text="every 10s")
    expect(row.locator(f'[title="{LONG_JOB}"]')).to_have_count(1)
    shot(page, artifacts, "cron-jobs")
