"""The operator commands through call_command: what each one changes in the database, what it
prints, and how it refuses bad input (iq_status, iq_pause, iq_resume, iq_disable, iq_enable,
iq_cancel, iq_requeue, iq_cron)."""

from __future__ import annotations

import functools
import io
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from django_iq import operations, snapshot
from django_iq.management.commands import iq_status
from django_iq.management.output import render_table
from django_iq.models import (
    CronJob,
    DisabledJob,
    Entry,
    EntryError,
    OperatorAction,
    Queue,
    QueueTotal,
    Worker,
)
from django_iq.snapshot import read_snapshot
from tests.conftest import iq_settings_with
from tests.factories import (
    CronJobFactory,
    DisabledJobFactory,
    EntryErrorFactory,
    EntryFactory,
    LeaderLeaseFactory,
    QueueFactory,
    WorkerFactory,
)

pytestmark = pytest.mark.django_db

RECORD = "tests.testapp.jobs.record"
NOOP = "tests.testapp.jobs.noop"


def run(*args: str, **options: Any) -> str:
    """Run a command in-process and return what it printed on stdout."""
    out = io.StringIO()
    call_command(*args, stdout=out, stderr=io.StringIO(), **options)
    return out.getvalue()


def timestamp(value: str) -> datetime:
    parsed = parse_datetime(value)
    assert parsed is not None, f"not an ISO 8601 datetime: {value!r}"
    return parsed


def close_to(value: str, expected: datetime) -> bool:
    """The JSON encoder keeps milliseconds: compare within one."""
    return abs(timestamp(value) - expected) < timedelta(milliseconds=1)


# -- iq_status -------------------------------------------------------------------------------


def populate() -> dict[str, Any]:
    """Entries in every state over two queues, failures, workers (live, dead, stopped) and a
    held lease."""
    QueueFactory(name="default")
    QueueFactory(name="emails", is_paused=True)
    old = timezone.now() - timedelta(hours=2)
    live = WorkerFactory(name="web1:10", busy_threads=3, cpu_percent=42.5, is_throttled=True)
    EntryFactory.create_batch(2, enqueued_at=old)
    EntryFactory(locked=True, lock__worker=live)
    EntryFactory(deferred=True)
    EntryFactory(disabled=True)
    EntryFactory(queue__name="emails", enqueued_at=timezone.now() - timedelta(days=3))
    EntryErrorFactory.create_batch(2)
    EntryErrorFactory(queue__name="emails")
    EntryErrorFactory(is_final=False)
    EntryErrorFactory(requeued_at=timezone.now())
    WorkerFactory(name="web2:11", heartbeat_at=timezone.now() - timedelta(hours=1))
    Worker.objects.stop(WorkerFactory(name="web3:12"))
    lease = LeaderLeaseFactory(holder="web1:20:leader", epoch=7)
    return {"oldest": old, "live": live, "lease": lease}


def test_status_json_counts_every_state_per_queue_as_the_database_does() -> None:
    made = populate()

    document = json.loads(run("iq_status", "--json"))

    queues = {q["name"]: q for q in document["queues"]}
    assert list(queues) == ["default", "emails"]
    assert queues["default"]["counts"] == {
        "initial": 1,
        "pending": 3,
        "disabled": 1,
        "blocked": 0,
        "computing": 1,
        "running": 0,
        "awaiting_compute": 2,
        "failed": 2,
    }
    assert queues["emails"]["is_paused"] is True
    assert queues["emails"]["counts"]["failed"] == 1
    for stats in Queue.objects.stats():
        counts = queues[stats.queue]["counts"]
        assert counts == {name: getattr(stats, name) for name in counts}
        assert queues[stats.queue]["invariant_holds"] is stats.invariant_holds
    assert close_to(queues["default"]["oldest_waiting_enqueued_at"], made["oldest"])
    assert queues["default"]["oldest_waiting_seconds"] >= 7200
    assert document["totals"]["pending"] == Entry.objects.pending().count()
    assert document["totals"]["failed"] == EntryError.objects.failed().count()
    assert document["invariant_holds"] is True
    assert timestamp(document["generated_at"]) <= timezone.now()


