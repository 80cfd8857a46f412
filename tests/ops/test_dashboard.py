"""dashboard.py: who may see it, the numbers it reads from the database, its SVG charts, the
refresh fragment, and a query count that does not grow with the data."""

from __future__ import annotations

import itertools
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable
from datetime import timedelta
from html.parser import HTMLParser
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_iq.dashboard.charts import SVG_NS
from django_iq.dashboard.views import CHART_MINUTES, REFRESH_SECONDS, dashboard_data, format_age
from django_iq.managers import QueueTally
from django_iq.managers.queue_metrics import minute_of
from django_iq.models import Entry, LeaderLease, Queue, QueueMinute, Worker
from django_iq.wording import duration
from django_iq.worker import WorkerProcess
from tests.factories import EntryErrorFactory, EntryFactory, QueueFactory, WorkerFactory
from tests.ops.test_prometheus import SERVER_SESSION_QUERIES
from tests.testapp.jobs import always_fails, record

pytestmark = pytest.mark.urls("tests.urls_dashboard")

URL = "/admin/iq/dashboard/"
PLAIN_URL = "/iq/dashboard/"  # the same view without the admin's login redirect


def make_user(*, is_staff: bool, can_view: bool, username: str = "operator") -> User:
    user = User.objects.create_user(username, password="unused", is_staff=is_staff)
    if can_view:
        user.user_permissions.add(
            *Permission.objects.filter(
                content_type__app_label="django_iq", codename__in=("view_queue", "view_worker")
            )
        )
    return user


@pytest.fixture
def operator_client(client: Client) -> Client:
    client.force_login(make_user(is_staff=True, can_view=True))
    return client


