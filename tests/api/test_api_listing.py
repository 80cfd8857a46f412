"""The API's listings: every filter of entries and error records, bad filters answered 400 with
what was expected, counts, cursor pagination over 10,000 entries and NDJSON streaming."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from django.db import connection
from django.http import StreamingHttpResponse
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_iq import enqueue_many
from django_iq.api import pagination
from django_iq.api.pagination import STREAM_BATCH_SIZE, encode_cursor
from django_iq.models import Entry
from tests.api.test_api import VIEWS, Api, make_user, url
from tests.factories import EntryErrorFactory, EntryFactory, QueueFactory
from tests.testapp.jobs import flaky, record

pytestmark = pytest.mark.django_db

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def staff() -> Api:
    """A staff user with the view permissions of the API's reads."""
    return Api(make_user("staff", perms=VIEWS))


@pytest.fixture
def catalogue() -> dict[str, int]:
    """Entries of every kind, by name -> id."""
    emails = QueueFactory(name="emails")
    rows = {
        "waiting": EntryFactory(enqueued_at=T0, priority=0),
        "urgent": EntryFactory(enqueued_at=T0 + timedelta(hours=1), priority=90),
        "running": EntryFactory(enqueued_at=T0 + timedelta(hours=2), locked=True),
        "deferred": EntryFactory(enqueued_at=T0 + timedelta(hours=3), deferred=True),
        "disabled": EntryFactory(enqueued_at=T0 + timedelta(hours=4), disabled=True),
        "mail": EntryFactory(
            queue=emails,
            job_name=flaky.name,
            enqueued_at=T0 + timedelta(hours=5),
            priority=-50,
            group_key="customer:9",
        ),
    }
    return {name: entry.pk for name, entry in rows.items()}


def listed(api: Api, **params: Any) -> list[int]:
    response = api.get(url("entry-list"), **params)
    assert response.status_code == 200, response.content
    return [row["id"] for row in response.json()["results"]]


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({}, ["waiting", "urgent", "running", "deferred", "disabled", "mail"]),
        ({"queue": "emails"}, ["mail"]),
        ({"queue": "default"}, ["waiting", "urgent", "running", "deferred", "disabled"]),
        ({"job": "tests.testapp.jobs.flaky"}, ["mail"]),
        ({"state": "pending"}, ["waiting", "urgent", "running", "mail"]),
        ({"state": "computing"}, ["running"]),
        ({"state": "awaiting_compute"}, ["waiting", "urgent", "mail"]),
        ({"state": "initial"}, ["deferred"]),
        ({"state": "disabled"}, ["disabled"]),
        ({"group_key": "customer:9"}, ["mail"]),
        ({"enqueued_after": "2025-03-01T14:00:00Z"}, ["running", "deferred", "disabled", "mail"]),
        ({"enqueued_before": "2025-03-01T14:00:00+00:00"}, ["waiting", "urgent"]),
        (
            {
                "enqueued_after": "2025-03-01T14:30:00+02:00",
                "enqueued_before": "2025-03-01T13:00:01Z",
            },
            ["urgent"],
        ),
        ({"priority_min": "1"}, ["urgent"]),
        ({"priority_max": "-1"}, ["mail"]),
        (
            {"priority_min": "-50", "priority_max": "0", "state": "awaiting_compute"},
            ["waiting", "mail"],
        ),
        ({"queue": "emails", "state": "computing"}, []),
    ],
)
def test_entries_are_listed_by_id_matching_every_filter_given(
    staff: Api, catalogue: dict[str, int], params: dict[str, str], expected: list[str]
) -> None:
    assert listed(staff, **params) == [catalogue[name] for name in expected]


def test_entries_waiting_for_their_parents_are_listed_and_counted_as_blocked(
    staff: Api, catalogue: dict[str, int]
) -> None:
    blocked = EntryFactory(state="blocked")

    counted = staff.get(url("entry-count"), state="blocked")

    assert listed(staff, state="blocked") == [blocked.pk]
    assert counted.json() == {"count": 1, "estimated": False}