def test_status_json_lists_running_workers_live_first_and_the_leader() -> None:
    made = populate()

    document = json.loads(run("iq_status", "--json"))

    workers = document["workers"]
    assert [(w["name"], w["is_live"]) for w in workers] == [
        ("web1:10", True),
        ("web2:11", False),
    ], "a stopped worker is left out; a silent one shows as dead"
    live = workers[0]
    assert live["busy_threads"] == 3
    assert live["idle_threads"] == 1
    assert live["cpu_percent"] == 42.5
    assert live["is_throttled"] is True
    assert live["role"] == "worker"
    assert close_to(live["heartbeat_at"], Worker.objects.get(name="web1:10").heartbeat_at)
    assert workers[1]["idle_threads"] == 0, "a dead worker has no idle thread to offer"
    assert workers[1]["heartbeat_age_seconds"] >= 3600
    lease = made["lease"]
    assert document["leader"]["holder"] == "web1:20:leader"
    assert document["leader"]["epoch"] == 7
    assert document["leader"]["is_held"] is True
    assert close_to(document["leader"]["expires_at"], lease.expires_at)


def test_status_json_keys_are_stable() -> None:
    populate()

    document = json.loads(run("iq_status", "--json"))

    assert sorted(document) == [
        "alarms",
        "generated_at",
        "healthy",
        "invariant_holds",
        "leader",
        "leader_live",
        "merged",
        "problems",
        "queues",
        "server_sessions",
        "totals",
        "unserved_jobs",
        "workers",
    ]
    assert sorted(document["queues"][0]) == [
        "alarm",
        "alert_waiting_seconds",
        "counts",
        "invariant_holds",
        "is_paused",
        "locked_by_dead_workers",
        "locks_without_entries",
        "merged",
        "name",
        "oldest_waiting_enqueued_at",
        "oldest_waiting_seconds",
    ]
    assert sorted(document["workers"][0]) == sorted(
        [
            "name",
            "role",
            "host",
            "pid",
            "queues",
            "is_live",
            "heartbeat_at",
            "heartbeat_age_seconds",
            "processing_threads",
            "busy_threads",
            "idle_threads",
            "cpu_percent",
            "memory_percent",
            "is_throttled",
            "sessions",
        ]
    )
    assert sorted(document["leader"]) == ["acquired_at", "epoch", "expires_at", "holder", "is_held"]


def test_status_text_prints_aligned_tables_of_queues_workers_and_the_leader() -> None:
    populate()

    output = run("iq_status")

    lines = output.splitlines()
    assert lines[0].startswith("django_iq status at ")
    header = lines.index("Queues") + 1
    assert lines[header].split() == [
        "QUEUE",
        "PAUSED",
        "INITIAL",
        "PENDING",
        "DISABLED",
        "BLOCKED",
        "COMPUTING",
        "RUNNING",
        "AWAITING_COMPUTE",
        "FAILED",
        "OLDEST",
        "WAITING",
        "MERGED",
        "INVARIANT",
        "ALARM",
    ]
    assert lines[header + 1].split() == [
        "default",
        "no",
        "1",
        "3",
        "1",
        "0",
        "1",
        "0",
        "2",
        "2",
        *"2 h 0 min".split(),
        "0",
        "ok",
        "-",
    ]
    assert lines[header + 2].split() == [
        "emails",
        "yes",
        "0",
        "1",
        "0",
        "0",
        "0",
        "0",
        "1",
        "1",
        *"3 d 0 h".split(),
        "0",
        "ok",
        "-",
    ]
    assert lines[header + 3].split() == [
        "(total)",
        "1",
        "4",
        "1",
        "0",
        "1",
        "0",
        "3",
        "3",
        "0",
        "ok",
    ]
    # Numbers are right-aligned: every row ends its PENDING column at the same place.
    end = lines[header].index("PENDING") + len("PENDING")
    assert {lines[header + i][end - 1] for i in range(1, 4)} == {"3", "1", "4"}
    assert "Workers (1 live, 1 dead)" in lines
    workers = lines.index("Workers (1 live, 1 dead)")
    assert lines[workers + 2].split()[:3] == ["web1:10", "worker", "live"]
    assert lines[workers + 2].split()[-6:] == ["3", "1", "42%", "0%", "yes", "-"]
    assert lines[workers + 3].split()[:3] == ["web2:11", "worker", "dead"]
    assert "web3:12" not in output
    assert lines[lines.index("Leader") + 1].startswith("web1:20:leader  epoch 7  lease expires in")


