"""The job registry against the database: names, autodiscovery and queues declared by jobs."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from django_iq import enqueue, job
from django_iq import registry as registry_module
from django_iq.exceptions import JobNotRegistered
from django_iq.models import Entry, Queue
from django_iq.registry import declared_queues, get_job, registered_jobs
from tests.conftest import iq_settings_with
from tests.testapp.jobs import always_fails, flaky, record

EXTRA_MODULE = "tests.jobs.extra_jobs"


def plain_function(token: str) -> str:
    """Not a job until a test registers it."""
    return token


@pytest.fixture
def isolated_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Let a test register jobs without leaving them (or their queues) to later tests."""
    monkeypatch.setattr(registry_module, "_jobs", dict(registry_module._jobs))
    monkeypatch.setattr(registry_module, "_discovered", registry_module._discovered)
    sys.modules.pop(EXTRA_MODULE, None)
    yield
    sys.modules.pop(EXTRA_MODULE, None)


def test_the_test_apps_jobs_are_registered_under_their_dotted_names() -> None:
    names = registered_jobs()

    assert names["tests.testapp.jobs.record"] is record
    assert names["tests.testapp.jobs.flaky"] is flaky
    assert names["tests.testapp.jobs.always_fails"] is always_fails


def test_get_job_resolves_a_name_a_job_and_a_bound_job_to_the_job() -> None:
    assert get_job("tests.testapp.jobs.record") is record
    assert get_job(record) is record
    assert get_job(record.using(priority=3)) is record


def test_a_registered_job_still_runs_inline_when_called() -> None:
    assert always_fails.__name__ == "always_fails"
    assert always_fails.__doc__ is None and record.__doc__ is not None
    with pytest.raises(ValueError, match="called inline"):
        always_fails("called inline")


@pytest.mark.usefixtures("isolated_registry")
@pytest.mark.django_db
def test_a_job_given_an_explicit_name_is_enqueued_under_it() -> None:
    named = job(name="custom.jobs.renamed")(plain_function)

    entry = enqueue("custom.jobs.renamed", "x")

    assert get_job("custom.jobs.renamed") is named
    assert Entry.objects.get(pk=entry.pk).job_name == "custom.jobs.renamed"


@pytest.mark.usefixtures("isolated_registry")
@pytest.mark.django_db
def test_a_queue_declared_only_by_a_job_is_created_on_first_use() -> None:
    declared = job(queue="declared-by-job", priority=7)(plain_function)
    assert "declared-by-job" in declared_queues()
    assert not Queue.objects.filter(name="declared-by-job").exists()

    entry = declared.enqueue("x")

    assert Queue.objects.get(name="declared-by-job").weight == 1
    assert (entry.queue_id, entry.priority) == ("declared-by-job", 7)


@pytest.mark.usefixtures("isolated_registry")
def test_registering_a_name_again_keeps_the_newest_definition() -> None:
    first = job(name="custom.jobs.reloaded")(plain_function)
    second = job(name="custom.jobs.reloaded", priority=1)(plain_function)

    assert first is not second
    assert get_job("custom.jobs.reloaded") is second


@pytest.mark.usefixtures("isolated_registry")
def test_a_job_object_whose_name_is_not_registered_is_refused() -> None:
    orphan = job(name="custom.jobs.orphan")(plain_function)
    del registry_module._jobs["custom.jobs.orphan"]

    with pytest.raises(JobNotRegistered, match=r"^Job custom\.jobs\.orphan is not registered\.$"):
        get_job(orphan)


@pytest.mark.usefixtures("isolated_registry")
def test_modules_in_job_modules_are_imported_to_find_jobs() -> None:
    registry_module._discovered = False
    assert "tests.jobs.extra_jobs.extra" not in registered_jobs()

    with iq_settings_with(JOB_MODULES=[EXTRA_MODULE]):
        found = get_job("tests.jobs.extra_jobs.extra")

    assert found.options.queue_name == "reports"
    assert EXTRA_MODULE in sys.modules
