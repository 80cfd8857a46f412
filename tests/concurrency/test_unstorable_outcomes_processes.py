"""Outcomes the database cannot store as they are, with a real worker and leader on whichever
database the suite runs on: a return value holding NUL, a lone surrogate or nesting past what a
JSON column holds is kept as the "not kept" marker and its run succeeds once; an exception whose
text cannot be read fails its attempts, each counted and recorded. Judged by the runs the jobs
recorded (one JobRun per run), over a window long enough for recovery to have re-run them."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from django.db import connection

from django_iq.managers.outcome_records import NOT_KEPT_KEY
from django_iq.models import Entry, EntryError, GroupLock, RunOutcome
from tests.faults.harness import start_leader, start_worker, stop_all
from tests.testapp.jobs import (
    UNSTORABLE_RETURNS,
    raises_recorded,
    raises_unreadable,
    returns_unstorable,
)
from tests.testapp.models import JobRun

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

# Long enough for the worker to be seen holding nothing and for recovery to act several times
# (the test settings: silent after 3 s, recovery every 0.2 s).
WINDOW_SECONDS = 12.0


def run_until_the_queue_is_empty() -> None:
    """Run a worker and a leader until no entry is left (or the window ends), a moment more,
    then stop them."""
    processes = [start_worker("--threads", "2"), start_leader()]
    try:
        deadline = time.monotonic() + WINDOW_SECONDS
        while Entry.objects.exists() and time.monotonic() < deadline:
            time.sleep(0.2)  # the test's own polling of the queue
        # A little longer: a run released without being counted would start again here.
        time.sleep(1.0)  # the observation window itself
        assert all(p.poll() is None for p in processes), "no process stopped"
    finally:
        stop_all(processes)


def runs_of(token: str) -> int:
    return JobRun.objects.filter(token__startswith=f"{token}:").count()


def test_unstorable_outcomes_run_once_or_count_their_attempts() -> None:
    entries = {kind: returns_unstorable.enqueue(kind, kind) for kind in UNSTORABLE_RETURNS}
    unreadable = raises_unreadable.enqueue("unreadable")
    run_until_the_queue_is_empty()

    runs = {kind: runs_of(kind) for kind in UNSTORABLE_RETURNS}
    assert runs == dict.fromkeys(UNSTORABLE_RETURNS, 1), "each ran once"
    for kind, entry in entries.items():
        outcome = RunOutcome.objects.get(entry_id=entry.pk)
        assert outcome.status == "succeeded", kind
        assert isinstance(outcome.return_value, dict), kind
        assert NOT_KEPT_KEY in outcome.return_value, (kind, outcome.return_value)
    assert not EntryError.objects.filter(job_name=returns_unstorable.name).exists()

    assert runs_of("unreadable") == 2, "max_attempts=2: two runs, each counted"
    errors = list(EntryError.objects.filter(entry_id=unreadable.pk).order_by("attempt"))
    assert [(e.attempt, e.is_final) for e in errors] == [(1, False), (2, True)]
    for error in errors:
        assert error.exception_class == "tests.testapp.jobs.UnreadableError"
        assert error.message.startswith("<exception text could not be read: RuntimeError")
        assert "raises_unreadable" in error.traceback
    failed = RunOutcome.objects.filter(entry_id=unreadable.pk).values_list("status", flat=True)
    assert sorted(failed) == ["failed", "failed"]
    assert not Entry.objects.exists() and not GroupLock.objects.exists()


# A database that refuses a success for a reason of its own, as a constraint or a trigger of
# the project's might: a trigger on the outcome records refuses a success whose return value
# has the key "refused", and every success of the entry whose token is "refuse-all"; another
# refuses an error record whose message has "refuse-record" in it.
REFUSE_TRIGGER = {
    "postgresql": [
        """CREATE FUNCTION iq_test_refuse() RETURNS trigger AS $$ BEGIN
            IF NEW.status = 'succeeded' AND (NEW.args->>0 = 'refuse-all'
                OR jsonb_typeof(NEW.return_value) = 'object' AND NEW.return_value ? 'refused')
            THEN RAISE EXCEPTION 'refused by a trigger'; END IF;
            RETURN NEW; END $$ LANGUAGE plpgsql""",
        """CREATE TRIGGER iq_test_refuse BEFORE INSERT ON django_iq_runoutcome
            FOR EACH ROW EXECUTE FUNCTION iq_test_refuse()""",
        """CREATE FUNCTION iq_test_refuse_error() RETURNS trigger AS $$ BEGIN
            IF NEW.message LIKE '%refuse-record%'
            THEN RAISE EXCEPTION 'error record refused by a trigger'; END IF;
            RETURN NEW; END $$ LANGUAGE plpgsql""",
        """CREATE TRIGGER iq_test_refuse_error BEFORE INSERT ON django_iq_entryerror
            FOR EACH ROW EXECUTE FUNCTION iq_test_refuse_error()""",
    ],
    "mysql": [
        """CREATE TRIGGER iq_test_refuse BEFORE INSERT ON django_iq_runoutcome FOR EACH ROW
            IF NEW.status = 'succeeded' AND (JSON_VALUE(NEW.args, '$[0]') = 'refuse-all'
                OR JSON_EXISTS(NEW.return_value, '$.refused'))
            THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'refused by a trigger'; END IF""",
        """CREATE TRIGGER iq_test_refuse_error BEFORE INSERT ON django_iq_entryerror FOR EACH ROW
            IF NEW.message LIKE '%refuse-record%'
            THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'error record refused by a trigger';
            END IF""",
    ],
    "sqlite": [
        """CREATE TRIGGER iq_test_refuse BEFORE INSERT ON django_iq_runoutcome
            WHEN NEW.status = 'succeeded' AND (json_extract(NEW.args, '$[0]') = 'refuse-all'
                OR json_extract(NEW.return_value, '$.refused') IS NOT NULL)
            BEGIN SELECT RAISE(ABORT, 'refused by a trigger'); END""",
        """CREATE TRIGGER iq_test_refuse_error BEFORE INSERT ON django_iq_entryerror
            WHEN NEW.message LIKE '%refuse-record%'
            BEGIN SELECT RAISE(ABORT, 'error record refused by a trigger'); END""",
    ],
}
DROP_TRIGGER = {
    "postgresql": [
        "DROP TRIGGER IF EXISTS iq_test_refuse ON django_iq_runoutcome",
        "DROP FUNCTION IF EXISTS iq_test_refuse()",
        "DROP TRIGGER IF EXISTS iq_test_refuse_error ON django_iq_entryerror",
        "DROP FUNCTION IF EXISTS iq_test_refuse_error()",
    ],
    "mysql": [
        "DROP TRIGGER IF EXISTS iq_test_refuse",
        "DROP TRIGGER IF EXISTS iq_test_refuse_error",
    ],
    "sqlite": [
        "DROP TRIGGER IF EXISTS iq_test_refuse",
        "DROP TRIGGER IF EXISTS iq_test_refuse_error",
    ],
}


@contextmanager
def triggers(create: dict[str, list[str]], drop: dict[str, list[str]]) -> Iterator[None]:
    """Install the database's statements of ``create`` for the block, then ``drop``'s."""
    with connection.cursor() as cursor:
        for sql in create[connection.vendor]:
            cursor.execute(sql)
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            for sql in drop[connection.vendor]:
                cursor.execute(sql)


@pytest.fixture
def refusing_trigger() -> Iterator[None]:
    with triggers(REFUSE_TRIGGER, DROP_TRIGGER):
        yield


@pytest.mark.usefixtures("refusing_trigger")
def test_a_refused_outcome_is_written_without_what_was_refused_or_counted_as_failed() -> None:
    kept = returns_unstorable.enqueue("refuse-value", "refused")
    refused = returns_unstorable.enqueue("refuse-all", "refused")
    unrecordable = raises_recorded.enqueue("refuse-record", "refuse-record")
    run_until_the_queue_is_empty()

    assert runs_of("refuse-value") == 1
    outcome = RunOutcome.objects.get(entry_id=kept.pk)
    assert outcome.status == "succeeded"
    assert "refused by a trigger" in outcome.return_value[NOT_KEPT_KEY]

    assert runs_of("refuse-all") == 3, "max_attempts=3: each run counted as a failed attempt"
    errors = list(EntryError.objects.filter(entry_id=refused.pk).order_by("attempt"))
    assert [(e.attempt, e.is_final) for e in errors] == [(1, False), (2, False), (3, True)]
    for error in errors:
        assert error.exception_class == "django_iq.exceptions.OutcomeNotStored"
        assert "refused by a trigger" in error.message

    assert runs_of("refuse-record") == 2, "max_attempts=2: each run counted"
    errors = list(EntryError.objects.filter(entry_id=unrecordable.pk).order_by("attempt"))
    assert [(e.attempt, e.is_final) for e in errors] == [(1, False), (2, True)]
    for error in errors:
        assert error.exception_class == "builtins.ValueError"
        assert error.message.startswith("<the failure could not be recorded as it is: ")
    assert not Entry.objects.exists() and not GroupLock.objects.exists()


# A database that refuses every outcome a worker writes for the entries whose token starts with
# "refuse-every" (a success, and the failure record in its place, or the failure of a run that
# raised): only recovery's record of a lost run (WorkerLost) gets through.
REFUSE_EVERY_TRIGGER = {
    "postgresql": [
        """CREATE FUNCTION iq_test_refuse_every() RETURNS trigger AS $$ BEGIN
            IF NEW.args->>0 LIKE 'refuse-every%' AND NEW.status = 'succeeded'
            THEN RAISE EXCEPTION 'every outcome refused by a trigger'; END IF;
            RETURN NEW; END $$ LANGUAGE plpgsql""",
        """CREATE TRIGGER iq_test_refuse_every BEFORE INSERT ON django_iq_runoutcome
            FOR EACH ROW EXECUTE FUNCTION iq_test_refuse_every()""",
        """CREATE FUNCTION iq_test_refuse_every_error() RETURNS trigger AS $$ BEGIN
            IF NEW.args->>0 LIKE 'refuse-every%'
                AND NEW.exception_class <> 'django_iq.exceptions.WorkerLost'
            THEN RAISE EXCEPTION 'every outcome refused by a trigger'; END IF;
            RETURN NEW; END $$ LANGUAGE plpgsql""",
        """CREATE TRIGGER iq_test_refuse_every_error BEFORE INSERT ON django_iq_entryerror
            FOR EACH ROW EXECUTE FUNCTION iq_test_refuse_every_error()""",
    ],
    "mysql": [
        """CREATE TRIGGER iq_test_refuse_every BEFORE INSERT ON django_iq_runoutcome
            FOR EACH ROW
            IF NEW.status = 'succeeded' AND JSON_VALUE(NEW.args, '$[0]') LIKE 'refuse-every%'
            THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'every outcome refused'; END IF""",
        """CREATE TRIGGER iq_test_refuse_every_error BEFORE INSERT ON django_iq_entryerror
            FOR EACH ROW
            IF JSON_VALUE(NEW.args, '$[0]') LIKE 'refuse-every%'
                AND NEW.exception_class <> 'django_iq.exceptions.WorkerLost'
            THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'every outcome refused'; END IF""",
    ],
    "sqlite": [
        """CREATE TRIGGER iq_test_refuse_every BEFORE INSERT ON django_iq_runoutcome
            WHEN NEW.status = 'succeeded' AND json_extract(NEW.args, '$[0]') LIKE 'refuse-every%'
            BEGIN SELECT RAISE(ABORT, 'every outcome refused by a trigger'); END""",
        """CREATE TRIGGER iq_test_refuse_every_error BEFORE INSERT ON django_iq_entryerror
            WHEN json_extract(NEW.args, '$[0]') LIKE 'refuse-every%'
                AND NEW.exception_class <> 'django_iq.exceptions.WorkerLost'
            BEGIN SELECT RAISE(ABORT, 'every outcome refused by a trigger'); END""",
    ],
}
DROP_EVERY_TRIGGER = {
    "postgresql": [
        "DROP TRIGGER IF EXISTS iq_test_refuse_every ON django_iq_runoutcome",
        "DROP TRIGGER IF EXISTS iq_test_refuse_every_error ON django_iq_entryerror",
        "DROP FUNCTION IF EXISTS iq_test_refuse_every()",
        "DROP FUNCTION IF EXISTS iq_test_refuse_every_error()",
    ],
    "mysql": [
        "DROP TRIGGER IF EXISTS iq_test_refuse_every",
        "DROP TRIGGER IF EXISTS iq_test_refuse_every_error",
    ],
    "sqlite": [
        "DROP TRIGGER IF EXISTS iq_test_refuse_every",
        "DROP TRIGGER IF EXISTS iq_test_refuse_every_error",
    ],
}


def test_an_outcome_that_cannot_be_written_stops_the_worker_and_its_attempt_is_counted() -> None:
    """A success refused even as a failure, and a failure refused even without its text: the
    worker keeps the claim, stops to be replaced (its supervisor starts a fresh process), and
    recovery releases the claim counting the attempt. Each entry runs max_attempts times, each
    run counted, never again uncounted."""
    returned = returns_unstorable.using(max_attempts=2).enqueue("refuse-every-return", "deep_1")
    raised = raises_recorded.using(max_attempts=2).enqueue("refuse-every-raise", "raised")
    with triggers(REFUSE_EVERY_TRIGGER, DROP_EVERY_TRIGGER):
        supervisor = start_worker("--processes", "2", "--threads", "1")
        processes = [supervisor, start_leader()]
        try:
            deadline = time.monotonic() + 30
            while Entry.objects.exists() and time.monotonic() < deadline:
                time.sleep(0.2)  # the test's own polling of the queue
            time.sleep(1.0)  # the observation window: an uncounted re-run would start here
        finally:
            stop_all(processes)
    output = supervisor.output()
    assert runs_of("refuse-every-return") == 2, output[-4000:]
    assert runs_of("refuse-every-raise") == 2, output[-4000:]
    for entry in (returned, raised):
        errors = list(EntryError.objects.filter(entry_id=entry.pk).order_by("attempt"))
        assert [(e.attempt, e.is_final, e.exception_class) for e in errors] == [
            (1, False, "django_iq.exceptions.WorkerLost"),
            (2, True, "django_iq.exceptions.WorkerLost"),
        ], output[-4000:]
    assert not Entry.objects.exists() and not GroupLock.objects.exists()
    # Each lost outcome stopped its process (with others, at times), which was replaced.
    assert output.count("could not write the outcome of entry=") == 4, output[-4000:]
    assert output.count("exitcode=1; restarting") >= 2, output[-4000:]
