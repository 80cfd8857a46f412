"""The permission matrix of docs/security.md is the truth: each of its cells is one request to
the real view by that caller, and its answer must be what the table says. The table is read
from the page, so that the docs and the code cannot say different things."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

from django_iq.api.endpoint import Endpoint
from django_iq.api.urls import urlpatterns
from django_iq.models import ApiToken, DisabledJob, Entry, Queue
from tests.factories import EntryErrorFactory, EntryFactory, QueueFactory
from tests.testapp.jobs import record

pytestmark = pytest.mark.django_db

PAGE = Path(__file__).resolve().parents[2] / "docs" / "security.md"
CALLERS = (
    "anonymous",
    "staff",
    "staff + view",
    "staff + action",
    "superuser",
    "token + perms",
    "token, no perms",
    "revoked token",
)
ACTIONS = ("cancel_entry", "requeue_entryerror", "pause_queue")


@dataclass(frozen=True)
class Row:
    method: str
    path: str
    action: str | None
    needs: str
    answers: dict[str, str]


def read_matrix() -> list[Row]:
    """The rows of the table between the permission-matrix markers of docs/security.md."""
    text = PAGE.read_text()
    table = text.split("<!-- permission-matrix -->")[1].split("<!-- /permission-matrix -->")[0]
    lines = [line for line in table.strip().splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    assert header == ["Door", "Needs", *CALLERS], "the table's columns changed: update CALLERS"
    rows = []
    for line in lines[2:]:
        door, needs, *answers = (cell.strip() for cell in line.strip("|").split("|"))
        method, path, *extra = door.strip("`").split()
        action = extra[0].removeprefix("action=") if extra else None
        rows.append(Row(method, path, action, needs, dict(zip(CALLERS, answers, strict=True))))
    return rows


MATRIX = read_matrix()


def staff_user(name: str, *, views: bool = False, actions: bool = False) -> User:
    """An active staff user holding every django_iq ``view_`` permission and/or ``ACTIONS``."""
    user = User.objects.create_user(name, is_staff=True)
    ours = Permission.objects.filter(content_type__app_label="django_iq")
    if views:
        user.user_permissions.add(*ours.filter(codename__startswith="view_"))
    if actions:
        user.user_permissions.add(*ours.filter(codename__in=ACTIONS))
    return user


def caller(kind: str) -> tuple[Client, dict[str, str]]:
    """A client acting as ``kind``, and the headers it sends with each request."""
    client = Client(enforce_csrf_checks=True)
    headers: dict[str, str] = {}
    if kind in ("token + perms", "token, no perms", "revoked token"):
        with_perms = kind != "token, no perms"
        owner = staff_user("robot", views=with_perms, actions=with_perms)
        row, token = ApiToken.objects.issue(owner, "ci")
        if kind == "revoked token":
            ApiToken.objects.revoke([row.pk])
        headers["Authorization"] = f"Bearer {token}"
    elif kind != "anonymous":
        user = {
            "staff": lambda: staff_user("staff"),
            "staff + view": lambda: staff_user("viewer", views=True),
            "staff + action": lambda: staff_user("actor", actions=True),
            "superuser": lambda: User.objects.create_superuser("root"),
        }[kind]()
        client.force_login(user)
    # Session callers send their CSRF token, so that the answer is about permissions. Any GET
    # of the API without a token sets the cookie, whoever asks.
    client.get(reverse("django_iq:api:openapi"))
    headers["X-CSRFToken"] = client.cookies["csrftoken"].value
    return client, headers


def request(row: Row, client: Client, headers: dict[str, str], ids: dict[str, Any]) -> Any:
    path = row.path.format(**ids)
    if row.action is not None:
        data = {"action": row.action, "index": "0", "_selected_action": [ids["id"]]}
        return client.post(path, data, headers=headers)
    if row.method == "POST":
        body = {"ids": [ids["error_id"] if "requeue" in path else ids["id"]]}
        body = {} if "/queues/" in path or "/jobs/" in path else body
        return client.post(path, body, content_type="application/json", headers=headers)
    return client.generic(row.method, path, headers=headers)


@pytest.mark.parametrize(
    ("row", "kind"),
    [(row, kind) for row in MATRIX for kind in CALLERS],
    ids=[
        f"{row.method} {row.path} {row.action or ''}| {kind}" for row in MATRIX for kind in CALLERS
    ],
)
def test_each_door_answers_each_caller_as_the_security_page_says(row: Row, kind: str) -> None:
    queue = QueueFactory(name="default", is_paused=row.path.endswith("/resume/"))
    entry = EntryFactory(queue=queue)
    error = EntryErrorFactory(queue=queue)
    ids = {"id": entry.pk, "error_id": error.pk, "name": "default"}
    if row.path.startswith("/iq/api/jobs/{name}/"):
        ids["name"] = record.name
        if row.path.endswith("/enable/"):
            DisabledJob.objects.create(job_name=record.name)
    if "/errors/{id}/" in row.path:
        ids["id"] = error.pk
    client, headers = caller(kind)

    response = request(row, client, headers, ids)

    expected = row.answers[kind]
    where = f"{row.method} {row.path} as {kind}: got {response.status_code}"
    if expected == "login":
        assert response.status_code == 302, where
        assert response["Location"].startswith(reverse("admin:login")), where
    elif expected == "done":
        assert response.status_code == 302, where
        assert not Entry.objects.filter(pk=entry.pk).exists(), where
    elif expected == "not offered":
        assert response.status_code == 200, where  # the list again, without an action bar
        assert Entry.objects.filter(pk=entry.pk).exists(), where
    elif expected == "public":
        assert response.status_code in (200, 503), where
        assert set(response.json()) <= {"status", "reasons"}, where
    else:
        assert response.status_code == int(expected), where
        if response.status_code == 401:
            assert response["WWW-Authenticate"].startswith("Bearer"), where
    if row.method == "POST" and row.path.startswith("/iq/api/queues/") and expected != "200":
        assert Queue.objects.get(name="default").is_paused is row.path.endswith("/resume/")
    if row.method == "POST" and row.path.startswith("/iq/api/jobs/") and expected != "200":
        disabled = DisabledJob.objects.filter(job_name=record.name).exists()
        assert disabled is row.path.endswith("/enable/"), where


def test_the_matrix_names_every_api_route_and_the_permissions_each_needs() -> None:
    documented = {(row.method, row.path): row.needs for row in MATRIX}
    for pattern in urlpatterns:
        if pattern.name is None:  # the same route without its trailing slash
            continue
        route = re.sub(r"<int:\w+>", "{id}", str(pattern.pattern)).replace("<path:name>", "{name}")
        path = "/iq/api/" + route
        endpoint = pattern.callback
        assert isinstance(endpoint, Endpoint)
        for method, needed in endpoint.methods.items():
            if method == "HEAD":
                continue
            assert (method, path) in documented, f"add {method} {path} to docs/security.md"
            named = re.findall(r"`(\w+)`", documented[(method, path)])
            assert named == [perm.removeprefix("django_iq.") for perm in needed], (method, path)


READS = [row for row in MATRIX if row.method == "GET" and re.search(r"`view_", row.needs)]


def get_as(row: Row, codenames: list[str]) -> int:
    user = User.objects.create_user(f"user{User.objects.count()}", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="django_iq", codename__in=codenames)
    )
    client = Client()
    client.force_login(user)
    row_id = (EntryErrorFactory() if "/errors/" in row.path else EntryFactory()).pk
    status: int = client.get(row.path.format(id=row_id)).status_code
    return status


@pytest.mark.parametrize("row", READS, ids=[row.path for row in READS])
def test_each_read_needs_exactly_the_permissions_the_table_names(row: Row) -> None:
    needed = re.findall(r"`(\w+)`", row.needs)
    views = list(
        Permission.objects.filter(
            content_type__app_label="django_iq", codename__startswith="view_"
        ).values_list("codename", flat=True)
    )

    assert get_as(row, needed) == 200
    for lacking in needed:
        assert get_as(row, [v for v in views if v != lacking]) == 403, f"without {lacking}"
    # The change permission of a model lets its rows be seen, as in the admin.
    assert get_as(row, [n.replace("view_", "change_") for n in needed]) == 200