class Cells(HTMLParser):
    """Collects, per ``data-queue`` / ``data-worker`` row, the text of each cell by its
    ``data-*`` attribute (``data-state``, ``data-invariant`` ...)."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[str, dict[str, str]] = {}
        self._row: dict[str, str] | None = None
        self._cell: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        if tag == "tr":
            key = attributes.get("data-queue") or attributes.get("data-worker")
            self._row = self.rows.setdefault(key, {}) if key else None
        elif tag == "td" and self._row is not None:
            self._cell = next(
                (f"{name[5:]}={value}" for name, value in attrs if name.startswith("data-")), None
            )
            if self._cell:
                self._row[self._cell] = ""

    def handle_data(self, data: str) -> None:
        if self._row is not None and self._cell:
            self._row[self._cell] += data.strip()

    def handle_endtag(self, tag: str) -> None:
        if tag == "td":
            self._cell = None
        elif tag == "tr":
            self._row = None


def cells(html: str) -> dict[str, dict[str, str]]:
    parser = Cells()
    parser.feed(html)
    return parser.rows


def svgs(html: str) -> list[ET.Element]:
    """Parse every <svg> element of the page as XML."""
    return [
        ET.fromstring(markup)  # noqa: S314 - the page under test, not untrusted input
        for markup in re.findall(
            r"<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"iq-.*?</svg>", html, re.S
        )
    ]


def chart(html: str, css_class: str) -> ET.Element:
    (found,) = [svg for svg in svgs(html) if css_class in svg.get("class", "").split()]
    return found


def headline(html: str, element_id: str) -> str:
    """The text of a headline number (inside its link, if it has one)."""
    found = re.search(rf'id="{element_id}"[^>]*>(?:<a [^>]*>)?([^<]*)<', html)
    assert found, f"no headline #{element_id} on the page"
    return found.group(1)


def drain() -> None:
    worker = WorkerProcess(burst=True, processing_threads=2)
    assert worker.run(install_signal_handlers=False) == 0


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (None, ""),
        (-2, "0 s"),
        (0.0123, "12.3 ms"),
        (1.56, "1.5 s"),
        (42.9, "42 s"),
        (185, "3 min 5 s"),
        (7_800, "2 h 10 min"),
        (273_600, "3 d 4 h"),
    ],
)
def test_durations_read_like_a_person_would_say_them_on_every_surface(
    seconds: float | None, text: str
) -> None:
    assert format_age(seconds) == text
    # The commands and the admin say the same, with "-" for nothing.
    assert duration(seconds) == (text or "-")


# -- access ------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_staff_user_with_view_queue_and_view_worker_permissions_gets_the_page(
    operator_client: Client,
) -> None:
    response = operator_client.get(URL)

    assert response.status_code == 200
    assert response.templates[0].name == "django_iq/dashboard.html"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("is_staff", "can_view"), [(True, False), (False, True), (False, False)], ids=str
)
def test_user_without_staff_status_or_view_permissions_gets_403(
    client: Client, is_staff: bool, can_view: bool
) -> None:
    client.force_login(make_user(is_staff=is_staff, can_view=can_view))

    assert client.get(PLAIN_URL).status_code == 403
    assert client.get(PLAIN_URL + "?partial=1").status_code == 403


@pytest.mark.django_db
def test_anonymous_user_gets_403_from_the_view_and_a_login_redirect_from_the_admin(
    client: Client,
) -> None:
    assert client.get(PLAIN_URL).status_code == 403
    response = client.get(URL)
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/")


@pytest.mark.django_db
def test_staff_without_permission_gets_403_even_through_the_admin(client: Client) -> None:
    client.force_login(make_user(is_staff=True, can_view=False))

    assert client.get(URL).status_code == 403


@pytest.mark.django_db
def test_superuser_gets_the_page(client: Client) -> None:
    client.force_login(User.objects.create_superuser("root", password="unused"))

    assert client.get(URL).status_code == 200


@pytest.mark.django_db
def test_post_is_not_allowed(operator_client: Client) -> None:
    assert operator_client.post(URL).status_code == 405


# -- queues ------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_counts_per_state_and_invariant_are_shown_per_queue(operator_client: Client) -> None:
    EntryFactory.create_batch(2)
    EntryFactory(running=True)
    EntryFactory(deferred=True)
    EntryFactory(disabled=True)
    EntryFactory(queue=QueueFactory(name="emails"))
    EntryErrorFactory(queue=QueueFactory(name="emails"))
    EntryErrorFactory(queue=QueueFactory(name="emails"), is_final=False)
    QueueFactory(name="reports", is_paused=True)

    rows = cells(operator_client.get(URL).content.decode())

    default = rows["default"]
    assert {key: default[key] for key in default if key.startswith("state=")} == {
        "state=initial": "1",
        "state=pending": "3",
        "state=disabled": "1",
        "state=blocked": "0",
        "state=computing": "1",
        "state=running": "1",
        "state=awaiting_compute": "2",
        "state=failed": "0",
    }
    assert default["invariant=holds"] == "ok"
    assert rows["emails"]["state=awaiting_compute"] == "1"
    assert rows["emails"]["state=failed"] == "1"
    assert rows["reports"]["state=pending"] == "0"
    assert rows["reports"]["invariant=holds"] == "ok"


@pytest.mark.django_db
def test_dashboard_data_reads_the_same_counts_as_queue_stats() -> None:
    EntryFactory.create_batch(3)
    EntryFactory(running=True)
    EntryFactory(queue=QueueFactory(name="emails"), deferred=True)

    data = dashboard_data(timezone.now())

    assert [row.stats for row in data.queues] == Queue.objects.stats()
    assert data.totals == {
        "initial": 1,
        "pending": 4,
        "disabled": 0,
        "blocked": 0,
        "computing": 1,
        "running": 1,
        "awaiting_compute": 3,
        "failed": 0,
    }
    assert data.snapshot.invariant_holds


@pytest.mark.django_db
def test_a_broken_invariant_is_shown_as_broken_with_its_counts(operator_client: Client) -> None:
    # Corrupted rows, written through the ORM: an entry locked by a stopped worker, and a
    # lock whose entry was deleted.
    stopped = WorkerFactory()
    Worker.objects.stop(stopped)
    EntryFactory(locked=True, lock__worker=stopped)
    orphaned = EntryFactory(locked=True)
    Entry.objects.filter(pk=orphaned.pk).delete()

    html = operator_client.get(URL).content.decode()

    assert cells(html)["default"]["invariant=broken"] == (
        "counts brokenlocked_by_dead_workers=1locks_without_entries=1"
    )
    # No leader, and the broken counts (the orphaned lock's worker is live).
    assert headline(html, "iq-status") == "2 problems"
    assert 'data-alarm-reason="invariant_broken" data-alarm-queue="default"' in html


@pytest.mark.django_db
def test_oldest_waiting_age_counts_only_entries_awaiting_compute() -> None:
    now = timezone.now()
    EntryFactory(enqueued_at=now - timedelta(seconds=600), locked=True)
    EntryFactory(enqueued_at=now - timedelta(seconds=500), deferred=True)
    EntryFactory(enqueued_at=now - timedelta(seconds=90))
    EntryFactory(enqueued_at=now - timedelta(seconds=30))
    QueueFactory(name="emails")

    rows = {row.stats.queue: row for row in dashboard_data(now).queues}

    assert rows["default"].oldest_waiting_seconds == pytest.approx(90)
    assert rows["default"].oldest_waiting == "1 min 30 s"
    assert rows["emails"].oldest_waiting_seconds is None


# -- throughput ----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_per_minute_series_cover_the_last_hour_with_missing_minutes_as_zero() -> None:
    now = timezone.now()
    this_minute = minute_of(now)
    QueueMinute.objects.record(
        {
            ("default", this_minute - timedelta(minutes=5)): QueueTally(done=4, failed=1),
            ("emails", this_minute - timedelta(minutes=5)): QueueTally(done=2),
            ("default", this_minute): QueueTally(done=1),
            # Older than the hour shown.
            ("default", this_minute - timedelta(minutes=CHART_MINUTES)): QueueTally(done=50),
        }
    )

    data = dashboard_data(now)

    minutes = [minute for minute, _ in data.done_per_minute]
    assert len(minutes) == CHART_MINUTES
    assert minutes[-1] == this_minute
    assert all(b - a == timedelta(minutes=1) for a, b in itertools.pairwise(minutes))
    done = dict(data.done_per_minute)
    assert done[this_minute - timedelta(minutes=5)] == 6
    assert done[this_minute] == 1
    assert sum(done.values()) == 7
    assert dict(data.failed_per_minute)[this_minute - timedelta(minutes=5)] == 1
    assert (data.done_last_hour, data.failed_last_hour) == (7, 1)


@pytest.mark.django_db(transaction=True)
def test_jobs_run_by_a_worker_show_in_the_charts(operator_client: Client) -> None:
    for token in ("a", "b", "c"):
        record.enqueue(token)
    always_fails.enqueue("boom")  # max_attempts=2: two failed attempts
    drain()

    html = operator_client.get(URL).content.decode()

    done_chart = chart(html, "iq-bar-chart")
    bars = done_chart.findall(f"{{{SVG_NS}}}rect")
    assert len(bars) == CHART_MINUTES
    values = [int(bar.findtext(f"{{{SVG_NS}}}title", "").rsplit(": ", 1)[1]) for bar in bars]
    assert sum(values) == 3
    failed_chart = chart(html, "iq-line-chart")
    marks = failed_chart.findall(f"{{{SVG_NS}}}circle")
    assert sum(int(m.findtext(f"{{{SVG_NS}}}title", "").rsplit(": ", 1)[1]) for m in marks) == 2
    assert headline(html, "iq-done-hour") == "3"
    assert headline(html, "iq-failed-hour") == "2"
    assert cells(html)["default"]["state=failed"] == "1"


@pytest.mark.django_db
def test_every_svg_on_the_page_is_well_formed(operator_client: Client) -> None:
    WorkerFactory(busy_threads=2)

    html = operator_client.get(URL).content.decode()

    found = svgs(html)
    # Four charts, the cluster load bar and one load bar per worker.
    assert len(found) == 6
    assert all(svg.tag == f"{{{SVG_NS}}}svg" for svg in found)


# -- workers -----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_workers_are_listed_live_first_with_their_load() -> None:
    now = timezone.now()
    WorkerFactory(
        name="busy",
        busy_threads=3,
        processing_threads=4,
        cpu_percent=97.5,
        memory_percent=40,
        is_throttled=True,
    )
    WorkerFactory(name="leader", role=Worker.Role.LEADER, processing_threads=0)
    WorkerFactory(name="silent", heartbeat_at=now - timedelta(hours=1), busy_threads=2)
    stopped = WorkerFactory(name="stopped")
    Worker.objects.stop(stopped)
    found_dead = WorkerFactory(name="found-dead", host="h", pid=77)
    Worker.objects.mark_process_dead(found_dead.name)

    data = dashboard_data(now)

    by_name = {row.name: row for row in data.workers}
    assert [row.is_live for row in data.workers] == [True, True, False, False]
    states = {name: row.state for name, row in by_name.items()}
    # A process that exited cleanly is counted apart, not listed.
    assert states == {
        "busy": "live",
        "leader": "live",
        "silent": "dead",
        found_dead.name: "dead",
    }
    assert data.stopped_workers == 1
    assert {row.name for row in data.live_workers} == {"busy", "leader"}
    busy = by_name["busy"]
    assert (busy.busy_threads, busy.idle_threads, busy.load) == (3, 1, 0.75)
    assert (busy.cpu_percent, busy.memory_percent, busy.is_throttled) == (97.5, 40, True)
    assert by_name["leader"].role == "leader"
    assert by_name["leader"].load is None
    assert by_name["silent"].heartbeat_age_seconds == pytest.approx(3600, abs=5)
    assert by_name["silent"].idle_threads == 0
    assert (data.busy_threads, data.processing_threads, data.load) == (3, 4, 0.75)
    assert data.throttled_workers == 1
    assert not data.workers_truncated


@pytest.mark.django_db
def test_worker_list_is_bounded_and_says_so(
    operator_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("django_iq.dashboard.views.WORKER_LIMIT", 2)
    WorkerFactory(name="old-dead", heartbeat_at=timezone.now() - timedelta(hours=2))
    WorkerFactory.create_batch(2)

    data = dashboard_data(timezone.now())

    assert len(data.workers) == 2
    assert all(row.is_live for row in data.workers), "live workers are listed first"
    assert data.workers_truncated
    assert "Only the first 2 workers are listed" in operator_client.get(URL).content.decode()


@pytest.mark.django_db
def test_stopped_processes_are_counted_apart_with_a_link_to_them(
    operator_client: Client,
) -> None:
    """Each ``runworker --reload`` restart leaves a stopped row: the table keeps to live and
    dead processes."""
    WorkerFactory(name="w-live")
    for index in range(3):
        Worker.objects.stop(WorkerFactory(name=f"reloaded-{index}"))

    html = operator_client.get(URL).content.decode()

    assert set(cells(html)) == {"w-live"}
    stopped = html.split('id="iq-stopped-workers"', 1)[1].split("</p>", 1)[0]
    assert ">3</a> stopped" in stopped
    assert "status=stopped" in stopped


@pytest.mark.django_db
def test_workers_table_shows_state_role_and_throttling(operator_client: Client) -> None:
    WorkerFactory(name="w-live", is_throttled=True)
    WorkerFactory(name="w-dead", heartbeat_at=timezone.now() - timedelta(minutes=10))

    html = operator_client.get(URL).content.decode()
    rows = cells(html)

    assert rows["w-live"]["state=live"] == "live"
    assert rows["w-live"]["throttled=yes"] == "throttled"
    assert rows["w-dead"]["state=dead"] == "dead"
    assert headline(html, "iq-live-workers") == "1"
    assert headline(html, "iq-throttled") == "1"


@pytest.mark.django_db
def test_workers_table_shows_each_process_sessions_and_the_server_room_left(
    operator_client: Client,
) -> None:
    WorkerFactory(name="w-live", sessions=[[101, 1.0], [102, 1.0], [103, 1.0]])
    WorkerFactory(name="w-sqlite")
    WorkerFactory(
        name="w-dead", sessions=[[104, 1.0]], heartbeat_at=timezone.now() - timedelta(minutes=10)
    )

    html = operator_client.get(URL).content.decode()
    rows = cells(html)

    assert rows["w-live"]["sessions=3"] == "3"
    assert rows["w-sqlite"]["sessions="] == "\N{EN DASH}"
    assert rows["w-dead"]["sessions=1"] == "\N{EN DASH}", "a dead process holds nothing to count"
    if connection.vendor == "sqlite":
        assert 'id="iq-server-sessions"' not in html
        return
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT current_setting('max_connections')"
            if connection.vendor == "postgresql"
            else "SELECT @@max_connections"
        )
        limit = int(cursor.fetchone()[0])
    in_use, of_limit = headline(html, "iq-server-sessions").split(" / ")
    assert int(of_limit) == limit and 1 <= int(in_use) <= limit


@pytest.mark.django_db(transaction=True)
def test_a_worker_that_ran_shows_as_stopped_not_dead_after_a_clean_exit() -> None:
    record.enqueue("x")
    drain()

    data = dashboard_data(timezone.now())

    # Counted apart from the live and dead ones, not listed.
    assert data.workers == []
    assert data.stopped_workers == 1
    (view,) = data.snapshot.workers
    assert (view.role, view.processing_threads, view.busy_threads) == ("worker", 2, 0)
    assert not view.is_live
    assert view.state == "stopped"


# -- page and fragment ---------------------------------------------------------------------------


@pytest.mark.django_db
def test_page_extends_the_admin_and_refreshes_its_fragment_without_external_assets(
    operator_client: Client,
) -> None:
    html = operator_client.get(URL).content.decode()

    assert 'id="site-name"' in html  # admin/base_site.html's branding
    assert '<div class="breadcrumbs">' in html
    assert f'data-refresh-url="{URL}?partial=1"' in html
    assert f'data-refresh-seconds="{REFRESH_SECONDS}"' in html
    assert "fetch(" in html
    assert not re.search(r"""(src|href)=["'](https?:)?//""", html), "no CDN or external asset"