def test_the_example_of_docs_reference_cli_is_what_iq_status_prints(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    page = (Path(__file__).resolve().parents[2] / "docs/reference/cli.md").read_text()
    shown = page.split("```text\n$ python manage.py iq_status\n", 1)[1].split("```", 1)[0]
    # The same cluster: its times are relative to one moment, the report's.
    now = timezone.now()

    def ago(seconds: float) -> datetime:
        return now - timedelta(seconds=seconds)

    QueueFactory(name="emails")
    QueueFactory(name="reports", is_paused=True)
    workers = [
        WorkerFactory(
            name="web1:4242:5f0c3a9e1b2d",
            busy_threads=4,
            cpu_percent=71,
            memory_percent=38,
            sessions=[[pid, 1.0] for pid in range(6)],
        ),
        WorkerFactory(
            name="web2:4310:a71e04c6d8b3",
            busy_threads=4,
            cpu_percent=93,
            memory_percent=41,
            sessions=[[pid, 1.0] for pid in range(6, 12)],
        ),
    ]
    EntryFactory.create_batch(2, deferred=True)
    for index in range(8):
        EntryFactory(locked=True, lock__worker=workers[index % 2], enqueued_at=ago(30))
    EntryFactory.create_batch(3, job_name="billing.jobs.invoice", enqueued_at=ago(198))
    EntryFactory.create_batch(401, enqueued_at=ago(40))
    EntryFactory.create_batch(5, state="blocked")
    EntryFactory(queue__name="emails", enqueued_at=ago(2))
    EntryFactory.create_batch(37, queue__name="reports", enqueued_at=ago(3900))
    EntryErrorFactory.create_batch(3)
    QueueTotal.objects.create(queue="default", merged=120)
    Worker.objects.filter(name="web1:4242:5f0c3a9e1b2d").update(heartbeat_at=ago(1))
    Worker.objects.filter(name="web2:4310:a71e04c6d8b3").update(
        heartbeat_at=ago(2), is_throttled=True
    )
    WorkerFactory(
        name="web1:4250:0d3b6f2a91c4:leader",
        role="leader",
        processing_threads=0,
        cpu_percent=2,
        memory_percent=5,
        heartbeat_at=now,
        sessions=[[12, 1.0]],
    )
    WorkerFactory(
        name="web3:977:3c9d2e7f10a5", cpu_percent=12, memory_percent=20, heartbeat_at=ago(252)
    )
    LeaderLeaseFactory(
        holder="web1:4250:0d3b6f2a91c4:leader", epoch=12, expires_at=now + timedelta(seconds=13)
    )
    monkeypatch.setattr(iq_status, "read_snapshot", functools.partial(read_snapshot, now=now))
    # The server's limit and sessions, as a PostgreSQL server would say them.
    monkeypatch.setattr(snapshot, "server_sessions", lambda db: (100, 3, 37))

    # The default silence (30 s), not the tests' 3 s: building 455 entries may take seconds.
    with iq_settings_with(WORKER_SILENT_AFTER_SECONDS=30):
        printed = run("iq_status")

    times = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC")
    assert times.sub("<time>", printed) == times.sub("<time>", shown)


def test_status_says_when_there_is_no_leader_or_its_lease_expired() -> None:
    assert "None elected: start manage.py runleader." in run("iq_status")

    LeaderLeaseFactory(holder="old:1:leader", epoch=3, expires_at=timezone.now() - timedelta(1))

    output = run("iq_status")
    assert "None: the lease of old:1:leader (epoch 3) expired 1 d 0 h ago" in output
    assert json.loads(run("iq_status", "--json"))["leader"]["is_held"] is False


def test_status_with_nothing_to_show_says_so() -> None:
    output = run("iq_status")

    assert "No queues." in output
    assert "No running workers." in output


def test_status_queues_option_keeps_those_queues_and_the_workers_serving_them() -> None:
    populate()
    WorkerFactory(name="mailer:1", queues=["emails"])
    WorkerFactory(name="reporter:1", queues=["reports"])

    document = json.loads(run("iq_status", "--json", "--queues", "emails,reports"))

    assert [q["name"] for q in document["queues"]] == ["emails", "reports"]
    assert document["queues"][1]["counts"] == dict.fromkeys(
        [
            "initial",
            "pending",
            "disabled",
            "blocked",
            "computing",
            "running",
            "awaiting_compute",
            "failed",
        ],
        0,
    ), "a declared queue without a row yet shows zeros"
    names = [w["name"] for w in document["workers"]]
    assert sorted(names) == ["mailer:1", "reporter:1", "web1:10", "web2:11"]
    WorkerFactory(name="other:1", queues=["default"])
    document = json.loads(run("iq_status", "--json", "--queues", "emails"))
    assert "other:1" not in [w["name"] for w in document["workers"]]
    assert "reporter:1" not in [w["name"] for w in document["workers"]]


def test_status_refuses_an_unknown_queue_naming_it_and_the_known_ones() -> None:
    QueueFactory(name="default")

    with pytest.raises(CommandError) as raised:
        run("iq_status", "--queues", "default,emial")

    assert str(raised.value) == (
        "Unknown queue: 'emial' (did you mean 'emails'?). Known queues: default, emails, reports."
    )


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (["--queues", " , "], "expected comma-separated names"),
        (["--watch", "0"], "must be greater than zero, got 0"),
        (["--watch", "soon"], "expected a finite number of seconds, got 'soon'"),
        (["--watch", "inf"], "expected a finite number of seconds, got 'inf'"),
    ],
)
def test_status_refuses_bad_options(option: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        run("iq_status", *option)


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def stop_after(monkeypatch: pytest.MonkeyPatch, reports: int) -> list[float]:
    """Make ``--watch`` stop after ``reports`` reports instead of waiting for Ctrl-C."""
    waits: list[float] = []

    def wait(stop: object, seconds: float) -> bool:
        waits.append(seconds)
        return len(waits) >= reports

    monkeypatch.setattr(iq_status, "wait_for_stop", wait)
    return waits


def test_watch_refreshes_every_interval_without_ansi_codes_when_not_a_terminal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    waits = stop_after(monkeypatch, 3)

    output = run("iq_status", "--watch", "0.5")

    assert waits == [0.5, 0.5, 0.5]
    assert output.count("django_iq status at") == 3
    assert "\x1b" not in output


def test_watch_defaults_to_two_seconds_and_clears_a_terminal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    waits = stop_after(monkeypatch, 2)
    out = FakeTerminal()

    call_command("iq_status", "--watch", stdout=out)

    assert waits == [2.0, 2.0]
    assert out.getvalue().count(iq_status.CLEAR_SCREEN + "django_iq status at") == 2


def test_watch_with_json_prints_one_document_per_line(monkeypatch: pytest.MonkeyPatch) -> None:
    populate()
    stop_after(monkeypatch, 2)

    output = run("iq_status", "--watch", "1", "--json")

    documents = [json.loads(line) for line in output.splitlines()]
    assert len(documents) == 2
    assert all(d["totals"]["pending"] == 4 for d in documents)


def test_watch_stops_cleanly_when_interrupted(monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(stop: object, seconds: float) -> bool:
        raise KeyboardInterrupt

    monkeypatch.setattr(iq_status, "wait_for_stop", interrupted)

    assert run("iq_status", "--watch", "1").count("django_iq status at") == 1


def test_render_table_aligns_text_left_and_numbers_right() -> None:
    table = render_table(["NAME", ">COUNT"], [["a", 1], ["longer", 1234]])

    assert table.splitlines() == ["NAME    COUNT", "a           1", "longer   1234"]


# -- iq_pause / iq_resume --------------------------------------------------------------------


def paused() -> dict[str, bool]:
    return dict(Queue.objects.values_list("name", "is_paused"))


def test_pause_pauses_each_queue_named_and_reports_them() -> None:
    QueueFactory(name="default")
    QueueFactory(name="emails")

    output = run("iq_pause", "default", "emails")

    assert output == "Paused 2 queues: default, emails.\n"
    assert paused() == {"default": True, "emails": True}


def test_pause_creates_a_declared_queue_that_has_no_row_yet() -> None:
    output = run("iq_pause", "reports")

    assert output == "Paused 1 queue: reports.\n"
    assert paused() == {"reports": True}


def test_pause_reports_queues_already_paused() -> None:
    QueueFactory(name="default", is_paused=True)
    QueueFactory(name="emails")

    output = run("iq_pause", "default", "emails")

    assert output == "Paused 1 queue: emails. Skipped 1, already paused: default.\n"
    assert run("iq_pause", "emails") == "Paused 0 queues. Skipped 1, already paused: emails.\n"
    audits = list(OperatorAction.objects.order_by("pk").values_list("door", "action", "message"))
    assert audits == [
        ("command", "pause", "Paused 1 queue: emails. Skipped 1, already paused: default."),
        ("command", "pause", "Paused 0 queues. Skipped 1, already paused: emails."),
    ]
    assert "(iq_pause)" in OperatorAction.objects.first().actor


def test_pause_refuses_unknown_queues_before_pausing_any() -> None:
    QueueFactory(name="default")

    with pytest.raises(CommandError) as raised:
        run("iq_pause", "default", "nope", "emial")

    assert str(raised.value) == (
        "Unknown queues: 'nope', 'emial' (did you mean 'emails'?). "
        "Known queues: default, emails, reports."
    )
    assert paused() == {"default": False}


def test_resume_serves_paused_queues_again() -> None:
    QueueFactory(name="default", is_paused=True)
    QueueFactory(name="emails")

    output = run("iq_resume", "default", "emails")

    assert output == "Resumed 1 queue: default. Skipped 1, not paused: emails.\n"
    assert paused() == {"default": False, "emails": False}


def test_resume_refuses_an_unknown_queue() -> None:
    with pytest.raises(
        CommandError, match=r"Unknown queue: 'defualt' \(did you mean 'default'\?\)"
    ):
        run("iq_resume", "defualt")


# -- iq_disable / iq_enable ------------------------------------------------------------------


def test_disable_disables_the_jobs_waiting_entries_and_later_ones() -> None:
    EntryFactory.create_batch(2)
    EntryFactory(deferred=True)
    EntryFactory(job_name=NOOP)

    output = run("iq_disable", RECORD)

    assert output == f"Disabled 1 job: {RECORD} (3 entries).\n"
    assert Entry.objects.disabled().filter(job_name=RECORD).count() == 3
    assert Entry.objects.pending().filter(job_name=NOOP).count() == 1
    assert DisabledJob.objects.filter(job_name=RECORD).exists()
    assert (
        run("iq_disable", RECORD)
        == f"Disabled 0 jobs. Skipped 1, already disabled: {RECORD} (0 entries).\n"
    )


def test_disable_refuses_an_unregistered_job_with_a_suggestion() -> None:
    EntryFactory()

    with pytest.raises(CommandError) as raised:
        run("iq_disable", NOOP, "tests.testapp.jobs.recrd")

    assert str(raised.value).startswith(
        "'tests.testapp.jobs.recrd' is not a registered job. Did you mean 'tests.testapp.jobs.record'?"
    )
    assert not DisabledJob.objects.exists(), "nothing is disabled when one name is wrong"


def test_enable_returns_entries_to_pending_or_deferred_by_their_run_at() -> None:
    DisabledJobFactory(job_name=RECORD)
    EntryFactory.create_batch(2, disabled=True)
    EntryFactory(disabled=True, run_at=timezone.now() + timedelta(hours=1))

    output = run("iq_enable", RECORD, NOOP)

    assert output == (f"Enabled 1 job: {RECORD} (3 entries). Skipped 1, not disabled: {NOOP}.\n")
    assert Entry.objects.pending().count() == 2
    assert Entry.objects.initial().count() == 1
    assert not DisabledJob.objects.exists()


def test_enable_accepts_a_disabled_job_that_is_no_longer_registered() -> None:
    DisabledJobFactory(job_name="gone.jobs.old")
    EntryFactory(job_name="gone.jobs.old", disabled=True)

    output = run("iq_enable", "gone.jobs.old")

    assert output == "Enabled 1 job: gone.jobs.old (1 entry).\n"
    assert not DisabledJob.objects.exists()


def test_enable_refuses_an_unknown_job() -> None:
    with pytest.raises(CommandError, match=r"'nope\.job' is not a registered job"):
        run("iq_enable", "nope.job")


# -- iq_cancel -------------------------------------------------------------------------------


def test_cancel_deletes_waiting_entries_and_skips_running_ones() -> None:
    waiting = EntryFactory()
    deferred = EntryFactory(deferred=True)
    running = EntryFactory(locked=True)

    output = run(
        "iq_cancel", "--id", str(waiting.pk), str(deferred.pk), "--id", str(running.pk), "999999"
    )

    assert output == (
        f"Cancelled 2 entries: {waiting.pk}, {deferred.pk}. "
        f"Skipped 1, being run by a worker: {running.pk}. "
        "Not found: 999999 (finished, failed for good or already cancelled).\n"
    )
    assert list(Entry.objects.values_list("pk", flat=True)) == [running.pk]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "the following arguments are required: --id"),
        (["--id", "x"], "expected a whole number, got 'x'"),
        (["--id", "0"], "must be greater than zero, got 0"),
    ],
)
def test_cancel_refuses_bad_ids(args: list[str], message: str) -> None:
    entry = EntryFactory()

    with pytest.raises(CommandError, match=message):
        run("iq_cancel", *args)

    assert Entry.objects.filter(pk=entry.pk).exists()


