"""The admin and the dashboard in a real browser: pages render with real data, the pause action is
clicked and its effect read back from the database, and the dashboard refreshes on its own.

Screenshots of every page are saved under ``test-artifacts/<test name>/``.
"""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import User
from django.urls import reverse

pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
from playwright.sync_api import Page, expect

from django_iq import enqueue_many
from django_iq.models import ApiToken, Entry, EntryError, Queue
from tests.factories import WorkerFactory
from tests.processes import finish, start_command
from tests.testapp.jobs import always_fails, record

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser]

PASSWORD = "browser-test-password"


def log_in(page: Page, base_url: str) -> None:
    User.objects.create_superuser("operator", "operator@example.com", PASSWORD)
    page.goto(base_url + reverse("admin:login"))
    page.fill("#id_username", "operator")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    expect(page.locator("#site-name")).to_be_visible()


def work_history() -> None:
    """Real history through a real worker: done jobs, retried and finally failed ones."""
    enqueue_many(record, [((f"done-{i}",), {}) for i in range(20)])
    always_fails.enqueue("the upstream API answered 503")
    always_fails.enqueue("the upstream API answered 502")
    code, output = finish(start_command("runworker", "--burst", "--threads", "2"), 120)
    assert code == 0, output[-3000:]
    assert EntryError.objects.filter(is_final=True).count() == 2


def waiting_work() -> None:
    enqueue_many(record, [((f"waiting-{i}",), {}) for i in range(12)])
    record.using(queue="emails", priority=50).enqueue_many([(("welcome",), {})] * 5)
    record.using(queue="reports", run_at=timedelta(hours=1)).enqueue("nightly")
    WorkerFactory(name="web-1:4242", host="web-1", processing_threads=8, busy_threads=3)


def shot(page: Page, folder: Path, name: str) -> None:
    path = folder / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 10_000, f"{path} is too small to be a rendered page"


def test_pause_action_clicked_in_the_queue_changelist_pauses_the_queue(
    page: Page, live_server: object, artifacts: Path
) -> None:
    base = str(live_server)
    work_history()
    waiting_work()
    log_in(page, base)
    shot(page, artifacts, "admin-index")
    page.goto(base + reverse("admin:app_list", args=["django_iq"]))
    expect(
        page.locator("p.iq-dashboard-link").get_by_role("link", name="Dashboard")
    ).to_be_visible()

    page.goto(base + reverse("admin:django_iq_queue_changelist"))
    row = page.locator("#result_list tbody tr", has_text="emails")
    expect(row).to_have_count(1)
    shot(page, artifacts, "queues")

    row.locator("input.action-select").check()
    page.select_option("select[name=action]", "pause_queues")
    page.click("button[name=index]")

    expect(page.locator("ul.messagelist")).to_contain_text("Paused")
    assert Queue.objects.get(name="emails").is_paused
    assert not Queue.objects.get(name="default").is_paused
    entry = LogEntry.objects.get(object_repr="emails")
    assert entry.user.username == "operator"
    paused = page.locator("#result_list tbody tr", has_text="emails").locator("td.field-paused")
    expect(paused).to_have_text("paused")
    running = page.locator("#result_list tbody tr", has_text="default").locator("td.field-paused")
    expect(running).not_to_contain_text("paused")
    expect(page.locator("td.field-paused img")).to_have_count(0)
    shot(page, artifacts, "queues-after-pause")


def test_admin_pages_render_real_data(page: Page, live_server: object, artifacts: Path) -> None:
    base = str(live_server)
    work_history()
    waiting_work()
    log_in(page, base)

    page.goto(base + reverse("admin:django_iq_entry_changelist"))
    expect(page.locator("#result_list tbody tr")).to_have_count(Entry.objects.count())
    shot(page, artifacts, "entries")

    page.goto(base + reverse("admin:django_iq_entryerror_changelist"))
    expect(page.locator("#result_list tbody tr")).to_have_count(EntryError.objects.count())
    expect(page.locator("#result_list")).to_contain_text("the upstream API answered 503")
    shot(page, artifacts, "errors")

    error = EntryError.objects.filter(is_final=True).order_by("id").first()
    assert error is not None
    page.goto(base + reverse("admin:django_iq_entryerror_change", args=[error.pk]))
    expect(page.locator("body")).to_contain_text("Traceback (most recent call last)")
    shot(page, artifacts, "error-detail")

    page.goto(base + reverse("admin:django_iq_worker_changelist"))
    expect(page.locator("#result_list")).to_contain_text("web-1:4242")
    shot(page, artifacts, "workers")


def test_dashboard_shows_depths_and_refreshes_on_its_own(
    page: Page, live_server: object, artifacts: Path
) -> None:
    base = str(live_server)
    work_history()
    waiting_work()
    log_in(page, base)

    page.goto(base + reverse("admin:django_iq_dashboard"))
    default_row = page.locator("#iq-queues tr[data-queue=default]")
    expect(default_row.locator("td[data-state=pending]")).to_have_text("12")
    expect(default_row.locator("td[data-invariant]")).to_have_text("ok")
    expect(page.locator("#iq-charts svg").first).to_be_visible()
    # The sidebar marks the page that is open: Dashboard, not Queues.
    expect(page.locator("#nav-sidebar tr.current-model")).to_have_count(1)
    expect(page.locator("#nav-sidebar tr.current-model")).to_have_class(
        re.compile("model-dashboard")
    )
    shot(page, artifacts, "dashboard")

    # New work arrives; the page picks it up without a reload.
    enqueue_many(record, [((f"late-{i}",), {}) for i in range(3)])
    expect(default_row.locator("td[data-state=pending]")).to_have_text("15", timeout=20_000)
    expect(page.locator("#iq-refresh-status")).not_to_have_attribute("data-stale", "1")


def test_reloading_the_page_of_a_new_api_token_neither_shows_it_again_nor_makes_another(
    page: Page, live_server: object, artifacts: Path
) -> None:
    base = str(live_server)
    log_in(page, base)
    robot = User.objects.create_user("ci-robot", is_staff=True)

    page.goto(base + reverse("admin:django_iq_apitoken_add"))
    page.fill("#id_name", "nightly-ci")
    page.fill("#id_user", str(robot.pk))
    page.click("input[name=_save]")
    token = page.locator("#iq-token").input_value()
    expect(page.locator(".breadcrumbs")).to_contain_text("Job queue")
    shot(page, artifacts, "token-made")
    page.reload()

    expect(page.locator("#iq-token-shown")).to_contain_text("is not shown again")
    expect(page.locator("#iq-token")).to_have_count(0)
    assert token.startswith("iq_") and token not in page.content()
    assert ApiToken.objects.count() == 1
    shot(page, artifacts, "token-reloaded")
