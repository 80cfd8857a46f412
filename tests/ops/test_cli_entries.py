"""``iq_cancel`` and ``iq_requeue`` through call_command: what each changes, what it prints, how
it refuses bad input; and every command's ``--verbosity 0``."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.management import CommandError
from django.utils import timezone

from django_iq.models import (
    CronJob,
    DisabledJob,
    Entry,
    EntryError,
    Queue,
)
from tests.factories import (
    CronJobFactory,
    EntryErrorFactory,
    EntryFactory,
    QueueFactory,
)
from tests.ops.conftest import NOOP, RECORD, run

pytestmark = pytest.mark.django_db


# -- iq_cancel -------------------------------------------------------------------------------


def test_cancel_deletes_waiting_entries_and_requests_the_cancel_of_running_ones() -> None:
    waiting = EntryFactory()
    deferred = EntryFactory(deferred=True)
    running = EntryFactory(locked=True)

    output = run(
        "iq_cancel", "--id", str(waiting.pk), str(deferred.pk), "--id", str(running.pk), "999999"
    )

    assert output == (
        f"Cancelled 2 entries: {waiting.pk}, {deferred.pk}. "
        f"Cancel requested for 1 entry being run (the worker stops them): {running.pk}. "
        "Not found: 999999 (finished, failed for good or already cancelled).\n"
    )
    assert Entry.objects.get(pk=running.pk).cancel_requested_at is not None
    assert list(Entry.objects.values_list("pk", flat=True)) == [running.pk]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "Say which entries to cancel: --id N, or --job and/or --queue"),
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