@pytest.mark.parametrize(
    ("params", "count"),
    [({}, 6), ({"state": "awaiting_compute"}, 3), ({"queue": "emails", "priority_max": "-50"}, 1)],
)
def test_count_counts_the_entries_matching_the_filters_exactly(
    staff: Api, catalogue: dict[str, int], params: dict[str, str], count: int
) -> None:
    response = staff.get(url("entry-count"), **params)

    assert response.json() == {"count": count, "estimated": False}


def test_a_listed_entry_has_its_summary_without_lock_or_attempts(
    staff: Api, catalogue: dict[str, int]
) -> None:
    (row,) = staff.get(url("entry-list"), state="computing").json()["results"]

    assert row["id"] == catalogue["running"]
    assert (row["state"], row["inferred_state"]) == ("pending", "computing")
    assert set(row) == {
        "id", "queue", "job", "args", "kwargs", "priority", "state", "inferred_state",
        "attempts", "max_attempts", "run_at", "enqueued_at", "expires_at", "group_key",
    }  # fmt: skip


@pytest.mark.parametrize(
    ("params", "parameter", "message"),
    [
        (
            {"state": "started"},
            "state",
            "Invalid value 'started' for 'state': expected one of initial, pending, disabled, "
            "blocked, computing, running, awaiting_compute.",
        ),
        ({"state": "failed"}, "state", "list them with /errors/?final=true&requeued=false"),
        (
            {"priority_min": "high"},
            "priority_min",
            "Invalid value 'high' for 'priority_min': expected an integer from -100 to 100.",
        ),
        ({"priority_max": "101"}, "priority_max", "expected an integer from -100 to 100"),
        (
            {"enqueued_after": "yesterday"},
            "enqueued_after",
            "Invalid value 'yesterday' for 'enqueued_after': expected an ISO 8601 datetime with a "
            "timezone, e.g. 2025-01-31T09:30:00Z.",
        ),
        (
            {"enqueued_after": "2025-03-01T14:00:00 02:00"},
            "enqueued_after",
            "a '+' in a query string reads as a space: write it %2B, or use Z",
        ),
        (
            {"enqueued_before": "2025-03-01T14:00:00"},
            "enqueued_before",
            "expected an ISO 8601 datetime with a timezone offset",
        ),
        (
            {"queue": "emials"},
            "queue",
            "expected the name of an existing queue (did you mean 'emails'?)",
        ),
        ({"job": ""}, "job", "Invalid value '' for 'job': expected a job name."),
        (
            {"limit": "0"},
            "limit",
            "Invalid value '0' for 'limit': expected an integer from 1 to 1000.",
        ),
        ({"limit": "1001"}, "limit", "expected an integer from 1 to 1000"),
        (
            {"cursor": "not-a-cursor"},
            "cursor",
            "expected a cursor taken from a previous page's next link",
        ),
        ({"format": "xml"}, "format", "Invalid value 'xml' for 'format': expected json or ndjson."),
        ({"staus": "pending"}, "staus", "Unknown query parameter 'staus'. Did you mean 'state'?"),
        (
            {"priority_min": "10", "priority_max": "-10"},
            "priority_min",
            "priority_min (10) is greater than priority_max (-10): nothing could match.",
        ),
        (
            {"format": "ndjson", "limit": "10"},
            "limit",
            "expected nothing: format=ndjson streams every matching row, so leave it out",
        ),
    ],
)
def test_a_bad_filter_is_a_400_naming_the_parameter_the_value_and_what_is_expected(
    staff: Api, catalogue: dict[str, int], params: dict[str, str], parameter: str, message: str
) -> None:
    response = staff.get(url("entry-list"), **params)

    assert response.status_code == 400
    body = response.json()
    assert message in body["error"]
    assert body["parameter"] == parameter


def test_a_repeated_parameter_is_a_400(staff: Api) -> None:
    response = staff.client.get(f"{url('entry-list')}?state=pending&state=initial")

    assert response.status_code == 400
    assert response.json()["error"] == "Parameter 'state' was given 2 times; give it once."


