"""Per-job caps and rate limits, claimed on the test database: ``max_concurrency`` in the
cluster, ``max_concurrency_per_node`` per host, ``rate_limit`` starts per period, and jobs
without limits flowing beside them (docs/howto/job-limits.md)."""

from __future__ import annotations

import re
import time
from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.urls import reverse

from django_iq import job
from django_iq.exceptions import InvalidJobOptions
from django_iq.limited_claims import LimitedClaims
from django_iq.managers import Claim
from django_iq.models import Entry, GroupLock, JobLimit, JobStart, Worker
from django_iq.worker import WorkerProcess
from tests.conftest import held_in_another_session
from tests.factories import WorkerFactory, most_at_once
from tests.testapp.jobs import capped, one_at_a_time, rate_limited, record
from tests.testapp.models import JobRun, RecordedRun

pytestmark = pytest.mark.django_db(transaction=True)


def claim(target: object, worker: Worker, wanted: int = 10) -> list[Claim]:
    limits = target.options.limits()  # type: ignore[attr-defined]
    name = target.name  # type: ignore[attr-defined]
    return Entry.objects.claim(worker, wanted, "default", limited=(name, limits), is_capped=True)


def test_claims_stay_within_the_cluster_cap_and_the_per_node_cap() -> None:
    capped.enqueue_many([((f"c{i}",), {}) for i in range(10)])
    a1, a2 = WorkerFactory(host="node-a"), WorkerFactory(host="node-a")
    b1 = WorkerFactory(host="node-b")

    assert len(claim(capped, a1)) == 2, "2 per node"
    assert claim(capped, a2) == [], "node-a is at its 2"
    assert len(claim(capped, b1)) == 1, "3 in the cluster"
    assert claim(capped, b1) == []
    assert GroupLock.objects.filter(job_name=capped.name).count() == 3

    GroupLock.objects.filter(worker=a1).first().delete()  # type: ignore[union-attr]
    assert len(claim(capped, a2)) == 1, "one finished on node-a: room for one there"


def test_a_rate_limit_counts_starts_over_the_last_period() -> None:
    rate_limited.enqueue_many([((f"r{i}",), {}) for i in range(12)])
    worker = WorkerFactory()

    assert sum(len(c.entries) for c in claim(rate_limited, worker)) == 5
    GroupLock.objects.all().delete()  # they ran
    assert claim(rate_limited, worker) == [], "5 started within the second"

    for start in JobStart.objects.all():  # a second and more went by
        start.started_at -= timedelta(seconds=1.5)
        start.save()
    assert sum(len(c.entries) for c in claim(rate_limited, worker)) == 5
    assert JobStart.objects.count() == 5, "starts out of the window were deleted"


def test_a_job_found_at_its_cap_is_looked_at_less_often_until_a_run_of_it_ends_here() -> None:
    one_at_a_time.enqueue_many([((f"o{i}",), {}) for i in range(3)])
    claim(one_at_a_time, WorkerFactory())  # running elsewhere: the cap of 1 is taken
    worker = WorkerFactory()
    limited = LimitedClaims(
        worker, {one_at_a_time.name: one_at_a_time.options.limits()}, free_threads=lambda: 1
    )
    key = ("default", one_at_a_time.name)

    delays = []
    for _ in range(5):
        limited._full_until.pop(key, None)  # due again now
        begun = time.monotonic()
        assert limited.claim("default", 1) == []
        delays.append(limited._full_until[key] - begun)
    # 0.5 s doubled at each look in a row that finds no room, up to 4 s, each within 0.5x-1.5x.
    for delay, base in zip(delays, [0.5, 1.0, 2.0, 4.0, 4.0], strict=True):
        assert base * 0.5 <= delay <= base * 1.5 + 0.1, delays

    limited.finished(one_at_a_time.name)  # a run of it ended here: looked at at once
    assert key not in limited._full_until
    GroupLock.objects.all().delete()
    assert len(limited.claim("default", 1)) == 1
    limited._full_until.pop(key, None)
    assert limited.claim("default", 1) == []
    assert limited._full_until[key] - time.monotonic() <= 0.75 + 0.1, "the count starts over"


def test_a_group_claim_of_a_capped_job_takes_only_that_jobs_entries() -> None:
    one_at_a_time.using(group_key="g").enqueue("capped-in-group")
    record.using(group_key="g").enqueue("plain-in-group")

    (taken,) = claim(one_at_a_time, WorkerFactory())

    assert [e.job_name for e in taken.entries] == [one_at_a_time.name]


