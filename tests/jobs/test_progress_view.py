"""The progress recipe of docs/howto/progress.md, driven through Django's test client: a
signed-in user polls the state and progress of an export of their own; another user's export
is not found, and an anonymous request is sent to sign in. Its view, ``export_progress`` in
tests/testapp/views.py, is the code the page shows. While a worker runs it:
tests/concurrency/test_progress_processes.py."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from django_iq.testing import run_jobs
from tests.testapp import views
from tests.testapp.jobs import export_rows
from tests.testapp.models import Export

pytestmark = pytest.mark.django_db

PAGE = Path(__file__).resolve().parents[2] / "docs" / "howto" / "progress.md"


def start_export(owner: User, rows: int, stop_after: int | None = None) -> Export:
    export = Export.objects.create(owner=owner)
    export.entry_id = export_rows.enqueue(export.pk, rows, stop_after=stop_after).pk
    export.save()
    return export


def poll(client: Client, export: Export) -> tuple[int, dict[str, object] | None]:
    response = client.get(reverse("export-progress", args=[export.pk]))
    is_json = response.headers.get("Content-Type") == "application/json"
    return response.status_code, response.json() if is_json else None


@pytest.fixture
def owner(client: Client) -> User:
    user = User.objects.create_user("ada", password="-")
    client.force_login(user)
    return user


def test_the_owner_sees_a_waiting_export_without_progress(client: Client, owner: User) -> None:
    export = start_export(owner, rows=4)

    assert poll(client, export) == (200, {"state": "waiting", "progress": None})


def test_the_owner_sees_the_last_progress_reported(client: Client, owner: User) -> None:
    export = start_export(owner, rows=4, stop_after=2)
    run_jobs()

    status, body = poll(client, export)

    assert status == 200 and body is not None
    assert body["state"] == "waiting", "its attempt failed; it waits for its retry"
    progress = body["progress"]
    assert isinstance(progress, dict)
    assert (progress["done"], progress["total"], progress["percent"]) == (2.0, 4.0, 50.0)
    assert progress["note"] == f"export {export.pk}: row 2"


def test_the_owner_sees_how_a_finished_export_ended(client: Client, owner: User) -> None:
    export = start_export(owner, rows=3)
    run_jobs()

    assert poll(client, export) == (200, {"state": "succeeded", "progress": None})


def test_another_users_export_is_not_found(client: Client, owner: User) -> None:
    theirs = start_export(User.objects.create_user("bob", password="-"), rows=4, stop_after=2)
    run_jobs()

    status, _ = poll(client, theirs)

    assert status == 404


def test_an_anonymous_request_is_sent_to_sign_in(client: Client) -> None:
    export = start_export(User.objects.create_user("cy", password="-"), rows=4)

    response = client.get(reverse("export-progress", args=[export.pk]))

    assert response.status_code == 302
    assert response.headers["Location"].startswith("/accounts/login/?next=")


def test_the_page_shows_the_view_these_tests_drive() -> None:
    page = PAGE.read_text()
    for function in (views.export_progress, views.entry_state):
        source = inspect.getsource(function)
        assert source in page, (
            f"docs/howto/progress.md must show {function.__name__} as written in "
            "tests/testapp/views.py: copy it there again"
        )
