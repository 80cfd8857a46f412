"""``django_iq.current()``: a job knows its own entry (id, attempt, queue, job, worker), its
batch, and its parents' return values (``using(after=...)``); None outside a job. Run through
``run_jobs`` here; tests/concurrency/test_processes_any_database.py reads it from a real
worker process, a coroutine job's too."""

from __future__ import annotations

import pytest

import django_iq
from django_iq.models import Entry
from django_iq.testing import run_jobs
from tests.testapp.jobs import batch_done, whoami

pytestmark = pytest.mark.django_db(transaction=True)


def test_outside_a_job_there_is_none() -> None:
    assert django_iq.current() is None


def test_a_job_knows_its_entry_its_attempt_its_queue_and_its_worker() -> None:
    entry = whoami.using(queue="emails").enqueue(fail_first=1)

    first, second = run_jobs(include_deferred=True)

    assert (first.status, second.status) == ("retrying", "succeeded")
    assert second.return_value == {
        "entry_id": entry.pk,
        "attempt": 2,
        "queue": "emails",
        "job_name": whoami.name,
        "worker": "inline",
        "batch_id": None,
        "parents": {},
    }
    assert django_iq.current() is None, "reset once the run ended"


def test_a_child_reads_its_parents_return_values_and_a_member_its_batch() -> None:
    with django_iq.batch(on_complete=batch_done) as b:
        parent = whoami.enqueue()
    failed = whoami.using(max_attempts=1).enqueue(fail_first=1)
    child = whoami.using(after=[parent, failed.pk], on_parent_failure="run").enqueue()
    assert Entry.objects.get(pk=child.pk).parent_ids == [parent.pk, failed.pk]

    outcomes = {o.entry_id: o for o in run_jobs() if o.job_name == whoami.name}

    assert outcomes[parent.pk].return_value["batch_id"] == b.id
    seen = outcomes[child.pk].return_value
    assert seen["batch_id"] is None
    assert seen["parents"] == {
        str(parent.pk): outcomes[parent.pk].return_value,
        str(failed.pk): None,  # it did not succeed
    }


def test_parents_named_by_a_row_written_by_hand_are_read_as_far_as_they_are_ids() -> None:
    entry = whoami.enqueue()
    Entry.objects.filter(pk=entry.pk).update(parent_ids=["x", 7, True, None])

    (outcome,) = run_jobs()

    assert outcome.status == "succeeded"
    assert outcome.return_value["parents"] == {"7": None}
