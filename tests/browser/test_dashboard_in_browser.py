"""The dashboard in a real browser at 1280x800: the leader green then red, counts that lead to
changelists listing as many rows, and no table wider than the page.

Screenshots (``dashboard.png``, ``dashboard-no-leader.png``, ``dashboard-link-followed.png``)
go to ``test-artifacts/<test name>/``; docs/images holds copies.
"""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path

import pytest
from django.utils import timezone

pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
from playwright.sync_api import Page, expect

from django_iq import enqueue_many
from django_iq.duties import SamplingDuty
from django_iq.models import LeaderLease, Worker
from tests.browser.test_admin_in_browser import log_in, shot, waiting_work, work_history
from tests.conftest import iq_settings_with
from tests.factories import EntryFactory, WorkerFactory
from tests.testapp.jobs import record

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser]

# Elements wider than their box, and the page wider than the window: none may be found.
OVERFLOWING = """() => {
  const found = [];
  const page = document.documentElement;
  if (page.scrollWidth > page.clientWidth) found.push(`page ${page.scrollWidth}>${page.clientWidth}`);
  const content = document.getElementById("iq-dashboard").getBoundingClientRect();
  for (const el of document.querySelectorAll("#iq-dashboard *")) {
    const box = el.getBoundingClientRect();
    const clipped = el.scrollWidth > el.clientWidth + 1 && el.clientWidth > 0;
    if (box.right > content.right + 1 || (clipped && getComputedStyle(el).overflowX !== "visible")) {
      found.push(`${el.tagName}#${el.id}.${el.className} right=${box.right} of ${content.right}`);
    }
  }
  return found;
}"""


def a_cluster_at_work() -> None:
    """History from a real worker run, waiting and running work, a live worker and a leader."""
    work_history()
    waiting_work()
    enqueue_many(record, [((f"invoice-{i}",), {"group_key": "customer-7"}) for i in range(1)])
    running = EntryFactory(group_key="customer-9", running=True)
    EntryFactory.create_batch(3, group_key="customer-9", lock_key=running.lock_key)
    WorkerFactory(name="leader-1:310", role=Worker.Role.LEADER, host="leader-1", pid=310)
    assert LeaderLease.objects.acquire("leader-1:310", 600) is not None
    # The leader's depth sample of this minute, as its sampling duty writes it.
    assert SamplingDuty().run_once(timezone.now(), nullcontext) == 3


@iq_settings_with(WORKER_SILENT_AFTER_SECONDS=600)
def test_dashboard_shows_the_leader_links_counts_and_fits_1280_pixels(
    page: Page, live_server: object, artifacts: Path
) -> None:
    base = str(live_server)
    a_cluster_at_work()
    page.set_viewport_size({"width": 1280, "height": 800})
    log_in(page, base)

    # From the admin index's own row to the dashboard.
    page.get_by_role("link", name="Dashboard").first.click()
    expect(page.locator("#iq-leader-live")).to_have_attribute("data-leader", "live")
    expect(page.locator("#iq-leader-live")).to_have_text("leader-1")
    expect(page.locator("#iq-leader-live")).to_have_class("iq-ok")
    expect(page.locator("#iq-running tr[data-running-entry]")).to_have_count(1)
    assert page.evaluate(OVERFLOWING) == []
    shot(page, artifacts, "dashboard")

    # A queue x state count leads to the entries it counts.
    cell = page.locator("#iq-queues tr[data-queue=default] td[data-state=awaiting_compute] a")
    shown = int(cell.inner_text())
    assert shown == 13  # 12 waiting, 1 grouped (the 3 behind their group's running entry compute)
    cell.click()
    expect(page.locator("#result_list tbody tr")).to_have_count(shown)
    shot(page, artifacts, "dashboard-link-followed")
    page.go_back()

    # The failed count leads to the final errors, the per-job failures to their outcomes.
    failed = page.locator("#iq-failed-count a")
    shown_failed = int(failed.inner_text())
    failed.click()
    expect(page.locator("#result_list tbody tr")).to_have_count(shown_failed)
    page.go_back()
    job_failed = page.locator("#iq-job-stats td[data-failed] a").first
    shown_job_failed = int(job_failed.inner_text())
    job_failed.click()
    expect(page.locator("#result_list tbody tr")).to_have_count(shown_job_failed)
    page.go_back()

    # The leader goes: the headline and the leader panel turn red.
    lease = LeaderLease.objects.current()
    assert lease is not None
    assert LeaderLease.objects.release(lease.holder, lease.epoch)
    page.reload()
    expect(page.locator("#iq-leader-live")).to_have_attribute("data-leader", "missing")
    expect(page.locator("#iq-leader-live")).to_have_class("iq-broken")
    expect(page.locator("#iq-status")).to_have_class("iq-broken")
    expect(page.locator("#iq-alarms tr[data-alarm-reason=no_leader]")).to_have_count(1)
    colour = page.locator("#iq-leader-live").evaluate("el => getComputedStyle(el).color")
    assert colour == "rgb(186, 33, 33)", colour
    assert page.evaluate(OVERFLOWING) == []
    shot(page, artifacts, "dashboard-no-leader")
