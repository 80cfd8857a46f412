"""A flood of rows written by hand, some malformed, mixed into normal work: every normal entry
runs, every bad row of a registered job ends as a final error record, every row of a job no
worker registered waits untried, and no worker or leader loop stops."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, connection, transaction
from django.db.models import QuerySet

from django_iq.models import Entry, EntryError, Queue
from tests.conftest import wait_until
from tests.faults.harness import (
    Verdict,
    judge,
    start_leader,
    start_worker,
    stop_all,
    wait_for_no_locks,
)
from tests.faults.test_process_faults import enqueue
from tests.testapp.jobs import recorded
from tests.testapp.models import RecordedRun

COLUMNS = (
    "queue, job_name, args, kwargs, priority, state, group_key, lock_key, run_at, attempts,"
    " max_attempts, enqueued_at"
)
# What a script or another program might write: each is stored, and each must end as an error.
BAD_ROWS = [
    ("null", "{}", recorded.name),  # args not a list
    ('{"a": 1}', "{}", recorded.name),  # args an object
    ("[]", "[]", recorded.name),  # kwargs a list
    ("[]", '{"1": 2}', recorded.name),  # a keyword the job does not take
    ('["x", "y", "z", "w"]', "{}", recorded.name),  # too many arguments
    ("[]", "{}", "os.system"),  # not a registered job: never claimed, never imported
    ("[]", "{}", "tests.testapp.jobs.no_such_job"),
]
UNKNOWN_JOBS = ("os.system", "tests.testapp.jobs.no_such_job")


def insert_by_hand(args: str, kwargs: str, job_name: str, key: str) -> None:
    now = "CURRENT_TIMESTAMP"
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO django_iq_entry ({COLUMNS}) VALUES"  # noqa: S608 (constants)
            f" ('default', %s, %s, %s, 0, 'pending', NULL, %s, {now}, 0, 1, {now})",
            [job_name, args, kwargs, key],
        )


def test_poisoned_and_hand_written_rows_mixed_into_normal_work(verdicts: list[Verdict]) -> None:
    Queue.objects.get_or_create(name="default")
    tokens = enqueue("poison", 300, seconds=0.005)
    bad = 0
    for copy in range(10):
        for index, (args, kwargs, job_name) in enumerate(BAD_ROWS):
            insert_by_hand(args, kwargs, job_name, f"e:bad-{copy}-{index}")
            bad += 1
    # A time no reader could load is refused by the database itself.
    with pytest.raises(IntegrityError), transaction.atomic():
        cursor = connection.cursor()
        cursor.execute(
            f"INSERT INTO django_iq_entry ({COLUMNS}) VALUES ('default', %s, '[]', '{{}}', 0,"  # noqa: S608
            " 'pending', NULL, 'e:bad-time', '1000-01-01 00:00:00', 0, 1, CURRENT_TIMESTAMP)",
            [recorded.name],
        )
    workers = [start_worker("--threads", "4") for _ in range(2)]
    leader = start_leader()
    known = Entry.objects.exclude(job_name__in=UNKNOWN_JOBS)
    wait_until(
        lambda: all_done_but_unknown(tokens, known),
        timeout=120,
        interval=0.25,
        message=f"{len(tokens)} entries and the bad rows of known jobs to finish",
    )
    assert all(p.poll() is None for p in [*workers, leader]), "no loop stopped"
    stop_all([*workers, leader])
    wait_for_no_locks()

    unknown = Entry.objects.filter(job_name__in=UNKNOWN_JOBS)
    assert unknown.count() == 10 * len(UNKNOWN_JOBS)
    assert set(unknown.values_list("state", "attempts")) == {("pending", 0)}, "never tried"
    cancelled, _ = Entry.objects.cancel(list(unknown.values_list("pk", flat=True)))
    assert cancelled == 10 * len(UNKNOWN_JOBS)
    verdict = judge("hand-written and malformed rows", tokens, [], faults=bad)
    verdicts.append(verdict)
    assert verdict.problems() == []
    finals = EntryError.objects.filter(is_final=True).exclude(job_name__in=UNKNOWN_JOBS)
    assert finals.count() == bad - 10 * len(UNKNOWN_JOBS), "each bad row: one final error"
    assert not Entry.objects.exists()


def all_done_but_unknown(tokens: set[str], known: QuerySet[Entry]) -> bool:
    finished = set(
        RecordedRun.objects.filter(finished_at__isnull=False, token__in=tokens)
        .values_list("token", flat=True)
        .distinct()
    )
    return finished == tokens and not known.exists()
