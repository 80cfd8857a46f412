"""Caps and rate limits per key, claimed on the test database: ``@job(max_concurrency=N,
concurrency_key=...)`` holds each value of the key to N running, ``rate_limit_key`` counts each
value's starts on its own, a key's backlog never holds up the other keys of the job, and a key
that cannot be taken from a call is refused before anything is written
(docs/howto/job-limits.md)."""

from __future__ import annotations

import re
import time
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

import django_iq
from django_iq import enqueue_many, job, operations
from django_iq.compaction import compact
from django_iq.exceptions import InvalidJobArguments, InvalidJobOptions
from django_iq.limited_claims import LIMITED_RETRY_SECONDS, LimitedClaims
from django_iq.managers import Claim
from django_iq.models import Batch, CronJob, Entry, GroupLock, JobStart, Worker
from django_iq.registry import catalog
from django_iq.testing import run_jobs
from tests.factories import EntryErrorFactory, WorkerFactory
from tests.testapp.jobs import capped, per_account, per_tenant
from tests.testapp.models import RecordedRun

pytestmark = pytest.mark.django_db(transaction=True)

ACTOR = operations.Actor.of_command("test")


def claim(target: Any, worker: Worker, wanted: int = 20) -> list[Claim]:
    limited = (target.name, target.options.limits())
    return Entry.objects.claim(worker, wanted, "default", limited=limited, is_capped=True)


def claimed_keys(claims: list[Claim], field: str = "concurrency_key") -> Counter[str]:
    return Counter(getattr(entry, field) for c in claims for entry in c.entries)


def test_each_value_of_the_key_is_held_to_the_cap_on_its_own() -> None:
    for account in ("a", "b", "c"):
        per_account.enqueue_many([((account, f"{account}{i}"), {}) for i in range(5)])
    first, second = WorkerFactory(), WorkerFactory()

    assert claimed_keys(claim(per_account, first)) == {"a": 2, "b": 2, "c": 2}
    assert claim(per_account, second) == [], "every account is at its cap of 2"
    assert set(GroupLock.objects.values_list("concurrency_key", flat=True)) == {"a", "b", "c"}

    GroupLock.objects.filter(concurrency_key="b").first().delete()  # type: ignore[union-attr]
    assert claimed_keys(claim(per_account, second)) == {"b": 1}, "one of b's runs ended"


def test_a_keys_backlog_never_holds_up_the_other_keys() -> None:
    # One account's 200 entries come first; five others' one each come after all of them.
    per_account.enqueue_many([(("big", f"big{i}"), {}) for i in range(200)])
    per_account.enqueue_many([((f"small{k}", f"small{k}"), {}) for k in range(5)])
    worker = WorkerFactory()

    taken = claimed_keys(claim(per_account, worker, wanted=8))

    assert taken == {"big": 2, **{f"small{k}": 1 for k in range(5)}}, (
        "the claim read past the full account's backlog to the others, in one pass"
    )


def test_a_claim_spreads_over_the_keys_in_the_order_their_entries_came() -> None:
    per_account.enqueue_many([(("x", f"x{i}"), {}) for i in range(4)])
    per_account.enqueue_many([(("y", f"y{i}"), {}) for i in range(4)])
    per_account.enqueue_many([(("z", f"z{i}"), {}) for i in range(4)])

    claims = claim(per_account, WorkerFactory(), wanted=4)

    tokens = sorted(entry.args[1] for c in claims for entry in c.entries)
    assert tokens == ["x0", "x1", "y0", "z0"], "a round over x, y, z, then x again"


def test_a_rate_limit_per_key_counts_each_values_starts_on_its_own() -> None:
    for tenant in ("t1", "t2", "t3"):
        per_tenant.enqueue_many([((tenant, f"{tenant}-{i}"), {}) for i in range(5)])
    worker = WorkerFactory()

    taken = claimed_keys(claim(per_tenant, worker), "rate_limit_key")
    assert taken == {"t1": 3, "t2": 3, "t3": 3}, "3 starts a second per tenant"
    assert Counter(JobStart.objects.values_list("rate_limit_key", flat=True)) == taken
    GroupLock.objects.all().delete()  # they ran
    assert claim(per_tenant, worker) == [], "each tenant started 3 within the second"

    JobStart.objects.filter(rate_limit_key="t2").update(
        started_at=timezone.now() - timedelta(seconds=2)
    )
    assert claimed_keys(claim(per_tenant, worker), "rate_limit_key") == {"t2": 3}, (
        "t2's window passed"
    )