# -- iq_requeue ------------------------------------------------------------------------------


def test_requeue_by_id_enqueues_a_fresh_entry_for_each_final_failure() -> None:
    first, second = EntryErrorFactory.create_batch(2)
    retried = EntryErrorFactory(is_final=False)

    output = run("iq_requeue", "--id", str(first.pk), "--id", str(second.pk), str(retried.pk))

    new = list(Entry.objects.order_by("pk").values_list("pk", flat=True))
    assert output == (
        f"Requeued 2 failed entries: {first.pk}, {second.pk}. New entries: {new[0]}, {new[1]}. "
        f"Skipped 1, not a final failure, or already requeued: {retried.pk}.\n"
    )
    assert sorted(Entry.objects.pending().values_list("args", flat=True)) == sorted(
        [first.args, second.args]
    )
    assert EntryError.objects.failed().count() == 0


def test_requeue_refuses_unknown_ids_before_requeueing_any() -> None:
    error = EntryErrorFactory()

    with pytest.raises(CommandError, match="No error record with id 999999; nothing was requeued"):
        run("iq_requeue", "--id", str(error.pk), "999999")

    assert not Entry.objects.exists()


def test_requeue_by_filters_requeues_only_matching_failures() -> None:
    EntryErrorFactory.create_batch(2, exception_class="builtins.KeyError")
    EntryErrorFactory(exception_class="builtins.KeyError", job_name=NOOP)
    EntryErrorFactory(exception_class="builtins.KeyError", queue__name="emails")
    EntryErrorFactory()

    output = run(
        "iq_requeue", "--job", RECORD, "--exception", "builtins.KeyError", "--queue", "default"
    )

    assert output == (
        "Requeued 2 failed entries matching job=tests.testapp.jobs.record "
        "exception_class=builtins.KeyError queue=default.\n"
    )
    assert Entry.objects.count() == 2
    assert EntryError.objects.failed().count() == 3


