"""The JSON management API: who may use it, CSRF, inspecting and cancelling entries, requeueing
failures, queue statistics, pause and resume, and the metrics route next to it."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.contrib.admin.models import ADDITION, CHANGE, DELETION, LogEntry
from django.contrib.auth.models import Permission, User
from django.core.serializers.json import DjangoJSONEncoder
from django.test import Client, override_settings
from django.urls import reverse
from django.utils import timezone

from django_iq.api.endpoint import MAX_IDS
from django_iq.models import (
    ApiToken,
    DisabledJob,
    Entry,
    EntryError,
    GroupLock,
    OperatorAction,
    Queue,
    Worker,
)
from django_iq.states import EntryState
from tests.factories import (
    EntryErrorFactory,
    EntryFactory,
    GroupLockFactory,
    QueueFactory,
    WorkerFactory,
)
from tests.testapp.jobs import record

pytestmark = pytest.mark.django_db

JOB = record.name

# The view permissions of the API's reads, and the permissions of its actions.
VIEWS = ("view_entry", "view_entryerror", "view_queue", "view_runoutcome", "view_worker")
ACTIONS = ("cancel_entry", "requeue_entryerror", "pause_queue", "change_entry")
PERMISSIONS = VIEWS + ACTIONS


def url(name: str, *args: Any) -> str:
    return reverse(f"django_iq:api:{name}", args=args)


def iso(moment: datetime) -> str:
    """A datetime as the API writes it."""
    return str(DjangoJSONEncoder().default(moment))


def make_user(username: str, *, is_staff: bool = True, perms: tuple[str, ...] = ()) -> User:
    user = User.objects.create_user(username, is_staff=is_staff)  # no password: no hashing
    for codename in perms:
        user.user_permissions.add(
            Permission.objects.get(content_type__app_label="django_iq", codename=codename)
        )
    return user


class Api:
    """A test client with CSRF checks on, logged in, sending the CSRF token like a browser."""

    def __init__(self, user: User | None) -> None:
        self.client = Client(enforce_csrf_checks=True)
        if user is not None:
            self.client.force_login(user)

    def csrf_token(self) -> str:
        if "csrftoken" not in self.client.cookies:
            # Any GET of the API sets the cookie (even a refused one, for staff or not).
            self.client.get(url("queue-list"))
        return self.client.cookies["csrftoken"].value

    def get(self, path: str, **params: Any) -> Any:
        return self.client.get(path, params)

    def post(self, path: str, body: Any, *, token: bool = True, raw: str | None = None) -> Any:
        headers = {"X-CSRFToken": self.csrf_token()} if token else {}
        data = raw if raw is not None else json.dumps(body)
        return self.client.post(path, data, content_type="application/json", headers=headers)

    def delete(self, path: str, *, token: bool = True) -> Any:
        headers = {"X-CSRFToken": self.csrf_token()} if token else {}
        return self.client.delete(path, headers=headers)


@pytest.fixture
def staff() -> Api:
    """A staff user without any of the API's custom permissions."""
    return Api(make_user("staff"))


@pytest.fixture
def viewer() -> Api:
    """A staff user with the view permissions of the API's reads, and none of its actions."""
    return Api(make_user("viewer", perms=VIEWS))


@pytest.fixture
def operator() -> Api:
    """A staff user with every permission of the API."""
    return Api(make_user("operator", perms=PERMISSIONS))


def endpoints() -> list[tuple[str, str, Any]]:
    """(method, URL, JSON body) of every operation of the API."""
    return [
        ("get", url("entry-list"), None),
        ("get", url("entry-count"), None),
        ("get", url("entry", 1), None),
        ("delete", url("entry", 1), None),
        ("post", url("entry-cancel"), {"ids": [1]}),
        ("get", url("error-list"), None),
        ("get", url("error", 1), None),
        ("post", url("error-requeue"), {"ids": [1]}),
        ("get", url("outcome-list"), None),
        ("get", url("queue-list"), None),
        ("get", url("job-stats"), None),
        ("post", url("queue-pause", "default"), {}),
        ("post", url("queue-resume", "default"), {}),
        ("post", url("job-disable", JOB), {}),
        ("post", url("job-enable", JOB), {}),
        ("get", url("openapi"), None),
    ]