def test_keys_come_from_the_call_by_name_or_position_and_are_stored() -> None:
    by_position = per_account.enqueue("acct-1", "p")
    by_name = per_account.enqueue(account_id=42, token="n")
    rated = per_tenant.enqueue(tenant="acme", token="r")

    assert Entry.objects.get(pk=by_position.pk).concurrency_key == "acct-1"
    assert Entry.objects.get(pk=by_name.pk).concurrency_key == "42", "an integer key, as text"
    stored = Entry.objects.get(pk=rated.pk)
    assert (stored.rate_limit_key, stored.concurrency_key) == ("acme", "")


def test_the_entries_run_in_process_with_their_keys() -> None:
    per_account.enqueue_many([((account, f"{account}-run"), {}) for account in ("a", "b")])

    outcomes = run_jobs()

    assert sorted(outcome.status for outcome in outcomes) == ["succeeded", "succeeded"]
    assert sorted(RecordedRun.objects.values_list("group_key", flat=True)) == ["a", "b"]
    assert not GroupLock.objects.exists()


def refuses_keys(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    raise KeyError("no tenant in this call")


@job(rate_limit="10/s", rate_limit_key=refuses_keys)
def keyless(token: str) -> str:
    return token


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: per_account.enqueue(None, "t"),
            "concurrency key comes from argument 'account_id'",
        ),
        (lambda: per_account.enqueue(["a"], "t"), "must be a string or an integer"),
        (lambda: per_account.enqueue("x" * 300, "t"), "it must have 1 to 198"),
        (lambda: keyless.enqueue("t"), "rate limit key comes from rate_limit_key refuses_keys"),
        (
            lambda: enqueue_many(per_account, [(("a", "ok"), {}), ((None, "bad"), {})]),
            "concurrency key comes from argument 'account_id', which is None",
        ),
    ],
)
def test_a_key_that_cannot_be_taken_from_the_call_is_refused_and_nothing_is_written(
    call: Any, message: str
) -> None:
    with pytest.raises(InvalidJobArguments, match=re.escape(message)):
        call()
    assert not Entry.objects.exists()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"concurrency_key": "account_id"}, "give max_concurrency too"),
        ({"rate_limit_key": "account_id", "max_concurrency": 2}, "give rate_limit too"),
        ({"max_concurrency": 2, "concurrency_key": "tenant"}, "'tenant' is not a named parameter"),
        ({"max_concurrency": 2, "concurrency_key": 7}, "must be a parameter name or a callable"),
        ({"max_concurrency": 2, "concurrency_key": ""}, "must be a parameter name or a callable"),
    ],
)
def test_key_options_are_checked_when_the_job_is_declared(
    options: dict[str, Any], message: str
) -> None:
    def account_job(account_id: str) -> None: ...

    with pytest.raises(InvalidJobOptions, match=re.escape(message)):
        job(name="tests.account_job", **options)(account_job)


def test_key_options_belong_to_the_job_not_to_one_enqueue() -> None:
    with pytest.raises(InvalidJobOptions, match="Unknown option 'concurrency_key' for using"):
        per_account.using(concurrency_key="token")


def test_a_requeued_entry_and_a_cron_entry_get_their_keys_from_their_arguments() -> None:
    error = EntryErrorFactory(job_name=per_account.name, args=["acct-9", "again"])
    operations.requeue([error.pk], ACTOR)
    assert Entry.objects.get(job_name=per_account.name).concurrency_key == "acct-9"

    CronJob.objects.create(
        name="nightly-acct",
        schedule="0 3 * * *",
        job_name=per_account.name,
        args=["acct-7", "nightly"],
        queue_id="default",
    )
    assert CronJob.objects.ensure_entries(timezone.now(), catalog) == 1
    assert Entry.objects.get(cron_job__name="nightly-acct").concurrency_key == "acct-7"


def test_the_dashboard_shows_what_each_key_uses(admin_client: Client) -> None:
    per_account.enqueue_many([((account, f"{account}-d"), {}) for account in "ab" for _ in "12"])
    per_account.enqueue("c", "c-d")
    per_tenant.enqueue_many([(("acme", f"r{i}"), {}) for i in range(2)])
    worker = WorkerFactory()
    claim(per_account, worker, wanted=4)  # a round over a, b, c, then a again
    claim(per_tenant, worker)

    html = admin_client.get(reverse("admin:django_iq_dashboard")).content.decode()

    job_row = re.search(
        rf'data-limited-job="{re.escape(per_account.name)}">.*?<td class="num">([^<]*)</td>', html
    )
    assert job_row is not None and job_row.group(1) == "4 (2 per key)"
    keys = dict(
        re.findall(
            rf'data-limited-key="{re.escape(per_account.name)}" data-key="([^"]+)">'
            r'<th scope="row">key [^<]*</th><td class="num">([^<]*)</td>',
            html,
        )
    )
    assert keys == {"a": "2 / 2", "b": "1 / 2", "c": "1 / 2"}
    rated = re.search(
        rf'data-limited-key="{re.escape(per_tenant.name)}" data-key="acme">.*?'
        r'<td class="num">-</td><td class="num">-</td><td class="num">([^<]*)</td>',
        html,
    )
    assert rated is not None and rated.group(1) == "2 / 3 per 1 s"

    changelist = admin_client.get(reverse("admin:django_iq_joblimit_changelist")).content
    assert b"4 (2 per key)" in changelist and b"3 per 1 s per key" in changelist


