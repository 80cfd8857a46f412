"""The admin through Django's test client: every page renders, every action is offered and runs
only with its permission, writes the admin log and reports counts, and the dashboard is linked.

Helpers shared by the other ``test_admin_*.py`` modules are in ``tests/admin/conftest.py``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from django.contrib.admin.models import ADDITION, CHANGE, DELETION
from django.contrib.auth.models import User
from django.db.models import Model
from django.test import Client
from django.urls import reverse

from django_iq import operations
from django_iq.models import (
    ApiToken,
    Batch,
    CronJob,
    DisabledJob,
    Entry,
    EntryError,
    GroupLock,
    JobLimit,
    LeaderLease,
    OperatorAction,
    Queue,
    RunOutcome,
    Worker,
)
from tests.admin.conftest import (
    change_url,
    changelist_url,
    listed_ids,
    log_entries,
    login,
    login_superuser,
    messages_of,
    offered_actions,
    run_action,
)
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
from tests.testapp.jobs import invalidate

pytestmark = pytest.mark.django_db

# -- every page renders ------------------------------------------------------------------------


def an_operator_action() -> OperatorAction:
    operations.pause(["default"], operations.Actor.of_command("iq_pause"))
    return OperatorAction.objects.get()


def make_one_of_each() -> dict[type[Model], Model]:
    worker = WorkerFactory()
    entry = EntryFactory(group_key="g1")
    return {
        Queue: QueueFactory(name="default"),
        Entry: entry,
        EntryError: EntryErrorFactory(),
        CronJob: CronJobFactory(),
        Worker: worker,
        GroupLock: GroupLockFactory(entry_for_key=entry, worker=worker),
        DisabledJob: DisabledJobFactory(),
        RunOutcome: RunOutcomeFactory(),
        LeaderLease: LeaderLeaseFactory(),
        OperatorAction: an_operator_action(),
        JobLimit: JobLimit.objects.create(job_name="tests.testapp.jobs.capped", max_concurrency=3),
        Batch: Batch.objects.create(on_complete="tests.testapp.jobs.batch_done"),
        ApiToken: ApiToken.objects.issue(User.objects.create_user("ci-robot", is_staff=True), "ci")[
            0
        ],
    }


ALL_MODELS = [
    Queue,
    Entry,
    EntryError,
    CronJob,
    Worker,
    GroupLock,
    DisabledJob,
    RunOutcome,
    LeaderLease,
    OperatorAction,
    JobLimit,
    Batch,
    ApiToken,
]


@pytest.mark.parametrize("model", ALL_MODELS, ids=lambda m: m.__name__)
def test_every_changelist_renders_for_a_superuser(client: Client, model: type[Model]) -> None:
    objects = make_one_of_each()
    login_superuser(client)

    response = client.get(changelist_url(model))

    assert response.status_code == 200
    assert listed_ids(response) == [objects[model].pk]


@pytest.mark.parametrize("model", ALL_MODELS, ids=lambda m: m.__name__)
def test_every_change_page_renders_for_a_superuser(client: Client, model: type[Model]) -> None:
    objects = make_one_of_each()
    login_superuser(client)

    response = client.get(change_url(objects[model]))

    assert response.status_code == 200
    assert response.context["original"] == objects[model]


def test_metric_tables_are_left_to_the_dashboard_and_not_registered() -> None:
    from django.contrib import admin

    from django_iq.models import (
        Dashboard,
        QueueDepthMinute,
        QueueLatencyMinute,
        QueueMinute,
        QueueTotal,
    )

    registered = {model for model in admin.site._registry if model._meta.app_label == "django_iq"}

    # The dashboard's proxy is its row in the admin index, not a table of its own.
    assert registered == {*ALL_MODELS, Dashboard}
    assert not {QueueMinute, QueueTotal, QueueLatencyMinute, QueueDepthMinute} & registered


@pytest.mark.parametrize(
    "model", [model for model in ALL_MODELS if model not in (Queue, CronJob, JobLimit, ApiToken)]
)
def test_rows_written_by_processes_cannot_be_added_by_hand(
    client: Client, model: type[Model]
) -> None:
    login_superuser(client)

    response = client.get(reverse(f"admin:django_iq_{model._meta.model_name}_add"))

    assert response.status_code == 403


@pytest.mark.parametrize("model", [Entry, EntryError, Worker, GroupLock, RunOutcome])
def test_change_pages_of_process_rows_are_read_only(client: Client, model: type[Model]) -> None:
    obj = make_one_of_each()[model]
    login_superuser(client)

    page = client.get(change_url(obj))
    posted = client.post(change_url(obj), {"state": "disabled", "attempt": "9", "name": "x"})

    assert page.context["has_change_permission"] is False
    assert b'name="_save"' not in page.content
    assert posted.status_code == 403


def test_entry_change_page_refuses_a_posted_state_and_keeps_the_row(client: Client) -> None:
    entry = EntryFactory()
    login_superuser(client)

    response = client.post(change_url(entry), {"state": "disabled", "priority": "100"})

    entry.refresh_from_db()
    assert response.status_code == 403
    assert (entry.state, entry.priority) == ("pending", 0)


# -- the dashboard -----------------------------------------------------------------------------


def test_dashboard_route_renders_the_dashboard_inside_the_admin(client: Client) -> None:
    login_superuser(client)

    response = client.get(reverse("admin:django_iq_dashboard"))

    assert response.status_code == 200
    assert "django_iq/dashboard.html" in [t.name for t in response.templates]
    # The Dashboard model's own list address, so that the sidebar marks it as the current page.
    assert reverse("admin:django_iq_dashboard") == "/admin/django_iq/dashboard/"
    assert reverse("admin:django_iq_dashboard") == reverse("admin:django_iq_dashboard_changelist")
    sidebar = response.content.decode().split('id="nav-sidebar"')[1].split("</nav>")[0]
    current = re.findall(r'<tr class="model-(\w+) current-model">', sidebar)
    assert current == ["dashboard"]


def test_the_dashboards_first_address_leads_to_it_keeping_the_query(client: Client) -> None:
    login_superuser(client)

    page = client.get("/admin/django_iq/queue/dashboard/")
    partial = client.get("/admin/django_iq/queue/dashboard/?partial=1")

    assert (page.status_code, page["Location"]) == (302, "/admin/django_iq/dashboard/")
    assert partial["Location"] == "/admin/django_iq/dashboard/?partial=1"


def test_dashboard_route_sends_anonymous_users_to_the_admin_login(client: Client) -> None:
    response = client.get(reverse("admin:django_iq_dashboard"))

    assert response.status_code == 302
    assert response["Location"].startswith(reverse("admin:login"))


def test_app_index_links_to_the_dashboard(client: Client) -> None:
    login(client, "view_queue", "view_worker")

    response = client.get(reverse("admin:app_list", args=["django_iq"]))

    assert response.status_code == 200
    link = f'<a href="{reverse("admin:django_iq_dashboard")}" class="viewlink">Dashboard</a>'
    assert link in response.content.decode()


def test_app_index_hides_the_dashboard_link_from_users_who_may_not_see_it(client: Client) -> None:
    login(client, "view_entry")

    response = client.get(reverse("admin:app_list", args=["django_iq"]))

    assert response.status_code == 200
    assert reverse("admin:django_iq_dashboard") not in response.content.decode()


def test_app_index_links_the_job_statistics_without_the_dashboard_for_queue_viewers(
    client: Client,
) -> None:
    login(client, "view_queue")

    page = client.get(reverse("admin:app_list", args=["django_iq"])).content.decode()

    assert reverse("admin:django_iq_job_stats") in page
    assert reverse("admin:django_iq_dashboard") not in page, "the dashboard needs view_worker"
    assert reverse("admin:django_iq_dashboard_changelist") not in page


def test_app_index_links_the_dashboard_for_those_whose_change_permissions_let_them_see_it(
    client: Client,
) -> None:
    login(client, "change_queue", "change_worker")

    page = client.get(reverse("admin:app_list", args=["django_iq"])).content.decode()

    assert client.get(reverse("admin:django_iq_dashboard")).status_code == 200
    assert (
        f'<a href="{reverse("admin:django_iq_dashboard")}" class="viewlink">Dashboard</a>' in page
    )
    assert reverse("admin:django_iq_job_stats") in page


def test_admin_index_lists_the_dashboard_and_its_row_leads_there(client: Client) -> None:
    login(client, "view_queue", "view_worker")

    index = client.get(reverse("admin:index"))
    row = client.get(reverse("admin:django_iq_dashboard_changelist"))

    assert f'href="{reverse("admin:django_iq_dashboard_changelist")}"' in index.content.decode()
    assert row.status_code == 200
    assert "django_iq/dashboard.html" in [t.name for t in row.templates]


def test_admin_index_hides_the_dashboard_from_users_who_may_not_see_it(client: Client) -> None:
    login(client, "view_entry")

    index = client.get(reverse("admin:index"))

    assert reverse("admin:django_iq_dashboard_changelist") not in index.content.decode()


def test_queue_changelist_links_to_the_dashboard(client: Client) -> None:
    login_superuser(client)

    response = client.get(changelist_url(Queue))

    assert f'href="{reverse("admin:django_iq_dashboard")}"' in response.content.decode()


# -- every action: offered and run only with its permission ------------------------------------


@dataclass(frozen=True)
class ActionCase:
    """One action: the model it lists, the permissions it needs (beyond viewing), how to set
    up rows for it, whether it has taken effect, and the admin log it writes."""

    model: type[Model]
    action: str
    needs: tuple[str, ...]
    setup: Callable[[], list[Model]]
    done: Callable[[list[Model]], bool]
    log_flag: int
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def view(self) -> str:
        return f"view_{self.model._meta.model_name}"

    def __str__(self) -> str:
        return f"{self.model.__name__}.{self.action}"


def mergeable_group() -> list[Model]:
    """The default queue, holding two waiting entries of a group that compaction merges."""
    invalidate.enqueue("o1", [1])
    invalidate.enqueue("o1", [2])
    return [Queue.objects.get(name="default")]


def disabled_job_entry() -> Entry:
    DisabledJobFactory(job_name="tests.testapp.jobs.record")
    entry: Entry = EntryFactory(disabled=True, job_name="tests.testapp.jobs.record")
    return entry


def _fresh(obj: Model) -> Any:
    return type(obj)._default_manager.filter(pk=obj.pk).first()


ACTIONS = [
    ActionCase(
        Queue,
        "compact_queues",
        ("pause_queue",),
        mergeable_group,
        lambda objs: Entry.objects.filter(job_name=invalidate.name).count() == 1,
        CHANGE,
    ),
    ActionCase(
        Queue,
        "pause_queues",
        ("pause_queue",),
        lambda: [QueueFactory(name="q1")],
        lambda objs: _fresh(objs[0]).is_paused,
        CHANGE,
    ),
    ActionCase(
        Queue,
        "resume_queues",
        ("pause_queue",),
        lambda: [QueueFactory(name="q1", is_paused=True)],
        lambda objs: not _fresh(objs[0]).is_paused,
        CHANGE,
    ),
    ActionCase(
        Entry,
        "disable_jobs",
        ("change_entry",),
        lambda: [EntryFactory()],
        lambda objs: _fresh(objs[0]).state == "disabled",
        ADDITION,
    ),
    ActionCase(
        Entry,
        "enable_jobs",
        ("change_entry",),
        lambda: [disabled_job_entry()],
        lambda objs: _fresh(objs[0]).state == "pending",
        DELETION,
    ),
    ActionCase(
        Entry,
        "run_now",
        ("change_entry",),
        lambda: [EntryFactory(deferred=True)],
        lambda objs: _fresh(objs[0]).state == "pending",
        CHANGE,
    ),
    ActionCase(
        Entry,
        "cancel_entries",
        ("change_entry", "cancel_entry"),
        lambda: [EntryFactory()],
        lambda objs: _fresh(objs[0]) is None,
        DELETION,
    ),
    ActionCase(
        EntryError,
        "requeue_errors",
        ("change_entryerror", "requeue_entryerror"),
        lambda: [EntryErrorFactory()],
        lambda objs: _fresh(objs[0]).requeued_at is not None,
        CHANGE,
    ),
    ActionCase(
        EntryError,
        "requeue_matching",
        ("change_entryerror", "requeue_entryerror"),
        lambda: [EntryErrorFactory()],
        lambda objs: _fresh(objs[0]).requeued_at is not None,
        CHANGE,
    ),
    ActionCase(
        EntryError,
        "delete_selected",
        ("delete_entryerror",),
        lambda: [EntryErrorFactory()],
        lambda objs: _fresh(objs[0]) is None,
        DELETION,
        extra={"post": "yes"},
    ),
    ActionCase(
        CronJob,
        "delete_selected",
        ("delete_cronjob",),
        lambda: [CronJobFactory()],
        lambda objs: _fresh(objs[0]) is None,
        DELETION,
        extra={"post": "yes"},
    ),
    ActionCase(
        CronJob,
        "enable_cron_jobs",
        ("change_cronjob",),
        lambda: [CronJobFactory(disabled=True)],
        lambda objs: _fresh(objs[0]).is_enabled,
        CHANGE,
    ),
    ActionCase(
        CronJob,
        "disable_cron_jobs",
        ("change_cronjob",),
        lambda: [CronJobFactory()],
        lambda objs: not _fresh(objs[0]).is_enabled,
        CHANGE,
    ),
    ActionCase(
        CronJob,
        "run_cron_jobs_now",
        ("change_cronjob",),
        lambda: [CronJobFactory()],
        lambda objs: Entry.objects.filter(cron_job=objs[0], state="pending").exists(),
        CHANGE,
    ),
    ActionCase(
        DisabledJob,
        "enable_selected_jobs",
        ("change_entry",),
        lambda: [DisabledJobFactory()],
        lambda objs: _fresh(objs[0]) is None,
        DELETION,
    ),
]
# What a staff user holds, beyond viewing, in the "without" case: everything near the action
# but its own permission, so that a custom permission is shown to be needed on its own.
WITHOUT = {
    "pause_queues": ("change_queue",),
    "resume_queues": ("change_queue",),
    "compact_queues": ("change_queue",),
    "cancel_entries": ("change_entry",),
    "requeue_errors": ("change_entryerror", "delete_entryerror"),
    "requeue_matching": ("change_entryerror", "delete_entryerror"),
    "delete_selected": ("change_entryerror", "requeue_entryerror"),
}


@pytest.mark.parametrize("case", ACTIONS, ids=str)
def test_action_runs_for_a_superuser_and_writes_the_admin_log(
    client: Client, case: ActionCase
) -> None:
    objects = case.setup()
    login_superuser(client)

    response = run_action(client, case.model, case.action, objects, **case.extra)

    assert response.status_code == 302
    assert case.done(objects)
    (entry,) = log_entries()
    assert (entry.action_flag, entry.user.username) == (case.log_flag, "root")
    assert messages_of(response), "every action reports what it did with message_user"


@pytest.mark.parametrize("case", ACTIONS, ids=str)
def test_action_writes_one_audit_record_naming_the_admin_user(
    client: Client, case: ActionCase
) -> None:
    objects = case.setup()
    login_superuser(client)

    run_action(client, case.model, case.action, objects, **case.extra)

    (audit,) = OperatorAction.objects.all()
    assert (audit.door, audit.actor, audit.done) == ("admin", "root", 1)


@pytest.mark.parametrize("case", ACTIONS, ids=str)
def test_action_runs_for_staff_with_its_permissions(client: Client, case: ActionCase) -> None:
    objects = case.setup()
    login(client, case.view, *case.needs)

    assert case.action in offered_actions(client, case.model)
    response = run_action(client, case.model, case.action, objects, **case.extra)

    assert response.status_code == 302
    assert case.done(objects)
    assert [e.action_flag for e in log_entries()] == [case.log_flag]


@pytest.mark.parametrize("case", ACTIONS, ids=str)
def test_action_is_absent_and_refused_for_staff_without_its_permission(
    client: Client, case: ActionCase
) -> None:
    objects = case.setup()
    login(client, case.view, *WITHOUT.get(case.action, ()))

    offered = offered_actions(client, case.model)
    response = run_action(client, case.model, case.action, objects, **case.extra)

    assert case.action not in offered
    if offered:
        assert messages_of(response) == ["No action selected."]
    else:  # no action bar at all: the post only shows the list again
        assert (response.status_code, messages_of(response)) == (200, [])
    assert not case.done(objects)
    assert log_entries() == []