def call(api: Api, method: str, path: str, body: Any) -> Any:
    if method == "get":
        return api.get(path)
    if method == "delete":
        return api.delete(path)
    return api.post(path, body)


# -- who may use it ---------------------------------------------------------------------------


@pytest.mark.parametrize(("method", "path", "body"), endpoints())
def test_anonymous_requests_are_refused_with_401_json(method: str, path: str, body: Any) -> None:
    api = Api(None)
    # The CSRF token is sent, so that the refusal is the API's own and not CSRF's.
    response = call(api, method, path, body)

    assert response.status_code == 401
    assert response["Content-Type"] == "application/json"
    assert "log in as a staff user" in response.json()["error"]


@pytest.mark.parametrize(("method", "path", "body"), endpoints())
def test_users_who_are_not_staff_are_refused_with_403_json(
    method: str, path: str, body: Any
) -> None:
    api = Api(make_user("customer", is_staff=False, perms=PERMISSIONS))

    response = call(api, method, path, body)

    assert response.status_code == 403
    assert response.json() == {"error": "The django_iq API is for staff users only."}


@pytest.mark.parametrize(
    ("method", "name", "body", "permission"),
    [
        ("delete", "entry", None, "django_iq.cancel_entry"),
        ("post", "entry-cancel", {"ids": []}, "django_iq.cancel_entry"),
        ("post", "error-requeue", {"ids": []}, "django_iq.requeue_entryerror"),
        ("post", "queue-pause", {}, "django_iq.pause_queue"),
        ("post", "queue-resume", {}, "django_iq.pause_queue"),
        ("post", "job-disable", {}, "django_iq.change_entry"),
        ("post", "job-enable", {}, "django_iq.change_entry"),
    ],
)
def test_staff_without_the_permission_cannot_change_anything(
    staff: Api, method: str, name: str, body: Any, permission: str
) -> None:
    queue = QueueFactory(name="default", is_paused=name == "queue-resume")
    entry = EntryFactory(queue=queue)
    error = EntryErrorFactory(queue=queue)
    if name == "job-enable":
        DisabledJob.objects.create(job_name=JOB)
    args = {
        "entry": (entry.pk,),
        "queue-pause": ("default",),
        "queue-resume": ("default",),
        "job-disable": (JOB,),
        "job-enable": (JOB,),
    }
    body = {"ids": [error.pk if name == "error-requeue" else entry.pk]} if body else body

    response = call(staff, method, url(name, *args.get(name, ())), body)

    assert response.status_code == 403
    assert permission in response.json()["error"]
    assert Entry.objects.filter(pk=entry.pk).exists()
    assert Entry.objects.count() == 1, "a requeue would have added an entry"
    assert Queue.objects.get(name="default").is_paused is (name == "queue-resume")
    assert DisabledJob.objects.filter(job_name=JOB).exists() is (name == "job-enable")
    assert not OperatorAction.objects.exists()
    assert not LogEntry.objects.exists()


def test_staff_without_view_permissions_may_not_read(staff: Api) -> None:
    EntryFactory()

    for name in ("entry-list", "entry-count", "error-list", "queue-list", "job-stats"):
        response = staff.get(url(name))
        assert response.status_code == 403, name
        assert "needs the django_iq.view_" in response.json()["error"], name


def test_a_post_without_the_csrf_token_is_refused_and_changes_nothing(operator: Api) -> None:
    entry = EntryFactory()

    refused = operator.post(url("entry-cancel"), {"ids": [entry.pk]}, token=False)
    deleted = operator.delete(url("entry", entry.pk), token=False)

    assert (refused.status_code, deleted.status_code) == (403, 403)
    assert b"CSRF" in refused.content
    assert Entry.objects.filter(pk=entry.pk).exists()
    accepted = operator.post(url("entry-cancel"), {"ids": [entry.pk]})
    assert accepted.status_code == 200
    assert not Entry.objects.filter(pk=entry.pk).exists()


