"""The Sentry integration (django_iq/contrib/sentry.py, docs/howto/sentry.md), checked from
outside: a real worker set up as the docs show sends, through sentry-sdk's own HTTP transport,
to an ingest endpoint of the test's own; the events are read back with sentry-sdk's envelope
parser."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import sentry_sdk

from django_iq.contrib import sentry as iq_sentry
from django_iq.contrib.sentry import DjangoIQIntegration
from django_iq.exceptions import InvalidArgument
from django_iq.worker import WorkerProcess
from tests.integrations.sentry_server import SentryServer, sentry_server
from tests.processes import command_env, finish, start_command
from tests.testapp.jobs import logs_a_line

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def server() -> Iterator[SentryServer]:
    with sentry_server() as running:
        yield running


def wait_for_events(server: SentryServer, count: int, timeout: float = 15.0) -> list[Any]:
    deadline = time.monotonic() + timeout
    while len(server.events) < count and time.monotonic() < deadline:
        time.sleep(0.05)  # polled: what arrived is returned, fewer events included
    return list(server.events)


def tags(event: dict[str, Any]) -> dict[str, str]:
    # An event's tags come as a mapping or as [key, value] pairs.
    return dict(event.get("tags", {}))


@pytest.mark.slow
def test_a_workers_final_failure_reaches_sentry_once_with_its_tags(server: SentryServer) -> None:
    declined = logs_a_line.enqueue("declined", fail=True)  # two attempts, both fail
    logs_a_line.enqueue("paid")
    worker = start_command(
        "runworker",
        "--burst",
        "--threads",
        "1",
        env=command_env(
            DJANGO_SETTINGS_MODULE="tests.settings_sentry", IQ_TEST_SENTRY_DSN=server.dsn
        ),
    )

    code, output = finish(worker)

    assert code == 0, output[-3000:]
    [event] = wait_for_events(server, 1)
    time.sleep(0.5)  # nothing more comes: the retried attempt and the log lines send nothing
    assert len(server.events) == 1, [e.get("logger") for e in server.events]
    assert (
        tags(event).items()
        >= {
            "django_iq.job": logs_a_line.name,
            "django_iq.queue": "default",
            "django_iq.entry_id": str(declined.pk),
            "django_iq.attempt": "2",
            "django_iq.final": "yes",
        }.items()
    )
    [exception] = event["exception"]["values"]
    assert exception["type"] == "ValueError" and exception["value"] == "card declined: declined"
    assert exception["mechanism"].items() >= {"type": "django_iq", "handled": False}.items()
    frames = [frame["function"] for frame in exception["stacktrace"]["frames"]]
    assert frames[-1] == "logs_a_line", "the job's own frame, where it raised"
    context = event["contexts"]["django_iq"]
    assert context["entry_id"] == declined.pk and context["final"] is True
    assert context["worker"].split(":")[1].isdigit()
    assert "args" not in context and "kwargs" not in context, "no arguments unless allowed"


@pytest.fixture
def sentry_in_this_process(server: SentryServer) -> Iterator[None]:
    # sentry-sdk sets an integration up once per process; a docs page run before this test
    # in the same process (docs/howto/sentry.md) had its receivers undone with the page.
    iq_sentry.connect()
    sentry_sdk.init(
        dsn=server.dsn,
        integrations=[DjangoIQIntegration(report_retried_attempts=True, send_arguments=True)],
        default_integrations=False,
        auto_enabling_integrations=False,
    )
    try:
        yield
    finally:
        sentry_sdk.get_client().close()
        # No DSN: nothing is sent, the integration is off.
        sentry_sdk.init(default_integrations=False, auto_enabling_integrations=False)


def test_retried_attempts_and_arguments_are_sent_when_asked(
    server: SentryServer, sentry_in_this_process: None
) -> None:
    declined = logs_a_line.enqueue("declined", fail=True)

    assert WorkerProcess(burst=True, processing_threads=1).run(install_signal_handlers=False) == 0
    sentry_sdk.flush()

    events = sorted(wait_for_events(server, 2), key=lambda e: tags(e)["django_iq.attempt"])
    assert [(tags(e)["django_iq.attempt"], tags(e)["django_iq.final"]) for e in events] == [
        ("1", "no"),
        ("2", "yes"),
    ]
    assert {tags(e)["django_iq.entry_id"] for e in events} == {str(declined.pk)}
    context = events[0]["contexts"]["django_iq"]
    assert (context["args"], context["kwargs"]) == (["declined"], {"fail": True})


def test_the_integrations_options_are_checked() -> None:
    with pytest.raises(InvalidArgument, match="send_arguments"):
        DjangoIQIntegration(send_arguments="yes")  # type: ignore[arg-type]