def test_a_capped_job_never_holds_up_the_other_jobs_of_its_queue() -> None:
    one_at_a_time.enqueue_many([((f"slow-{i}",), {"seconds": 0.2}) for i in range(6)])
    record.enqueue_many([((f"quick-{i}",), {}) for i in range(40)])

    assert WorkerProcess(burst=True, processing_threads=4).run(install_signal_handlers=False) == 0

    runs = list(RecordedRun.objects.values_list("started_at", "finished_at"))
    assert len(runs) == 6 and most_at_once(runs) == 1, "max_concurrency=1"
    quick = list(JobRun.objects.values_list("finished_at", flat=True))
    assert len(quick) == 40
    assert max(quick) < max(finished for _, finished in runs if finished), (
        "the other jobs ran beside the capped one, not after it"
    )
    assert not Entry.objects.exists() and not GroupLock.objects.exists()


def test_a_worker_publishes_the_limits_of_its_jobs_and_drops_removed_ones() -> None:
    JobLimit.objects.create(job_name=record.name, max_concurrency=7)  # a cap since removed

    WorkerProcess(burst=True, processing_threads=1).run(install_signal_handlers=False)

    rows = {row.job_name: row for row in JobLimit.objects.all()}
    assert record.name not in rows
    assert (rows[capped.name].max_concurrency, rows[capped.name].max_concurrency_per_node) == (
        3,
        2,
    )
    assert (rows[rate_limited.name].rate_count, rows[rate_limited.name].rate_period_seconds) == (
        5,
        1.0,
    )


@pytest.mark.skipif(
    connection.vendor == "sqlite", reason="SQLite has no row locks another session can hold"
)
def test_a_worker_starting_beside_a_claim_holding_the_row_does_not_wait_for_it() -> None:
    limits = {capped.name: capped.options.limits()}
    JobLimit.objects.publish(limits)

    # A claim of the job counting under its row's lock.
    with held_in_another_session(
        lambda: JobLimit.objects.select_for_update().get(job_name=capped.name)
    ):
        began = time.monotonic()
        JobLimit.objects.publish(limits)  # the limits the row holds: nothing to write
        assert time.monotonic() - began < 2, "read without waiting for the row"

    changed = {capped.name: one_at_a_time.options.limits()}  # a redeploy changed the cap
    JobLimit.objects.publish(changed)
    assert JobLimit.objects.get(job_name=capped.name).max_concurrency == 1


@pytest.mark.parametrize(
    ("option", "bad"),
    [
        ("max_concurrency", 0),
        ("max_concurrency", True),
        ("max_concurrency", "3"),
        ("max_concurrency_per_node", -1),
        ("rate_limit", "100"),
        ("rate_limit", "0/m"),
        ("rate_limit", "10/week"),
        ("rate_limit", 100),
        ("rate_limit", "5/2d"),
    ],
)
def test_bad_limits_are_refused_when_the_job_is_declared(option: str, bad: object) -> None:
    with pytest.raises(InvalidJobOptions, match=option):
        job(**{option: bad})


def test_limits_belong_to_the_job_not_to_one_enqueue() -> None:
    with pytest.raises(InvalidJobOptions, match="Unknown option 'max_concurrency'"):
        record.using(max_concurrency=2)
    assert not Entry.objects.exists()


def limits_in_use() -> None:
    """capped: 2 running on node-a and 1 on node-b; rate_limited: 4 starts just now."""
    a, b = WorkerFactory(host="node-a"), WorkerFactory(host="node-b")
    JobLimit.objects.publish(
        {capped.name: capped.options.limits(), rate_limited.name: rate_limited.options.limits()}
    )
    capped.enqueue_many([((f"c{i}",), {}) for i in range(5)])
    rate_limited.enqueue_many([((f"r{i}",), {}) for i in range(4)])
    claim(capped, a)
    claim(capped, b, wanted=1)
    claim(rate_limited, b)


def test_the_dashboard_shows_running_against_caps_and_starts_against_rate_limits(
    admin_client: Client,
) -> None:
    limits_in_use()

    html = admin_client.get(reverse("admin:django_iq_dashboard")).content.decode()

    rows = {
        name: cells
        for name, *cells in re.findall(
            r'data-limited-job="([^"]+)">.*?<td class="num">([^<]*)</td>'
            r'<td class="num">([^<]*)</td><td class="num">([^<]*)</td>',
            html,
        )
    }
    assert rows[capped.name] == ["3 / 3", "2 / 2", "-"]
    assert rows[rate_limited.name] == ["-", "-", "4 / 5 per 1 s"]


def test_the_admin_lists_each_limited_job_with_what_it_uses(admin_client: Client) -> None:
    limits_in_use()

    html = admin_client.get(reverse("admin:django_iq_joblimit_changelist")).content.decode()

    assert "3 / 3" in html and "2 / 2" in html and "4 / 5 per 1 s" in html