@pytest.mark.django_db
def test_partial_returns_only_the_content_and_is_never_cached(operator_client: Client) -> None:
    EntryFactory()

    response = operator_client.get(URL, {"partial": "1"})
    html = response.content.decode()

    assert response.status_code == 200
    assert "<html" not in html
    assert "<script" not in html
    assert 'id="iq-queues"' in html
    assert cells(html)["default"]["state=pending"] == "1"
    assert "no-cache" in response["Cache-Control"]
    assert "max-age=0" in response["Cache-Control"]


@pytest.mark.django_db
def test_empty_installation_renders_placeholders(operator_client: Client) -> None:
    html = operator_client.get(URL).content.decode()

    assert "No queues yet." in html
    assert "No workers have started." in html


# -- queries -----------------------------------------------------------------------------------


def _queries(action: Callable[[], object]) -> int:
    with CaptureQueriesContext(connection) as captured:
        action()
    return len(captured.captured_queries)


@pytest.mark.django_db
def test_dashboard_data_takes_twenty_two_queries(django_assert_num_queries: Any) -> None:
    EntryFactory(running=True)
    WorkerFactory()
    LeaderLease.objects.acquire("leader-1", 30)

    # The operator snapshot's twelve, the jobs no live worker serves (two), the per-minute
    # counts, the last hour per job, the jobs' limits (none here: one), the leader's row, the
    # running entries (two), the latency and the depth series: five more than the snapshot's;
    # on a database server, its sessions and those the live processes report.
    with django_assert_num_queries(22 + SERVER_SESSION_QUERIES[connection.vendor]):
        dashboard_data(timezone.now())


