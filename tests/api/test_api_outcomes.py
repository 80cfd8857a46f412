"""The API's listing of outcome records: what runs left, filtered, for whoever may view them in
the admin."""

from __future__ import annotations

import pytest

from django_iq.managers.outcome_records import NOT_KEPT_KEY
from django_iq.models import RunOutcome
from django_iq.worker import WorkerProcess
from tests.api.test_api import Api, make_user, url
from tests.conftest import iq_settings_with
from tests.factories import RunOutcomeFactory
from tests.testapp.jobs import always_fails, record, returns


@pytest.fixture
def viewer() -> Api:
    return Api(make_user("viewer", perms=("view_runoutcome",)))


@pytest.mark.django_db(transaction=True)
@iq_settings_with(OUTCOME_MAX_RETURN_BYTES=50)
def test_the_runs_of_a_worker_are_listed_with_their_outcomes(viewer: Api) -> None:
    done = record.enqueue("listed")
    failed = always_fails.enqueue("boom")
    large = returns.enqueue("y" * 100)
    worker = WorkerProcess(burst=True, processing_threads=1)
    assert worker.run(install_signal_handlers=False) == 0

    listing = viewer.get(url("outcome-list"))

    assert listing.status_code == 200
    rows = listing.json()["results"]
    assert [row["id"] for row in rows] == sorted(RunOutcome.objects.values_list("pk", flat=True))
    by_entry: dict[int, list[dict]] = {}
    for row in rows:
        by_entry.setdefault(row["entry_id"], []).append(row)
    (success,) = by_entry[done.pk]
    assert success["status"] == "succeeded" and success["return_value"] == "listed"
    assert success["job"] == record.name and success["args"] == ["listed"]
    assert success["worker"] == worker.name and success["duration_seconds"] >= 0
    assert [row["attempt"] for row in by_entry[failed.pk]] == [1, 2]
    assert {row["exception_class"] for row in by_entry[failed.pk]} == {"builtins.ValueError"}
    assert "ValueError: boom" in by_entry[failed.pk][-1]["traceback"]
    (capped,) = by_entry[large.pk]
    assert capped["return_value"][NOT_KEPT_KEY].startswith("102 bytes of JSON")


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"status": "failed"}, ["failed"]),
        ({"queue": "emails"}, ["failed"]),
        ({"job": "tests.testapp.tasks.add"}, ["task"]),
        ({"entry_id": "11"}, ["done"]),
        ({"result_id": "b" * 32}, ["task"]),
        ({"status": "timed_out"}, []),
    ],
)
def test_filters_select_the_records(
    viewer: Api, params: dict[str, str], expected: list[str]
) -> None:
    rows = {
        "done": RunOutcomeFactory(entry_id=11),
        "failed": RunOutcomeFactory(entry_id=12, status="failed", queue="emails"),
        "task": RunOutcomeFactory(
            entry_id=13, job_name="tests.testapp.tasks.add", result_id="b" * 32
        ),
    }

    response = viewer.get(url("outcome-list"), **params)

    assert response.status_code == 200
    assert [row["id"] for row in response.json()["results"]] == [rows[n].pk for n in expected]


@pytest.mark.django_db
@pytest.mark.parametrize(("name", "value"), [("status", "done"), ("entry_id", "x"), ("q", "1")])
def test_a_bad_filter_is_refused_with_400(viewer: Api, name: str, value: str) -> None:
    response = viewer.get(url("outcome-list"), **{name: value})

    assert response.status_code == 400
    assert response.json()["parameter"] == name


@pytest.mark.django_db
def test_staff_without_the_view_permission_are_refused(viewer: Api) -> None:
    RunOutcomeFactory()
    staff = Api(make_user("staff"))

    response = staff.get(url("outcome-list"))

    assert response.status_code == 403
    assert "django_iq.view_runoutcome" in response.json()["error"]
    assert len(viewer.get(url("outcome-list")).json()["results"]) == 1