def test_the_csrf_check_comes_after_authentication_and_before_the_method_check(
    operator: Api,
) -> None:
    QueueFactory(name="emails")
    pause = url("queue-pause", "emails")
    operator.csrf_token()  # the cookie is set, the header is not sent

    anonymous = Client(enforce_csrf_checks=True).post(pause)
    without_token = operator.client.post(pause)
    put_without_token = operator.client.put(pause)

    assert anonymous.status_code == 401
    assert "log in as a staff user" in anonymous.json()["error"]
    for refused in (without_token, put_without_token):
        assert refused.status_code == 403
        assert refused["Content-Type"] == "application/json"
        assert refused.json()["error"].startswith(
            "CSRF verification failed (CSRF token missing.). Send the value of the csrftoken "
        )
    assert not Queue.objects.get(name="emails").is_paused


def test_any_get_of_the_api_sets_the_csrf_cookie(operator: Api) -> None:
    response = operator.get(url("entry-count"))

    assert response.status_code == 200
    assert response.cookies["csrftoken"].value


@override_settings(CSRF_FAILURE_VIEW="django_iq.api.views.csrf_failure")
def test_the_csrf_failure_view_answers_json_for_the_api_only(operator: Api) -> None:
    refused = operator.post(url("queue-pause", "default"), {}, token=False)
    admin_refused = operator.client.post(reverse("admin:logout"))

    assert refused.status_code == 403
    assert refused["Content-Type"] == "application/json"
    assert "X-CSRFToken" in refused.json()["error"]
    assert admin_refused.status_code == 403
    assert admin_refused["Content-Type"].startswith("text/html")


def test_a_method_not_allowed_is_answered_405_json_with_the_allowed_ones(operator: Api) -> None:
    response = operator.post(url("queue-list"), {})

    assert response.status_code == 405
    assert response.json() == {
        "error": "Method POST is not allowed here; use GET, HEAD.",
        "allowed": ["GET", "HEAD"],
    }


def test_responses_are_never_cached(viewer: Api) -> None:
    response = viewer.get(url("queue-list"))

    assert "no-cache" in response["Cache-Control"]
    assert "private" in response["Cache-Control"]


def test_an_unknown_query_parameter_is_refused_even_where_none_are_taken(viewer: Api) -> None:
    response = viewer.get(url("queue-list"), name="default")

    assert response.status_code == 400
    assert response.json() == {
        "error": "Unknown query parameter 'name'. It takes none.",
        "parameter": "name",
    }


# -- paths ------------------------------------------------------------------------------------


@pytest.mark.parametrize("debug", [True, False])
@pytest.mark.parametrize("by", ["token", "session"])
def test_a_path_without_its_trailing_slash_reaches_the_endpoint(
    operator: Api, debug: bool, by: str
) -> None:
    # CommonMiddleware would redirect it (and with DEBUG on, refuse to redirect a POST).
    entry = EntryFactory(queue=QueueFactory(name="emails"))
    headers = {"X-CSRFToken": operator.csrf_token()}
    if by == "token":
        user = User.objects.get(username="operator")
        headers = {"Authorization": f"Bearer {ApiToken.objects.issue(user, 'ci')[1]}"}
    client = operator.client if by == "session" else Client(enforce_csrf_checks=True)

    with override_settings(DEBUG=debug, APPEND_SLASH=True):
        paused = client.post("/iq/api/queues/emails/pause", headers=headers)
        counted = client.get("/iq/api/entries/count", {"queue": "emails"}, headers=headers)
        deleted = client.delete(f"/iq/api/entries/{entry.pk}", headers=headers)

    assert paused.status_code == 200, paused.content
    assert paused.json()["changed"] is True
    assert Queue.objects.get(name="emails").is_paused
    assert counted.json() == {"count": 1, "estimated": False}
    assert deleted.status_code == 200, deleted.content
    assert not Entry.objects.filter(pk=entry.pk).exists()


def test_the_routes_reverse_to_their_paths_with_the_slash() -> None:
    assert url("queue-pause", "emails") == "/iq/api/queues/emails/pause/"
    assert url("entry", 7) == "/iq/api/entries/7/"


# -- entries ----------------------------------------------------------------------------------