def test_requeue_all_failed_requeues_every_failure() -> None:
    EntryErrorFactory.create_batch(3)
    EntryErrorFactory(queue__name="emails")

    assert run("iq_requeue", "--all-failed") == "Requeued 4 failed entries.\n"
    assert Entry.objects.count() == 4


def test_requeue_dry_run_counts_and_changes_nothing() -> None:
    errors = EntryErrorFactory.create_batch(3)
    EntryErrorFactory(requeued_at=timezone.now())

    assert run("iq_requeue", "--all-failed", "--dry-run") == "Would requeue 3 failed entries.\n"
    assert run("iq_requeue", "--queue", "default", "--dry-run") == (
        "Would requeue 3 failed entries matching queue=default.\n"
    )
    assert run("iq_requeue", "--id", str(errors[0].pk), "--dry-run") == (
        "Would requeue 1 failed entry.\n"
    )
    assert not Entry.objects.exists()
    assert EntryError.objects.failed().count() == 3


def test_requeue_proposes_the_stored_exception_classes_ending_with_a_name_given_alone() -> None:
    EntryErrorFactory(exception_class="shop.models.Order.DoesNotExist")
    EntryErrorFactory(exception_class="shop.models.Customer.DoesNotExist")
    EntryErrorFactory(exception_class="shop.models.Order.DoesNotExist")
    EntryErrorFactory(exception_class="shop.models.Coupon.DoesNotExist", is_final=False)
    EntryErrorFactory(exception_class="shop.errors.NotADoesNotExist")
    EntryErrorFactory(exception_class="builtins.KeyError")

    output = run("iq_requeue", "--exception", "DoesNotExist")
    dry_run = run("iq_requeue", "--exception", "Order.DoesNotExist", "--dry-run")

    assert output == (
        "Requeued 0 failed entries matching exception_class=DoesNotExist. Exception classes "
        "are stored with their module: try --exception shop.models.Customer.DoesNotExist or "
        "--exception shop.models.Order.DoesNotExist.\n"
    )
    assert dry_run == (
        "Would requeue 0 failed entries matching exception_class=Order.DoesNotExist. Exception "
        "classes are stored with their module: try --exception "
        "shop.models.Order.DoesNotExist.\n"
    )
    assert not Entry.objects.exists()


