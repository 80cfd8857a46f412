"""The Batch admin: each batch's progress (members enqueued, ended, succeeded, failed) and where
its callback stands, in the list and on the change page, read-only."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client

import django_iq
from django_iq.models import Batch, Entry
from django_iq.worker import WorkerProcess
from tests.admin.conftest import change_url, changelist_url, column, login_superuser
from tests.testapp.jobs import batch_done, batch_member

pytestmark = pytest.mark.django_db(transaction=True)

COLUMNS = ("total", "finished", "succeeded", "failed", "callback")


def drain() -> None:
    assert WorkerProcess(burst=True, processing_threads=2).run(install_signal_handlers=False) == 0


def progress(client: Client) -> list[tuple[str, ...]]:
    response = client.get(changelist_url(Batch))
    assert response.status_code == 200
    return list(zip(*(column(response, name) for name in COLUMNS), strict=True))


def test_the_list_shows_each_batchs_progress_and_its_callback(client: Client) -> None:
    login_superuser(client)
    with django_iq.batch(on_complete=batch_done) as b:
        assert progress(client) == [("0", "0", "0", "0", "waiting: block open")]
        batch_member.enqueue("ok")
        batch_member.enqueue("ko", fail=True)
        for i in range(2):
            batch_member.using(run_at=timedelta(hours=1)).enqueue(f"later{i}")
    drain()

    assert progress(client) == [("4", "2", "1", "1", "waiting for 2 members")]

    Entry.objects.run_now(Entry.objects.filter(batch_id=b.id).values_list("pk", flat=True))
    drain()

    assert progress(client) == [("4", "4", "3", "1", "finished")]
    page = client.get(change_url(Batch.objects.get(pk=b.id)))
    assert page.status_code == 200 and page.context["has_change_permission"] is False
    text = page.content.decode()
    for label, value in (("Members ended", "4"), ("Succeeded", "3"), ("Callback", "finished")):
        assert f"<label>{label}:</label>" in text
        assert f'<div class="readonly">{value}</div>' in text


def test_a_cancelled_callback_is_shown_as_cancelled(client: Client) -> None:
    login_superuser(client)
    with django_iq.batch(on_complete=batch_done) as b:
        batch_member.using(run_at=timedelta(hours=1)).enqueue("waits")
    callback = Batch.objects.get(pk=b.id).callback_entry_id
    assert Entry.objects.cancel([callback]) == (1, 0)

    assert progress(client) == [("1", "0", "0", "0", "cancelled")]