def test_inspect_shows_inputs_states_lock_and_failed_attempts(viewer: Api) -> None:
    entry = record.using(queue="emails", priority=5, group_key="order:7").enqueue(
        "token-1", seconds=0.5
    )
    worker = WorkerFactory(name="web-1:4242")
    lock = GroupLockFactory(entry_for_key=entry, worker=worker, entry_id=entry.pk)
    first = EntryErrorFactory(
        entry_id=entry.pk, queue=entry.queue, attempt=1, is_final=False, message="first"
    )
    second = EntryErrorFactory(
        entry_id=entry.pk, queue=entry.queue, attempt=2, is_final=False, message="second"
    )
    EntryErrorFactory(entry_id=entry.pk + 1000)  # another entry's

    response = viewer.get(url("entry", entry.pk))

    assert response.status_code == 200
    body = response.json()
    assert body == {
        "id": entry.pk,
        "queue": "emails",
        "job": "tests.testapp.jobs.record",
        "args": ["token-1"],
        "kwargs": {"seconds": 0.5},
        "priority": 5,
        "state": "pending",
        "inferred_state": "computing",
        "attempts": 0,
        "max_attempts": 3,
        "run_at": iso(entry.run_at),
        "enqueued_at": iso(entry.enqueued_at),
        "expires_at": None,
        "group_key": "order:7",
        "lock_key": "g:order:7",
        "lock": {
            "id": lock.pk,
            "key": "g:order:7",
            "locked_at": iso(lock.locked_at),
            "worker": "web-1:4242",
            "running_entry_id": entry.pk,
        },
        "cron_job_id": None,
        "result_id": None,
        "progress": None,
        "errors": [
            {
                "id": error.pk,
                "entry_id": entry.pk,
                "queue": "emails",
                "job": "tests.testapp.jobs.record",
                "args": error.args,
                "kwargs": {},
                "priority": 0,
                "group_key": None,
                "attempt": error.attempt,
                "max_attempts": 1,
                "exception_class": "builtins.ValueError",
                "message": error.message,
                "worker": "",
                "enqueued_at": iso(error.enqueued_at),
                "failed_at": iso(error.failed_at),
                "final": False,
                "requeued_at": None,
                "traceback": "Traceback (most recent call last):\nValueError: boom\n",
            }
            for error in (first, second)
        ],
    }


def test_inspect_shows_the_last_progress_the_job_reported(viewer: Api) -> None:
    entry = EntryFactory(running=True)
    lock = GroupLock.objects.get(key=entry.lock_key)
    reported_at = timezone.now() - timedelta(seconds=3)
    Entry.objects.report_progress(
        entry.pk, lock.pk, done=40, total=160, note="rows", reported_at=reported_at
    )

    body = viewer.get(url("entry", entry.pk)).json()

    assert body["progress"] == {
        "done": 40.0,
        "total": 160.0,
        "percent": 25.0,
        "note": "rows",
        "reported_at": iso(reported_at),
    }


@pytest.mark.parametrize(
    ("traits", "stored", "inferred"),
    [
        ({}, "pending", "awaiting_compute"),
        ({"deferred": True}, "initial", "initial"),
        ({"disabled": True}, "disabled", "disabled"),
    ],
)
def test_inspect_infers_the_state_of_an_entry_without_a_lock(
    viewer: Api, traits: dict[str, bool], stored: str, inferred: str
) -> None:
    entry = EntryFactory(**traits)

    body = viewer.get(url("entry", entry.pk)).json()

    assert (body["state"], body["inferred_state"], body["lock"]) == (stored, inferred, None)


def test_inspecting_a_missing_entry_is_a_404_pointing_at_its_failures(viewer: Api) -> None:
    response = viewer.get(url("entry", 987654))

    assert response.status_code == 404
    assert response.json() == {
        "error": "Entry 987654 does not exist: it finished, failed for good or was cancelled. "
        f"Its failed attempts, if any, are at {url('error-list')}?entry_id=987654."
    }


def test_delete_cancels_the_entry_and_records_who_did_it(operator: Api) -> None:
    entry = EntryFactory()
    other = EntryFactory()

    response = operator.delete(url("entry", entry.pk))

    assert response.status_code == 200
    assert response.json() == {
        "cancelled": [entry.pk],
        "requested": [],
        "not_found": [],
        "message": f"Cancelled 1 entry: {entry.pk}.",
    }
    assert list(Entry.objects.values_list("pk", flat=True)) == [other.pk]
    log = LogEntry.objects.get()
    assert (log.user.username, log.action_flag, log.object_id) == (
        "operator",
        DELETION,
        str(entry.pk),
    )
    assert log.content_type.model_class() is Entry
    assert log.object_repr == str(entry)
    assert log.change_message == "Cancelled through the django_iq API."