def test_count_refuses_pagination_parameters(staff: Api) -> None:
    response = staff.get(url("entry-count"), limit="10")

    assert response.status_code == 400
    assert response.json()["parameter"] == "limit"


def test_pages_hold_100_entries_by_default_and_next_keeps_the_filters(staff: Api) -> None:
    enqueue_many(record, [((f"t{n}",), {}) for n in range(150)])
    EntryFactory(queue=QueueFactory(name="emails"))

    first = staff.get(url("entry-list"), queue="default").json()
    next_url = urlsplit(first["next"])
    second = staff.client.get(f"{next_url.path}?{next_url.query}").json()

    assert len(first["results"]) == 100
    assert next_url.netloc == "testserver"
    assert parse_qs(next_url.query)["queue"] == ["default"]
    assert len(second["results"]) == 50
    assert second["next"] is None


def test_pagination_returns_each_of_10_000_entries_once_in_a_constant_number_of_queries(
    staff: Api,
) -> None:
    created = enqueue_many(record, [((f"t{n}",), {}) for n in range(10_000)])
    seen: list[int] = []
    queries: list[int] = []
    path = f"{url('entry-list')}?limit=1000&state=awaiting_compute"
    while path:
        with CaptureQueriesContext(connection) as captured:
            response = staff.client.get(path)
        body = response.json()
        seen.extend(row["id"] for row in body["results"])
        queries.append(len(captured))
        path = body["next"]

    assert sorted(seen) == sorted(entry.pk for entry in created)
    assert len(seen) == len(set(seen)) == 10_000
    assert seen == sorted(seen), "pages must come in id order"
    assert len(queries) == 10
    # The session, the user, the user's and its groups' permissions (the view permission
    # check), then the page's ids with their sizes and its rows, whatever the page.
    assert set(queries) == {6}, f"queries per page: {queries}"


def test_a_cursor_continues_after_its_id_even_when_that_entry_is_gone(staff: Api) -> None:
    entries = [EntryFactory() for _ in range(3)]
    cursor = encode_cursor(entries[0].pk)
    Entry.objects.cancel([entries[0].pk])

    assert listed(staff, cursor=cursor) == [entries[1].pk, entries[2].pk]


def test_ndjson_streams_every_matching_entry_one_object_a_line_in_bounded_batches(
    staff: Api,
) -> None:
    total = STREAM_BATCH_SIZE * 2 + 500
    created = enqueue_many(record, [((f"t{n}",), {}) for n in range(total)])
    EntryFactory(disabled=True)

    response = staff.get(url("entry-list"), format="ndjson", state="awaiting_compute")
    assert isinstance(response, StreamingHttpResponse)
    assert response["Content-Type"] == "application/x-ndjson"
    with CaptureQueriesContext(connection) as captured:
        lines = b"".join(response.streaming_content).decode().splitlines()

    rows = [json.loads(line) for line in lines]
    assert [row["id"] for row in rows] == sorted(entry.pk for entry in created)
    assert {row["inferred_state"] for row in rows} == {"awaiting_compute"}
    assert len(captured) == 6, "ids, then rows, per batch of STREAM_BATCH_SIZE rows"


def test_a_page_of_large_rows_ends_at_its_size_bound_and_next_goes_on_after_it(
    staff: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pagination, "PAGE_MAX_BYTES", 100_000)
    monkeypatch.setattr(pagination, "BATCH_MAX_BYTES", 40_000)
    created = enqueue_many(record, [((f"{n}" * 30_000,), {}) for n in range(10)])
    small = enqueue_many(record, [(("small",), {}) for _ in range(5)])
    seen: list[list[int]] = []
    sizes: list[int] = []
    reads: list[int] = []
    path = f"{url('entry-list')}?limit=1000"
    while path:
        with CaptureQueriesContext(connection) as captured:
            response = staff.client.get(path)
        seen.append([row["id"] for row in response.json()["results"]])
        sizes.append(len(response.content))
        reads.append(
            sum(
                "django_iq_entry" in query["sql"] and " IN (" in query["sql"]
                for query in captured.captured_queries
            )
        )
        path = response.json()["next"]

    # Three rows of 30,000 characters fit 100,000; the fourth starts the next page. The last
    # page holds the last large row and the small ones.
    assert [len(page) for page in seen] == [3, 3, 3, 6]
    assert [pk for page in seen for pk in page] == [entry.pk for entry in created + small]
    assert max(sizes) < 100_000 + 5_000
    # Rows are read a batch of at most 40,000 characters at a time: one large row a query (the
    # last one with the small rows).
    assert reads == [3, 3, 3, 1]