def test_requeue_says_when_no_stored_exception_class_ends_with_the_name() -> None:
    EntryErrorFactory(exception_class="builtins.KeyError")

    output = run("iq_requeue", "--exception", "DoesNotExist")
    other_queue = run("iq_requeue", "--exception", "KeyError", "--queue", "emails")
    with_module = run("iq_requeue", "--exception", "shop.models.Order.DoesNotExist")

    assert output == (
        "Requeued 0 failed entries matching exception_class=DoesNotExist. Exception classes "
        "are stored with their module, as in builtins.ValueError; no failed entry has one "
        "ending in .DoesNotExist.\n"
    )
    assert other_queue.endswith(
        "no failed entry matching the other filters has one ending in .KeyError.\n"
    )
    assert with_module == (
        "Requeued 0 failed entries matching exception_class=shop.models.Order.DoesNotExist.\n"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "Say which failed entries to requeue: --id N, one or more of --job"),
        (["--id", "1", "--job", RECORD], "Give either --id or --job, not both."),
        (["--id", "1", "--all-failed"], "Give either --id or --all-failed, not both."),
        (
            ["--all-failed", "--queue", "default"],
            "--all-failed requeues every failed entry and cannot be combined with --queue",
        ),
        (["--job", " "], "argument --job: must not be empty"),
        (["--queue", "emial"], r"Unknown queue: 'emial' \(did you mean 'emails'\?\)"),
        (["--id", "-3"], "must be greater than zero, got -3"),
    ],
)
def test_requeue_refuses_bad_input(args: list[str], message: str) -> None:
    EntryErrorFactory()

    with pytest.raises(CommandError, match=message):
        run("iq_requeue", *args)

    assert not Entry.objects.exists()