def test_delete_of_an_entry_a_worker_runs_requests_its_cancel_with_202(operator: Api) -> None:
    entry = EntryFactory(locked=True)

    response = operator.delete(url("entry", entry.pk))

    assert response.status_code == 202
    assert response.json() == {
        "cancelled": [],
        "requested": [entry.pk],
        "not_found": [],
        "message": f"Cancelled 0 entries. Cancel requested for 1 entry being run (the worker "
        f"stops them): {entry.pk}.",
    }
    assert Entry.objects.get(pk=entry.pk).cancel_requested_at is not None
    (log,) = LogEntry.objects.all()
    assert log.change_message == (
        "Cancel requested through the django_iq API: the worker running it stops it."
    )


def test_deleting_a_missing_entry_is_a_404(operator: Api) -> None:
    response = operator.delete(url("entry", 987654))

    assert response.status_code == 404
    assert response.json()["error"].startswith("Entry 987654 does not exist")


def test_cancel_many_reports_what_became_of_each_id(operator: Api) -> None:
    waiting = [EntryFactory() for _ in range(3)]
    deferred = EntryFactory(deferred=True)
    running = EntryFactory(locked=True)
    # Its group is locked by a sibling's claim: it counts as computing, as in the manager API.
    sibling = EntryFactory(group_key="g", locked=True)
    grouped = EntryFactory(group_key="g")
    ids = [*(e.pk for e in waiting), deferred.pk, running.pk, grouped.pk, 987654, waiting[0].pk]

    response = operator.post(url("entry-cancel"), {"ids": ids})

    assert response.status_code == 200
    assert response.json() == {
        "cancelled": sorted([*(e.pk for e in waiting), deferred.pk]),
        "requested": sorted([running.pk, grouped.pk]),
        "not_found": [987654],
        "message": f"Cancelled 4 entries: {', '.join(str(pk) for pk in sorted(ids[:4]))}. "
        f"Cancel requested for 2 entries being run (the worker stops them): {running.pk}, "
        f"{grouped.pk}. "
        "Not found: 987654 (finished, failed for good or already cancelled).",
    }
    assert set(Entry.objects.values_list("pk", flat=True)) == {running.pk, sibling.pk, grouped.pk}
    assert sorted(
        int(pk)
        for pk in LogEntry.objects.filter(action_flag=DELETION).values_list("object_id", flat=True)
    ) == sorted([*(e.pk for e in waiting), deferred.pk])


@pytest.mark.parametrize(
    ("raw", "content_type", "message"),
    [
        ("ids=1", "application/x-www-form-urlencoded", "Content-Type: application/json"),
        ("{ids: [1]}", "application/json", "The body is not valid JSON"),
        ("[1, 2]", "application/json", "The body must be a JSON object, got list"),
        ('{"ids": 5}', "application/json", "Invalid value 5 for 'ids'"),
        ('{"ids": []}', "application/json", "Invalid value [] for 'ids'"),
        ('{"ids": [1, "2"]}', "application/json", "Invalid value '2' for 'ids[1]'"),
        ('{"ids": [1, true]}', "application/json", "Invalid value True for 'ids[1]'"),
        ('{"ids": [0]}', "application/json", "Invalid value 0 for 'ids[0]'"),
        ('{"ids": [1], "force": true}', "application/json", "Unknown field(s) 'force'"),
        (
            json.dumps({"ids": list(range(1, MAX_IDS + 2))}),
            "application/json",
            f"'ids' has {MAX_IDS + 1} ids; send at most {MAX_IDS} per request.",
        ),
    ],
)
def test_a_bad_cancel_body_is_a_400_saying_what_is_wrong(
    operator: Api, raw: str, content_type: str, message: str
) -> None:
    entry = EntryFactory(pk=1)

    response = operator.client.post(
        url("entry-cancel"),
        raw,
        content_type=content_type,
        headers={"X-CSRFToken": operator.csrf_token()},
    )

    assert response.status_code == 400
    assert message in response.json()["error"]
    assert Entry.objects.filter(pk=entry.pk).exists()


# -- errors -----------------------------------------------------------------------------------