def test_ndjson_reads_large_rows_in_batches_of_bounded_size(
    staff: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pagination, "BATCH_MAX_BYTES", 40_000)
    created = enqueue_many(record, [(("x" * 30_000,), {}) for _ in range(4)])

    response = staff.get(url("entry-list"), format="ndjson")
    with CaptureQueriesContext(connection) as captured:
        lines = b"".join(response.streaming_content).decode().splitlines()

    assert [json.loads(line)["id"] for line in lines] == [entry.pk for entry in created]
    assert len(captured) == 1 + 4, "the ids, then one query per large row"


def test_ndjson_of_nothing_is_an_empty_body(staff: Api) -> None:
    response = staff.get(url("entry-list"), format="ndjson")

    assert b"".join(response.streaming_content) == b""


# -- error records ----------------------------------------------------------------------------


@pytest.fixture
def failures() -> dict[str, int]:
    emails = QueueFactory(name="emails")
    rows = {
        "failed": EntryErrorFactory(entry_id=1),
        "retried": EntryErrorFactory(entry_id=2, is_final=False, exception_class="shop.Timeout"),
        "requeued": EntryErrorFactory(entry_id=3, requeued_at=timezone.now()),
        "mail": EntryErrorFactory(entry_id=4, queue=emails, job_name=flaky.name),
    }
    return {name: error.pk for name, error in rows.items()}


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({}, ["failed", "retried", "requeued", "mail"]),
        ({"final": "true", "requeued": "false"}, ["failed", "mail"]),
        ({"final": "false"}, ["retried"]),
        ({"requeued": "true"}, ["requeued"]),
        ({"exception_class": "shop.Timeout"}, ["retried"]),
        ({"queue": "emails"}, ["mail"]),
        ({"job": "tests.testapp.jobs.flaky"}, ["mail"]),
        ({"entry_id": "3"}, ["requeued"]),
    ],
)
def test_error_records_are_listed_by_id_matching_the_filters(
    staff: Api, failures: dict[str, int], params: dict[str, str], expected: list[str]
) -> None:
    body = staff.get(url("error-list"), **params).json()

    assert [row["id"] for row in body["results"]] == [failures[name] for name in expected]
    assert all("traceback" not in row for row in body["results"])


def test_error_records_page_with_a_cursor_and_stream_as_ndjson(
    staff: Api, failures: dict[str, int]
) -> None:
    first = staff.get(url("error-list"), limit="3").json()
    rest = staff.client.get(first["next"]).json()
    streamed = staff.get(url("error-list"), format="ndjson", final="true")

    ids = [row["id"] for row in first["results"] + rest["results"]]
    assert ids == sorted(failures.values())
    assert rest["next"] is None
    lines = b"".join(streamed.streaming_content).decode().splitlines()
    assert [json.loads(line)["id"] for line in lines] == [
        failures["failed"], failures["requeued"], failures["mail"]
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"final": "yes"}, "Invalid value 'yes' for 'final': expected true or false."),
        ({"entry_id": "-1"}, "Invalid value '-1' for 'entry_id': expected a positive integer id."),
        ({"state": "pending"}, "Unknown query parameter 'state'."),
    ],
)
def test_a_bad_error_filter_is_a_400(staff: Api, params: dict[str, str], message: str) -> None:
    response = staff.get(url("error-list"), **params)

    assert response.status_code == 400
    assert message in response.json()["error"]