@pytest.mark.django_db
def test_query_count_does_not_grow_with_queues_entries_or_workers(
    operator_client: Client,
) -> None:
    EntryFactory(running=True)
    WorkerFactory()
    operator_client.get(URL)  # warm the session and permission caches
    small_data = _queries(lambda: dashboard_data(timezone.now()))
    small_page = _queries(lambda: operator_client.get(URL))

    now = timezone.now()
    for index in range(8):
        queue = QueueFactory(name=f"bulk-{index}")
        EntryFactory.create_batch(5, queue=queue)
        EntryFactory(queue=queue, running=True)
        EntryErrorFactory(queue=queue)
        QueueMinute.objects.record({(queue.name, minute_of(now)): QueueTally(done=index + 1)})
    WorkerFactory.create_batch(5)

    assert _queries(lambda: dashboard_data(timezone.now())) == small_data
    assert _queries(lambda: operator_client.get(URL)) == small_page


@pytest.mark.django_db
def test_the_dashboard_names_jobs_no_live_worker_serves(operator_client: Client) -> None:
    WorkerFactory(job_names=[record.name])
    record.enqueue("served")
    EntryFactory(job_name="elsewhere.jobs.only_there")

    html = operator_client.get(URL).content.decode()

    assert 'data-unserved-job="elsewhere.jobs.only_there"' in html
    assert f'data-unserved-job="{record.name}"' not in html
