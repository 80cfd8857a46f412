"""The read-only admin of outcome records: filtered by job, status and queue, searched by a
Tasks result id or an entry id, seen by whoever may view them and changed by nobody."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from django_iq.models import RunOutcome
from tests.admin.conftest import changelist_url, column, listed_ids, login, login_superuser
from tests.factories import RunOutcomeFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def outcomes() -> dict[str, RunOutcome]:
    return {
        "done": RunOutcomeFactory(entry_id=11, status="succeeded", return_value={"n": 1}),
        "failed": RunOutcomeFactory(
            entry_id=12,
            status="failed",
            queue="emails",
            exception_class="builtins.ValueError",
            traceback="Traceback ...\nValueError: boom",
        ),
        "task": RunOutcomeFactory(
            entry_id=13, job_name="tests.testapp.tasks.add", result_id="a" * 32
        ),
        "slow": RunOutcomeFactory(entry_id=14, status="timed_out"),
    }


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"status": "failed"}, ["failed"]),
        ({"status": "timed_out"}, ["slow"]),
        ({"queue": "emails"}, ["failed"]),
        ({"job": "tests.testapp.tasks.add"}, ["task"]),
        ({"q": "a" * 32}, ["task"]),
        ({"q": "12"}, ["failed"]),
        ({"q": "no such id"}, []),
    ],
)
def test_filters_and_search_find_the_records(
    client: Client, outcomes: dict[str, RunOutcome], params: dict[str, str], expected: list[str]
) -> None:
    login_superuser(client)

    response = client.get(changelist_url(RunOutcome), params)

    assert response.status_code == 200
    assert sorted(listed_ids(response)) == sorted(outcomes[name].pk for name in expected)


def test_the_list_shows_newest_first_with_status_and_worker(
    client: Client, outcomes: dict[str, RunOutcome]
) -> None:
    login_superuser(client)

    response = client.get(changelist_url(RunOutcome))

    assert listed_ids(response) == sorted((o.pk for o in outcomes.values()), reverse=True)
    assert column(response, "status") == ["timed out", "succeeded", "failed", "succeeded"]


def test_the_view_permission_shows_the_records_and_allows_no_change(
    client: Client, outcomes: dict[str, RunOutcome]
) -> None:
    login(client, "view_runoutcome")
    failed = outcomes["failed"]

    listing = client.get(changelist_url(RunOutcome))
    page = client.get(f"/admin/django_iq/runoutcome/{failed.pk}/change/")
    posted = client.post(f"/admin/django_iq/runoutcome/{failed.pk}/change/", {"status": "x"})

    assert listing.status_code == 200 and page.status_code == 200
    assert b"ValueError: boom" in page.content
    assert posted.status_code == 403
    assert RunOutcome.objects.get(pk=failed.pk).status == "failed"


def test_without_the_view_permission_the_records_are_hidden(client: Client) -> None:
    login(client)

    assert client.get(changelist_url(RunOutcome)).status_code == 403


def test_the_filters_read_no_distinct_values_of_the_records(
    client: Client, outcomes: dict[str, RunOutcome]
) -> None:
    login_superuser(client)

    with CaptureQueriesContext(connection) as queries:
        response = client.get(changelist_url(RunOutcome))

    assert response.status_code == 200
    scans = [
        q["sql"] for q in queries if "DISTINCT" in q["sql"] and "django_iq_runoutcome" in q["sql"]
    ]
    assert scans == []
