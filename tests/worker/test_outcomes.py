"""Outcome records, written by a worker run in this process against the real database: one per
run that ended, whatever ended it, judged by the rows written."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from django_iq import job, operations
from django_iq.bounds import MAX_RETURN_DEPTH
from django_iq.duties import PruningDuty
from django_iq.exceptions import InvalidJobOptions
from django_iq.leader import Leader
from django_iq.managers.outcome_records import NOT_KEPT_KEY
from django_iq.models import Entry, EntryError, RunOutcome
from django_iq.worker import WorkerProcess
from tests.conftest import iq_settings_with
from tests.testapp.jobs import (
    always_fails,
    flaky,
    overruns,
    polls,
    raises_odd,
    raises_unreadable,
    record,
    returns,
    returns_unstorable,
    unrecorded,
)
from tests.testapp.models import JobRun

pytestmark = pytest.mark.django_db(transaction=True)


def drain(**options: object) -> WorkerProcess:
    options.setdefault("processing_threads", 1)
    worker = WorkerProcess(burst=True, **options)  # type: ignore[arg-type]
    assert worker.run(install_signal_handlers=False) == 0
    return worker


def test_a_success_leaves_one_record_of_what_ran_where_and_what_it_returned() -> None:
    entry = record.using(queue="reports").enqueue("first", group_key="g")
    before = timezone.now()

    worker = drain()

    outcome = RunOutcome.objects.get()
    assert (outcome.entry_id, outcome.job_name, outcome.queue) == (entry.pk, record.name, "reports")
    assert (outcome.args, outcome.kwargs) == (["first"], {"group_key": "g"})
    assert (outcome.status, outcome.attempt, outcome.return_value) == ("succeeded", 1, "first")
    assert outcome.exception_class == "" and outcome.traceback == ""
    assert outcome.worker_name == worker.name
    assert outcome.started_at is not None and before <= outcome.started_at <= outcome.finished_at
    assert outcome.duration_seconds is not None and outcome.duration_seconds >= 0
    assert outcome.result_id is None
    assert not Entry.objects.exists()


def test_a_batch_of_successes_leaves_one_record_each() -> None:
    record.enqueue_many([((f"t{i}",), {}) for i in range(30)])

    drain(processing_threads=3)

    tokens = sorted(RunOutcome.objects.values_list("return_value", flat=True))
    assert tokens == sorted(f"t{i}" for i in range(30))
    assert set(RunOutcome.objects.values_list("status", "attempt")) == {("succeeded", 1)}
    assert JobRun.objects.count() == 30


def test_failures_that_retry_then_a_success_leave_a_record_per_attempt() -> None:
    entry = flaky.enqueue("retry-me", 2)

    worker = drain()

    rows = list(
        RunOutcome.objects.filter(entry_id=entry.pk)
        .order_by("attempt")
        .values_list("attempt", "status", "exception_class", "worker_name")
    )
    assert rows == [
        (1, "failed", "builtins.RuntimeError", worker.name),
        (2, "failed", "builtins.RuntimeError", worker.name),
        (3, "succeeded", "", worker.name),
    ]
    failed = RunOutcome.objects.get(entry_id=entry.pk, attempt=1)
    assert "flaky failure 1 of 2" in failed.traceback
    assert failed.return_value is None and failed.duration_seconds is not None


def test_a_final_failure_leaves_a_failed_record_with_its_traceback() -> None:
    entry = always_fails.enqueue("boom")

    drain()

    rows = list(
        RunOutcome.objects.filter(entry_id=entry.pk)
        .order_by("attempt")
        .values_list("attempt", "status", "exception_class")
    )
    assert rows == [(1, "failed", "builtins.ValueError"), (2, "failed", "builtins.ValueError")]
    last = RunOutcome.objects.get(attempt=2)
    assert "ValueError: boom" in last.traceback
    assert EntryError.objects.filter(is_final=True).count() == 1


def test_a_run_past_its_timeout_is_recorded_as_timed_out() -> None:
    entry = overruns.enqueue("slow", 5.0)

    drain()

    rows = list(
        RunOutcome.objects.filter(entry_id=entry.pk)
        .order_by("attempt")
        .values_list("status", "exception_class")
    )
    assert rows == [("timed_out", "django_iq.exceptions.JobTimeout")] * 2
    assert all(
        0.25 <= duration < 5.0
        for duration in RunOutcome.objects.values_list("duration_seconds", flat=True)
    )


def test_each_snooze_leaves_a_snoozed_record_and_the_snooze_limit_a_failed_one() -> None:
    entry = polls.enqueue("never-ready", 100)

    worker = drain()

    rows = list(
        RunOutcome.objects.filter(entry_id=entry.pk)
        .order_by("pk")
        .values_list("status", "attempt", "exception_class", "worker_name")
    )
    assert rows == [
        *[("snoozed", 1, "", worker.name)] * 3,
        ("failed", 1, "django_iq.exceptions.SnoozeLimitReached", worker.name),
    ]
    assert "snoozed 3 times" in RunOutcome.objects.get(status="failed").traceback


def test_a_cancelled_entry_leaves_a_cancelled_record() -> None:
    entry = record.enqueue("never-runs")

    assert Entry.objects.cancel([entry.pk]) == (1, 0)

    outcome = RunOutcome.objects.get()
    assert (outcome.entry_id, outcome.status, outcome.args) == (
        entry.pk,
        "cancelled",
        ["never-runs"],
    )
    assert outcome.exception_class == "django_iq.exceptions.EntryCancelled"
    assert outcome.started_at is None and outcome.worker_name == ""


def test_keep_outcomes_false_writes_none_whatever_ended_the_run() -> None:
    unrecorded.enqueue("quiet")
    cancelled = unrecorded.enqueue("cancelled")
    operations.cancel([cancelled.pk], operations.Actor.of_command("iq_cancel"))
    record.enqueue("loud")

    drain()

    assert list(RunOutcome.objects.values_list("job_name", flat=True)) == [record.name]
    assert JobRun.objects.filter(token="quiet").exists()


def test_keep_outcomes_must_be_a_boolean() -> None:
    with pytest.raises(InvalidJobOptions, match="keep_outcomes must be True or False"):
        job(keep_outcomes="no")(lambda: None)


@iq_settings_with(OUTCOME_MAX_RETURN_BYTES=100)
def test_a_return_value_over_the_cap_is_stored_as_a_marker_saying_so() -> None:
    small = returns.enqueue({"ok": [1, 2, 3]})
    large = returns.enqueue("x" * 500)
    odd = returns.enqueue(None, nan=True)

    drain()

    by_entry = dict(RunOutcome.objects.values_list("entry_id", "return_value"))
    assert by_entry[small.pk] == {"ok": [1, 2, 3]}
    assert by_entry[large.pk] == {
        NOT_KEPT_KEY: "502 bytes of JSON, more than OUTCOME_MAX_RETURN_BYTES (100)",
        "bytes": 502,
    }
    assert by_entry[odd.pk][NOT_KEPT_KEY].startswith("not JSON: ValueError")
    assert RunOutcome.objects.filter(status="succeeded").count() == 3


def test_a_return_value_the_database_cannot_store_is_a_marker_saying_where() -> None:
    kinds = ("nul", "surrogate_key", f"deep_{MAX_RETURN_DEPTH}", f"deep_{MAX_RETURN_DEPTH + 1}")
    entries = {kind: returns_unstorable.enqueue(kind, kind) for kind in kinds}

    drain()

    by_entry = dict(RunOutcome.objects.values_list("entry_id", "return_value"))
    got = {kind: by_entry[entry.pk] for kind, entry in entries.items()}
    assert got["nul"] == {
        NOT_KEPT_KEY: "not storable: the text at value['text'] has a NUL character (\\x00) "
        "at position 6"
    }
    assert got["surrogate_key"] == {
        NOT_KEPT_KEY: "not storable: the key '\\udc80' at value has a lone surrogate at "
        "position 0, which is not valid Unicode"
    }
    deepest = got[f"deep_{MAX_RETURN_DEPTH}"]
    for _ in range(MAX_RETURN_DEPTH - 1):
        assert isinstance(deepest, list) and len(deepest) == 1
        deepest = deepest[0]
    assert deepest == [], "a value nested as deep as the bound is kept whole"
    assert got[f"deep_{MAX_RETURN_DEPTH + 1}"][NOT_KEPT_KEY].startswith(
        f"not storable: nested more than {MAX_RETURN_DEPTH} lists or dicts deep"
    )
    assert RunOutcome.objects.filter(status="succeeded").count() == 4
    assert not EntryError.objects.exists()


def test_an_exception_whose_text_cannot_be_read_is_recorded_with_a_placeholder() -> None:
    entry = raises_unreadable.enqueue("in-process")

    drain()

    errors = list(EntryError.objects.filter(entry_id=entry.pk).order_by("attempt"))
    assert [(e.attempt, e.is_final) for e in errors] == [(1, False), (2, True)]
    assert errors[0].message == (
        "<exception text could not be read: RuntimeError: this exception's text cannot be read>"
    )
    assert "UnreadableError: <exception str() failed>" in errors[0].traceback
    assert JobRun.objects.filter(token__startswith="in-process:").count() == 2


@pytest.mark.parametrize(
    ("kind", "message", "exception_class"),
    [
        ("touchy_text", "touchy text", "tests.testapp.jobs.TouchyTextError"),
        (
            "exiting_text",
            "<exception text could not be read: SystemExit: __str__ exits>",
            "tests.testapp.jobs.ExitingTextError",
        ),
        ("unnamed_class", "", "<exception class name could not be read>"),
    ],
)
def test_an_exception_fighting_being_read_is_recorded_and_counted(
    kind: str, message: str, exception_class: str
) -> None:
    entry = raises_odd.enqueue(kind, kind)

    worker = drain()

    errors = list(EntryError.objects.filter(entry_id=entry.pk).order_by("attempt"))
    assert [(e.attempt, e.is_final) for e in errors] == [(1, False), (2, True)]
    assert {(e.message, e.exception_class) for e in errors} == {(message, exception_class)}
    assert JobRun.objects.filter(token__startswith=f"{kind}:").count() == 2
    assert not Entry.objects.filter(pk=entry.pk).exists()
    assert worker.failed == 2


@iq_settings_with(OUTCOME_RETENTION_SECONDS=3600, PRUNE_BATCH_SIZE=2)
def test_the_leader_prunes_records_past_their_retention_in_batches() -> None:
    for token in ("a", "b", "c", "d", "e"):
        record.enqueue(token)
    drain()
    now = timezone.now()
    recent = RunOutcome.objects.get(return_value="e")
    RunOutcome.objects.exclude(pk=recent.pk).update(finished_at=now - timedelta(hours=2))
    leader = Leader(name="pruner", duties=[PruningDuty()], lease_seconds=30)

    result = leader.run_once(now).ran["pruning"]

    assert result.outcomes == 4
    assert list(RunOutcome.objects.values_list("pk", flat=True)) == [recent.pk]
