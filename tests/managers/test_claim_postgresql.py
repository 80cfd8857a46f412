"""The single-statement claim on PostgreSQL: one round trip, and the same rules as the general one."""

from __future__ import annotations

import pytest

from django_iq.models import Entry, GroupLock, Queue
from tests.testapp.jobs import record

pytestmark = [pytest.mark.postgresql, pytest.mark.django_db]


def test_claim_of_an_uncapped_queue_is_one_round_trip(django_assert_num_queries) -> None:
    record.enqueue_many([((f"t{i}",), {}) for i in range(5)])
    record.using(group_key="g").enqueue_many([((f"g{i}",), {}) for i in range(3)])

    with django_assert_num_queries(1):
        claims = Entry.objects.claim(None, 10, "default", is_capped=False)

    assert sum(len(c.entries) for c in claims) == 8
    grouped = [c for c in claims if c.lock_key == "g:g"]
    assert len(grouped) == 1 and [e.args[0] for e in grouped[0].entries] == ["g0", "g1", "g2"]
    assert GroupLock.objects.count() == 6
    assert GroupLock.objects.get(key="g:g").entry_id == grouped[0].entries[0].pk
    assert grouped[0].entries[0].kwargs == {} and isinstance(grouped[0].entries[0].args, list)


def test_single_statement_claim_respects_pause_cap_and_existing_locks() -> None:
    record.enqueue_many([((f"t{i}",), {}) for i in range(3)])
    first = Entry.objects.claim(None, 1, "default", is_capped=False)
    assert len(first) == 1

    Queue.objects.pause("default")
    assert Entry.objects.claim(None, 10, "default", is_capped=False) == []
    Queue.objects.resume("default")
    Queue.objects.filter(name="default").update(max_concurrency=5)
    assert Entry.objects.claim(None, 10, "default", is_capped=False) == [], (
        "a stale hint claims nothing"
    )
    Queue.objects.filter(name="default").update(max_concurrency=None)

    rest = Entry.objects.claim(None, 10, "default", is_capped=False)
    assert sorted(e.args[0] for c in rest for e in c.entries) == ["t1", "t2"]


def test_the_claim_reads_a_queue_in_claim_order_even_with_stale_statistics() -> None:
    """Statistics taken while the queue was empty make PostgreSQL expect one row; the claim
    must still walk an index in its own order and stop at the limit, not read the whole queue
    and sort it (that made claims 50x slower behind a burst of enqueues)."""
    from django.db import connection

    from django_iq.queries import claim_sql

    Queue.objects.get_or_create(name="other")
    record.using(queue="other").enqueue_many([((f"o{i}",), {}) for i in range(500)])
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE django_iq_entry")
    record.enqueue_many([((f"t{i}",), {}) for i in range(2000)])
    params = {"queue": "default", "worker": None, "limit": 4, "silent_seconds": 30}

    with connection.cursor() as cursor:
        cursor.execute(
            "EXPLAIN (ANALYZE, FORMAT JSON) " + claim_sql("default", with_worker=False), params
        )
        (plan,) = cursor.fetchone()[0]

    scans = list(_nodes(plan["Plan"], "Relation Name", "django_iq_entry"))
    by_queue = [n for n in scans if "queue" in n.get("Index Cond", "")]
    assert by_queue, plan
    assert all(n["Actual Rows"] <= 4 for n in by_queue), [
        (n.get("Index Name"), n["Actual Rows"]) for n in by_queue
    ]
    assert not [n for n in _nodes(plan["Plan"], "Node Type", "Sort") if n["Actual Rows"] > 4]


def _nodes(node: dict, key: str, value: str):
    if node.get(key) == value:
        yield node
    for child in node.get("Plans", []):
        yield from _nodes(child, key, value)