def test_new_work_shortens_the_back_off_of_a_job_limited_per_key() -> None:
    per_account.enqueue_many([(("busy", f"busy{i}"), {}) for i in range(4)])
    claim(per_account, WorkerFactory())  # "busy" is at its cap, elsewhere
    worker = WorkerFactory()
    jobs = {per_account.name: per_account.options.limits(), capped.name: capped.options.limits()}
    limited = LimitedClaims(worker, jobs, free_threads=lambda: 4)
    key, capped_key = ("default", per_account.name), ("default", capped.name)
    for _ in range(4):  # looks in a row that find no room: the back-off grows to seconds
        limited._full_until.pop(key, None)
        assert limited.claim("default", 4) == []
    limited._full_until[key] = limited._full_until[capped_key] = time.monotonic() + 4.0

    per_account.enqueue("quiet", "quiet-0")
    limited.heard_of("default")  # as the worker's listener does on the enqueue's notification

    assert limited._full_until[key] - time.monotonic() <= LIMITED_RETRY_SECONDS
    assert limited._full_until[capped_key] - time.monotonic() > 3.0, "a job-wide cap waits on"
    limited._full_until.pop(key)
    assert claimed_keys(limited.claim("default", 4)) == {"quiet": 1}


def test_a_claim_of_one_entry_goes_to_the_key_running_least() -> None:
    per_account.enqueue_many([(("big", f"big{i}"), {}) for i in range(10)])
    per_account.enqueue_many([(("small", f"small{i}"), {}) for i in range(3)])
    worker = WorkerFactory()

    order = [next(iter(claimed_keys(claim(per_account, worker, wanted=1)))) for _ in range(4)]

    assert order == ["big", "small", "big", "small"], "turns, not big's backlog first"


def fold_ids(calls: list[dict[str, Any]]) -> dict[str, Any]:
    return {"account_id": calls[0]["account_id"], "ids": [i for c in calls for i in c["ids"]]}


@job(group_by="account_id", merge=fold_ids, max_concurrency=1, concurrency_key="account_id")
def sync_account(account_id: str, ids: list[int]) -> None: ...


def test_a_merged_entry_takes_its_keys_from_its_merged_arguments() -> None:
    sync_account.enqueue_many([((account, [i]), {}) for account in "ab" for i in range(2)])

    assert len(compact(job=sync_account.name).merged) == 2

    merged = Entry.objects.filter(job_name=sync_account.name)
    assert sorted(merged.values_list("concurrency_key", flat=True)) == ["a", "b"]
    assert claimed_keys(claim(sync_account, WorkerFactory())) == {"a": 1, "b": 1}


@job(max_concurrency=1, concurrency_key="account_id")
def account_batch_done(account_id: str | None, batch_id: int, succeeded: int, failed: int) -> None:
    """A batch's callback: a cap of one per account."""


def test_a_batch_callback_takes_its_keys_and_a_bad_one_writes_nothing() -> None:
    with django_iq.batch(on_complete=account_batch_done, account_id="acme") as open_batch:
        per_account.enqueue("acme", "in-batch")
    callback = Entry.objects.get(pk=Batch.objects.get(pk=open_batch.id).callback_entry_id)
    assert callback.concurrency_key == "acme"

    with (
        pytest.raises(InvalidJobArguments, match="concurrency key comes from argument"),
        django_iq.batch(on_complete=account_batch_done, account_id=None),
    ):
        per_account.enqueue("acme", "never")
    assert Batch.objects.count() == 1
    assert Entry.objects.filter(job_name=per_account.name).count() == 1, "only the first batch's"


@job(group_by="doc", max_concurrency=1, concurrency_key="tenant")
def edit_doc(doc: str, tenant: str) -> None: ...


def test_a_group_never_takes_an_entry_of_another_key_under_its_lock() -> None:
    edit_doc.enqueue_many([(("X", "A"), {}), (("X", "B"), {}), (("Y", "B"), {})])

    claims = claim(edit_doc, WorkerFactory())

    taken = sorted((entry.args[0], entry.args[1]) for c in claims for entry in c.entries)
    assert taken == [("X", "A"), ("Y", "B")], "B once; (X, B) waits for group X's lock"
    assert dict(GroupLock.objects.values_list("key", "concurrency_key")) == {
        "g:X": "A",
        "g:Y": "B",
    }
