"""The API refuses what no database stores with a 400 or 404 of its own, never a 500."""

from __future__ import annotations

import json

import pytest

from django_iq.models import Entry, Queue
from tests.api.test_api import PERMISSIONS, Api, make_user, url
from tests.testapp.jobs import record

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator() -> Api:
    return Api(make_user("operator", perms=PERMISSIONS))


@pytest.mark.parametrize("route", ["entry-list", "entry-count", "error-list"])
def test_query_parameters_with_a_nul_are_a_400(operator: Api, route: str) -> None:
    # A lone surrogate cannot arrive in a query string: Django decodes bad UTF-8 as U+FFFD.
    record.enqueue("kept")
    response = operator.client.get(url(route), {"queue": "a\x00b", "job": "a\x00b"})
    assert response.status_code == 400, response.content
    assert "send text without it" in response.json()["error"]


def test_a_queue_name_with_a_nul_in_the_path_is_a_400(operator: Api) -> None:
    response = operator.post("/iq/api/queues/a%00b/pause/", {})
    assert response.status_code == 400, response.content
    assert "name in the path has a NUL" in response.json()["error"]


def test_an_id_beyond_64_bits_is_a_404(operator: Api) -> None:
    assert operator.get(url("entry", 2**70)).status_code == 404
    assert operator.get(url("error", 2**70)).status_code == 404


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('{"ids": [1], "x": "a\\u0000b"}', "has a NUL character"),
        ('{"job": "a\\udcffb"}', "lone surrogate"),
        ('{"ids": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),
        ('{"ids": ' + "[" * 20 + "]" * 20 + "}", "nested more than 8 levels"),
    ],
    ids=["NUL", "lone surrogate", "100,000 levels", "20 levels"],
)
@pytest.mark.parametrize("route", ["entry-cancel", "error-requeue"])
def test_bodies_no_database_stores_are_a_400(
    operator: Api, route: str, body: str, message: str
) -> None:
    record.enqueue("kept")
    response = operator.post(url(route), None, raw=body)
    assert response.status_code == 400, response.content
    assert message in json.loads(response.content)["error"]
    assert Entry.objects.count() == 1 and Queue.objects.count() == 1


@pytest.mark.parametrize("route", ["entry-cancel", "error-requeue"])
def test_an_integer_of_5000_digits_in_a_body_is_a_400(operator: Api, route: str) -> None:
    record.enqueue("kept")
    response = operator.post(url(route), None, raw='{"ids": [' + "9" * 5000 + "]}")
    assert response.status_code == 400, response.content
    assert "integer" in response.json()["error"]
    assert Entry.objects.count() == 1


@pytest.mark.parametrize(
    "moment",
    [
        "0001-01-01T00:00:00+01:00",
        "0001-01-01T00:00:00Z",
        "0999-12-31T23:59:59Z",
        "1000-01-01T23:59:59Z",
        "9999-12-31T23:59:59-01:00",
        "9999-12-30T00:00:01Z",
        "10000-01-01T00:00:00Z",
    ],
)
@pytest.mark.parametrize("name", ["enqueued_after", "enqueued_before"])
@pytest.mark.parametrize("route", ["entry-list", "entry-count"])
def test_a_time_filter_out_of_every_databases_range_is_a_400(
    operator: Api, route: str, name: str, moment: str
) -> None:
    record.enqueue("kept")
    response = operator.get(url(route), **{name: moment})
    assert response.status_code == 400, response.content
    assert f"for {name!r}" in response.json()["error"]


@pytest.mark.parametrize("moment", ["1000-01-02T00:00:00Z", "9999-12-30T00:00:00Z"])
def test_a_time_filter_at_the_ends_of_the_range_lists(operator: Api, moment: str) -> None:
    record.enqueue("kept")
    after = operator.get(url("entry-count"), enqueued_after=moment)
    before = operator.get(url("entry-count"), enqueued_before=moment)
    assert (after.status_code, before.status_code) == (200, 200), (after.content, before.content)