def test_an_error_record_shows_its_traceback(viewer: Api) -> None:
    error = EntryErrorFactory(traceback="Traceback ...\nKeyError: 'sku'\n")

    body = viewer.get(url("error", error.pk)).json()

    assert (body["id"], body["traceback"]) == (error.pk, "Traceback ...\nKeyError: 'sku'\n")


def test_a_missing_error_record_is_a_404(viewer: Api) -> None:
    response = viewer.get(url("error", 987654))

    assert response.status_code == 404
    assert response.json() == {
        "error": "Error record 987654 does not exist (pruned, or never was)."
    }


def test_requeue_by_ids_enqueues_each_final_failure_once_and_logs_it(operator: Api) -> None:
    failed = [EntryErrorFactory(args=[f"t{n}"], priority=n) for n in range(2)]
    retried = EntryErrorFactory(is_final=False)
    done = EntryErrorFactory(requeued_at=timezone.now())
    ids = [*(e.pk for e in failed), retried.pk, done.pk, 987654]

    response = operator.post(url("error-requeue"), {"ids": ids})

    assert response.status_code == 200
    body = response.json()
    created = list(Entry.objects.order_by("pk"))
    assert body == {
        "requeued": 2,
        "entry_ids": [entry.pk for entry in created],
        "skipped": 2,
        "not_found": [987654],
        "message": f"Requeued 2 failed entries: {failed[0].pk}, {failed[1].pk}. New entries: "
        f"{created[0].pk}, {created[1].pk}. Skipped 2, not a final failure, or already "
        f"requeued: {retried.pk}, {done.pk}. Not found: 987654 (no such error record, or pruned).",
    }
    assert sorted((e.args, e.priority, e.state) for e in created) == [
        (["t0"], 0, "pending"),
        (["t1"], 1, "pending"),
    ]
    assert EntryError.objects.failed().count() == 0
    logs = LogEntry.objects.filter(action_flag=ADDITION)
    assert sorted(int(log.object_id) for log in logs) == body["entry_ids"]
    assert {log.change_message for log in logs} == {"Requeued through the django_iq API."}


def test_requeue_matching_requeues_only_the_matching_failures(operator: Api) -> None:
    EntryErrorFactory.create_batch(3, exception_class="shop.errors.Timeout")
    EntryErrorFactory(exception_class="builtins.ValueError")

    response = operator.post(
        url("error-requeue"), {"exception_class": "shop.errors.Timeout", "queue": "default"}
    )

    assert response.status_code == 200
    assert response.json() == {
        "requeued": 3,
        "matching": {"exception_class": "shop.errors.Timeout", "queue": "default"},
        "message": "Requeued 3 failed entries matching exception_class=shop.errors.Timeout "
        "queue=default.",
    }
    assert Entry.objects.count() == 3
    assert list(EntryError.objects.failed().values_list("exception_class", flat=True)) == [
        "builtins.ValueError"
    ]
    log = LogEntry.objects.get()
    assert (log.action_flag, log.object_id, log.content_type.model_class()) == (
        CHANGE,
        None,
        EntryError,
    )
    assert (
        log.object_repr
        == "failed entries matching exception_class=shop.errors.Timeout queue=default"
    )
    assert log.change_message == "Requeued 3 failed entries through the django_iq API."


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            {},
            "Say which failed entries to requeue: ids, or at least one of job, exception_class, queue",
        ),
        ({"ids": [1], "job": "x"}, "Give either ids or filters, not both"),
        ({"job": ""}, "Invalid value '' for 'job': expected a non-empty string."),
        ({"queue": 3}, "Invalid value 3 for 'queue': expected a non-empty string."),
        (
            {"jobs": "x"},
            "Unknown field(s) 'jobs' in the body; accepted: ids, job, exception_class, queue.",
        ),
    ],
)
def test_a_requeue_without_a_clear_target_is_a_400(
    operator: Api, body: dict[str, Any], message: str
) -> None:
    EntryErrorFactory()

    response = operator.post(url("error-requeue"), body)

    assert response.status_code == 400
    assert message in response.json()["error"]
    assert EntryError.objects.failed().count() == 1


# -- queues -----------------------------------------------------------------------------------


