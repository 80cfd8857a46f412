"""``iq_status`` through call_command: its JSON and its tables, the docs' example, ``--watch``,
and the jobs no live worker serves."""

from __future__ import annotations

import functools
import io
import json
import re
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from django_iq import snapshot
from django_iq.management.commands import iq_status
from django_iq.management.output import render_table
from django_iq.models import (
    Entry,
    EntryError,
    Queue,
    QueueTotal,
    Worker,
)
from django_iq.snapshot import read_snapshot
from django_iq.table_status import TableStatus, retention_behind
from tests.conftest import iq_settings_with
from tests.factories import (
    EntryErrorFactory,
    EntryFactory,
    LeaderLeaseFactory,
    QueueFactory,
    WorkerFactory,
)
from tests.ops.conftest import close_to, run, timestamp

pytestmark = pytest.mark.django_db


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
        "autoscale",
        "generated_at",
        "healthy",
        "invariant_holds",
        "leader",
        "leader_live",
        "merged",
        "problems",
        "queues",
        "server_sessions",
        "tables",
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


def _docs_table(
    table: str,
    rows: int,
    size: int,
    oldest: float | None = None,
    setting: str = "",
    retention: float | None = None,
) -> TableStatus:
    return TableStatus(
        model="",
        table=f"django_iq_{table}",
        database="default",
        size_bytes=size,
        estimated_rows=rows,
        retention_setting=setting,
        retention_seconds=retention,
        oldest_age_seconds=oldest,
        is_behind=retention is not None and retention_behind(oldest, retention),
    )


DAY = 86_400.0
DOCS_TABLES = [
    _docs_table("apitoken", 3, 49_152),
    _docs_table("batch", 120, 106_496),
    _docs_table("cronjob", 14, 49_152),
    _docs_table("disabledjob", 0, 24_576),
    _docs_table("entry", 463, 1_236_992),
    _docs_table("entrydependency", 0, 24_576),
    _docs_table(
        "entryerror", 1_208, 3_416_064, 6 * DAY + 82_800, "ERROR_RETENTION_SECONDS", 7 * DAY
    ),
    _docs_table("grouplock", 8, 57_344),
    _docs_table("joblimit", 2, 24_576),
    _docs_table("jobminute", 52_110, 9_838_592, DAY + 40, "METRICS_RETENTION_SECONDS", DAY),
    _docs_table("jobstart", 310, 65_536),
    _docs_table("leaderlease", 1, 16_384),
    _docs_table(
        "operatoraction", 96, 81_920, 41 * DAY + 7_200, "AUDIT_RETENTION_SECONDS", 90 * DAY
    ),
    _docs_table("queue", 3, 24_576),
    _docs_table("queuedepthminute", 4_320, 1_146_880, DAY + 40, "METRICS_RETENTION_SECONDS", DAY),
    _docs_table(
        "queuelatencyminute", 25_900, 4_202_496, DAY + 40, "METRICS_RETENTION_SECONDS", DAY
    ),
    _docs_table("queueminute", 4_318, 1_318_912, DAY + 40, "METRICS_RETENTION_SECONDS", DAY),
    _docs_table("queuetotal", 3, 24_576),
    _docs_table(
        "runoutcome", 2_481_300, 1_912_602_624, 2 * DAY + 10_800, "OUTCOME_RETENTION_SECONDS", DAY
    ),
    _docs_table("uniquekey", 0, 32_768),
    _docs_table("worker", 12, 40_960, 79_800, "WORKER_RETENTION_SECONDS", DAY),
]


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
    # The tables of a cluster that has run for weeks, pruning behind on the outcome records.
    monkeypatch.setattr(iq_status, "read_table_status", lambda now: DOCS_TABLES)

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