# -- iq_cron ---------------------------------------------------------------------------------


def test_cron_list_prints_a_table_of_cron_jobs() -> None:
    CronJobFactory(
        name="nightly", schedule="0 3 * * *", next_run_at=datetime(2030, 1, 1, 3, tzinfo=UTC)
    )
    CronJobFactory(name="weekly", schedule="0 4 * * 1", disabled=True)

    lines = run("iq_cron", "list").splitlines()

    assert lines[0].split() == [
        "NAME",
        "SCHEDULE",
        "TIMEZONE",
        "JOB",
        "QUEUE",
        "STATUS",
        "ENTRY",
        "NEXT",
        "RUN",
        "LAST",
        "RUN",
        "LAST",
        "OUTCOME",
    ]
    assert lines[1].split() == [
        "nightly",
        "0",
        "3",
        "*",
        "*",
        "*",
        "UTC",
        NOOP,
        "default",
        "enabled",
        "-",
        "2030-01-01",
        "03:00:00",
        "UTC",
        "-",
        "-",
    ]
    assert lines[2].split()[:2] == ["weekly", "0"]
    assert lines[2].split()[-6:] == ["default", "disabled", "-", "-", "-", "-"]


def test_cron_list_shows_intervals_one_offs_a_disabled_job_and_the_last_outcome() -> None:
    CronJobFactory(name="often", schedule="", every_seconds=5400, last_outcome="failed")
    CronJobFactory(
        name="once",
        schedule="",
        run_once_at=datetime(2030, 1, 1, 9, tzinfo=UTC),
        fired_at=datetime(2030, 1, 1, 9, tzinfo=UTC),
        job_name="tests.testapp.jobs.record",
        args=["x"],
        last_outcome="succeeded",
    )
    operations.disable([NOOP], operations.Actor.of_command("test"))

    lines = run("iq_cron", "list").splitlines()

    assert lines[1].split() == [
        "often",
        "every",
        "1h30m",
        "UTC",
        NOOP,
        "default",
        "enabled,",
        "job",
        "disabled",
        "-",
        "-",
        "-",
        "failed",
    ]
    assert lines[2].split()[:5] == ["once", "once", "at", "2030-01-01", "09:00:00"]
    assert lines[2].split()[-6:] == ["default", "done", "-", "-", "-", "succeeded"]


def test_cron_list_shows_an_ended_schedule_as_done_with_its_reason() -> None:
    reason = "'0 0 30 2 *' has no fire time after 2026-05-01 12:00:00 UTC."
    cron_job = CronJobFactory(name="never", schedule="0 3 * * *")
    CronJob.objects.filter(pk=cron_job.pk).update(
        schedule="0 0 30 2 *", ended_at=datetime(2026, 5, 1, 12, tzinfo=UTC), end_reason=reason
    )

    lines = run("iq_cron", "list").splitlines()
    document = json.loads(run("iq_cron", "list", "--json"))

    assert f"  done    -      ended: {reason}  -" in lines[1], lines[1]
    (row,) = document["cron_jobs"]
    assert row["is_done"] and row["end_reason"] == reason
    assert row["ended_at"] == "2026-05-01T12:00:00Z"


def test_cron_list_json_matches_the_database() -> None:
    nightly = CronJobFactory(name="nightly")
    CronJob.objects.schedule_next(nightly, timezone.now(), max_attempts=3)
    nightly.refresh_from_db()

    document = json.loads(run("iq_cron", "list", "--json"))

    (row,) = document["cron_jobs"]
    assert row == {
        "name": "nightly",
        "schedule": "*/5 * * * *",
        "every_seconds": None,
        "at": None,
        "timezone": "UTC",
        "job": NOOP,
        "queue": "default",
        "priority": 0,
        "is_enabled": True,
        "is_declared": False,
        "is_done": False,
        "job_disabled": False,
        "entry_state": "initial",
        "next_run_at": row["next_run_at"],
        "fired_at": None,
        "ended_at": None,
        "end_reason": None,
        "last_run_at": None,
        "last_outcome": None,
        "last_entry_id": None,
    }
    assert nightly.next_run_at is not None
    assert timestamp(row["next_run_at"]) == nightly.next_run_at


def test_cron_list_with_no_cron_jobs_says_where_to_declare_them() -> None:
    assert run("iq_cron", "list") == (
        'No cron jobs. Declare them in DJANGO_IQ["CRON"] or in the admin.\n'
    )