def test_queue_list_reports_counts_invariant_and_oldest_waiting(viewer: Api) -> None:
    now = timezone.now()
    emails = QueueFactory(name="emails", weight=2, max_concurrency=4)
    QueueFactory(name="reports", is_paused=True)
    oldest = EntryFactory(queue=emails, enqueued_at=now - timedelta(minutes=10))
    EntryFactory(queue=emails, enqueued_at=now - timedelta(minutes=1))
    EntryFactory(queue=emails, locked=True, enqueued_at=now - timedelta(hours=1))
    EntryFactory(queue=emails, deferred=True)
    EntryFactory(queue=emails, disabled=True)
    EntryErrorFactory(queue=emails)

    body = viewer.get(url("queue-list")).json()

    by_name = {queue["name"]: queue for queue in body["queues"]}
    assert list(by_name) == ["emails", "reports"]
    emails_row = by_name["emails"]
    waited = emails_row.pop("oldest_waiting_seconds")
    assert 600 <= waited < 700
    assert emails_row == {
        "name": "emails",
        "weight": 2,
        "max_concurrency": 4,
        "is_paused": False,
        "counts": {
            "initial": 1,
            "pending": 3,
            "disabled": 1,
            "blocked": 0,
            "computing": 1,
            "running": 0,
            "awaiting_compute": 2,
            "failed": 1,
        },
        "invariant_holds": True,
        "locked_by_dead_workers": 0,
        "locks_without_entries": 0,
        "oldest_waiting_enqueued_at": iso(oldest.enqueued_at),
        "alert_waiting_seconds": 300,
        "alarm": None,
        "merged": 0,
    }
    assert by_name["reports"] == {
        "name": "reports",
        "weight": 1,
        "max_concurrency": None,
        "is_paused": True,
        "counts": dict.fromkeys(
            (
                "initial",
                "pending",
                "disabled",
                "blocked",
                "computing",
                "running",
                "awaiting_compute",
                "failed",
            ),
            0,
        ),
        "invariant_holds": True,
        "locked_by_dead_workers": 0,
        "locks_without_entries": 0,
        "oldest_waiting_enqueued_at": None,
        "oldest_waiting_seconds": None,
        "alert_waiting_seconds": 300,
        "alarm": None,
        "merged": 0,
    }


def test_queue_list_reports_broken_counts_and_alarms(viewer: Api) -> None:
    # An entry locked by a worker that stopped; another waiting for ten minutes in a queue
    # of a 60-second threshold that no live worker serves (the only worker serves "other").
    stopped = WorkerFactory(queues=["other"])
    Worker.objects.stop(stopped)
    EntryFactory(locked=True, lock__worker=stopped)
    emails = QueueFactory(name="emails", alert_waiting_seconds=60)
    ago = timezone.now() - timedelta(minutes=10)
    EntryFactory(queue=emails, enqueued_at=ago, run_at=ago)

    by_name = {queue["name"]: queue for queue in viewer.get(url("queue-list")).json()["queues"]}

    assert by_name["default"]["invariant_holds"] is False
    assert by_name["default"]["locked_by_dead_workers"] == 1
    assert by_name["default"]["counts"]["computing"] == 0
    assert by_name["emails"]["alert_waiting_seconds"] == 60
    assert by_name["emails"]["alarm"]["reason"] == "no_live_worker"
    assert by_name["emails"]["alarm"]["waiting_seconds"] >= 600


def test_pause_then_resume_a_queue_and_log_each_change(operator: Api) -> None:
    QueueFactory(name="emails")

    paused = operator.post(url("queue-pause", "emails"), {})
    again = operator.post(url("queue-pause", "emails"), {})
    assert Queue.objects.get(name="emails").is_paused
    resumed = operator.post(url("queue-resume", "emails"), {})

    assert paused.json() == {
        "queue": "emails",
        "is_paused": True,
        "changed": True,
        "message": "Paused 1 queue: emails.",
    }
    assert again.json() == {
        "queue": "emails",
        "is_paused": True,
        "changed": False,
        "message": "Paused 0 queues. Skipped 1, already paused: emails.",
    }
    assert resumed.json() == {
        "queue": "emails",
        "is_paused": False,
        "changed": True,
        "message": "Resumed 1 queue: emails.",
    }
    assert list(OperatorAction.objects.order_by("pk").values_list("door", "action", "done")) == [
        ("api", "pause", 1),
        ("api", "pause", 0),
        ("api", "resume", 1),
    ]
    assert not Queue.objects.get(name="emails").is_paused
    assert list(LogEntry.objects.order_by("pk").values_list("change_message", "object_repr")) == [
        ("Paused through the django_iq API.", "emails"),
        ("Resumed through the django_iq API.", "emails"),
    ]


@pytest.mark.parametrize("action", ["queue-pause", "queue-resume"])
def test_pausing_an_unknown_queue_is_a_404(operator: Api, action: str) -> None:
    response = operator.post(url(action, "nope"), {})

    assert response.status_code == 404
    assert response.json() == {"error": "Queue 'nope' does not exist."}


def test_a_queue_name_with_a_slash_can_be_paused(operator: Api) -> None:
    QueueFactory(name="tenant/a")

    response = operator.post(url("queue-pause", "tenant/a"), {})

    assert response.json()["changed"] is True and response.json()["queue"] == "tenant/a"


# -- jobs: disable and enable -----------------------------------------------------------------


def test_disable_then_enable_a_job_through_the_api_with_an_audit_record_each() -> None:
    api = Api(make_user("ops", perms=("change_entry",)))  # change_entry alone is enough
    waiting = EntryFactory(job_name=JOB)

    disabled = api.post(url("job-disable", JOB), {})
    again = api.post(url("job-disable", JOB), {})
    assert Entry.objects.get(pk=waiting.pk).state == EntryState.DISABLED
    enabled = api.post(url("job-enable", JOB), {})
    enabled_again = api.post(url("job-enable", JOB), {})

    assert disabled.json() == {
        "job": JOB,
        "is_disabled": True,
        "changed": True,
        "message": f"Disabled 1 job: {JOB} (1 entry).",
    }
    assert again.json() == {
        "job": JOB,
        "is_disabled": True,
        "changed": False,
        "message": f"Disabled 0 jobs. Skipped 1, already disabled: {JOB} (0 entries).",
    }
    assert enabled.json() == {
        "job": JOB,
        "is_disabled": False,
        "changed": True,
        "message": f"Enabled 1 job: {JOB} (1 entry).",
    }
    assert enabled_again.json()["changed"] is False
    assert Entry.objects.get(pk=waiting.pk).state == EntryState.PENDING
    assert not DisabledJob.objects.exists()
    assert list(LogEntry.objects.order_by("pk").values_list("change_message", "object_repr")) == [
        ("Disabled through the django_iq API.", f"{JOB} (disabled)"),
        ("Enabled through the django_iq API.", f"{JOB} (disabled)"),
    ]
    assert list(
        OperatorAction.objects.order_by("pk").values_list("door", "actor", "action", "done")
    ) == [
        ("api", "ops", "disable", 1),
        ("api", "ops", "disable", 0),
        ("api", "ops", "enable", 1),
        ("api", "ops", "enable", 0),
    ]


@pytest.mark.parametrize("action", ["job-disable", "job-enable"])
def test_an_unknown_job_is_a_404_naming_the_close_registered_one(
    operator: Api, action: str
) -> None:
    response = operator.post(url(action, "tests.testapp.jobs.recrd"), {})

    assert response.status_code == 404
    error = response.json()["error"]
    assert error.startswith("'tests.testapp.jobs.recrd' is not a registered job."), error
    assert f"Did you mean '{JOB}'?" in error
    assert not DisabledJob.objects.exists() and not OperatorAction.objects.exists()


def test_a_job_gone_from_the_code_but_still_disabled_can_be_enabled(operator: Api) -> None:
    DisabledJob.objects.create(job_name="shop.jobs.removed")

    refused = operator.post(url("job-disable", "shop.jobs.gone"), {})
    enabled = operator.post(url("job-enable", "shop.jobs.removed"), {})

    assert refused.status_code == 404
    assert enabled.status_code == 200 and enabled.json()["changed"] is True
    assert not DisabledJob.objects.exists()


# -- metrics, routed next to the API ----------------------------------------------------------


def test_the_metrics_route_serves_the_prometheus_view(viewer: Api) -> None:
    EntryFactory()

    response = viewer.client.get(reverse("django_iq:metrics"))

    assert response.status_code == 200
    assert b'django_iq_queue_entries{queue="default",state="pending"} 1.0' in response.content