def test_cron_enable_and_disable_change_only_what_needs_changing() -> None:
    CronJobFactory(name="nightly")
    CronJobFactory(name="weekly", disabled=True)

    assert run("iq_cron", "disable", "nightly", "weekly") == (
        "Disabled 1 cron job: nightly. Skipped 1, already disabled: weekly.\n"
    )
    assert dict(CronJob.objects.values_list("name", "is_enabled")) == {
        "nightly": False,
        "weekly": False,
    }
    assert (
        run("iq_cron", "enable", "nightly", "weekly") == "Enabled 2 cron jobs: nightly, weekly.\n"
    )
    assert set(CronJob.objects.values_list("is_enabled", flat=True)) == {True}


def test_cron_run_now_makes_the_waiting_entry_pending() -> None:
    nightly = CronJobFactory(name="nightly")
    CronJob.objects.schedule_next(nightly, timezone.now(), max_attempts=3)

    assert run("iq_cron", "run-now", "nightly") == "Made pending now 1 cron job: nightly.\n"
    assert Entry.objects.pending().get().cron_job_id == nightly.pk
    assert run("iq_cron", "run-now", "nightly") == (
        "Made pending now 0 cron jobs. Skipped 1, disabled, done, or already pending or running: nightly.\n"
    )


def test_cron_run_now_refuses_a_disabled_cron_job() -> None:
    CronJobFactory(name="nightly", disabled=True)

    with pytest.raises(CommandError) as raised:
        run("iq_cron", "run-now", "nightly")

    assert str(raised.value) == (
        "Disabled cron job nightly cannot run; enable first: manage.py iq_cron enable nightly"
    )
    assert not Entry.objects.exists()


def test_cron_refuses_unknown_names_with_a_suggestion() -> None:
    CronJobFactory(name="nightly")

    with pytest.raises(CommandError) as raised:
        run("iq_cron", "disable", "nightly", "nighty")

    assert str(raised.value) == (
        "'nighty' is not a cron job (did you mean 'nightly'?). Cron jobs: nightly."
    )
    assert CronJob.objects.get().is_enabled, "nothing changes when one name is wrong"


def test_cron_explains_a_declared_cron_job_the_leader_has_not_created() -> None:
    with iq_settings_with(CRON={"tick": {"job": NOOP, "schedule": "* * * * *"}}):
        with pytest.raises(CommandError) as raised:
            run("iq_cron", "enable", "tick")

    assert str(raised.value) == (
        "'tick' is declared in DJANGO_IQ[\"CRON\"] but the leader has not created it yet "
        "(is manage.py runleader running?). Cron jobs: none."
    )


def test_cron_needs_an_action() -> None:
    with pytest.raises(CommandError, match="the following arguments are required: ACTION"):
        run("iq_cron")


# -- every command ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "done"),
    [
        (["iq_pause", "default"], lambda: Queue.objects.get(name="default").is_paused),
        (["iq_disable", RECORD], lambda: DisabledJob.objects.exists()),
        (["iq_requeue", "--all-failed"], lambda: Entry.objects.exists()),
        (["iq_cancel", "--id", "1"], lambda: True),
        (["iq_cron", "disable", "nightly"], lambda: not CronJob.objects.get().is_enabled),
    ],
)
def test_verbosity_zero_acts_and_prints_nothing(args: list[str], done: Any) -> None:
    QueueFactory(name="default")
    CronJobFactory(name="nightly")
    EntryErrorFactory()

    assert run(*args, verbosity=0) == ""
    assert done()


def test_status_names_jobs_no_live_worker_serves_and_their_oldest_wait() -> None:
    from datetime import timedelta

    from django.utils import timezone

    from django_iq.models import Entry, Queue, Worker

    Queue.objects.ensure("default")
    long_ago = timezone.now() - timedelta(minutes=10)
    for index in range(3):
        Entry.objects.create(
            queue_id="default",
            job_name="billing.jobs.invoice",
            lock_key=f"e:inv{index}",
            enqueued_at=long_ago + timedelta(seconds=index),
        )
    Entry.objects.create(queue_id="default", job_name="reports.jobs.daily", lock_key="e:daily")
    Worker.objects.register(
        name="w:1",
        role="worker",
        host="h",
        pid=1,
        queues=[],
        processing_threads=1,
        job_names=["reports.jobs.daily"],
    )

    document = json.loads(run("iq_status", "--json"))
    text = run("iq_status")

    (unserved,) = document["unserved_jobs"]
    assert (unserved["job_name"], unserved["waiting"]) == ("billing.jobs.invoice", 3)
    assert 590 <= unserved["oldest_waiting_seconds"] <= 700
    assert "Jobs no live worker has registered" in text and "billing.jobs.invoice" in text
    assert "reports.jobs.daily" not in text.split("Jobs no live worker")[1]
