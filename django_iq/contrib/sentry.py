"""Sentry integration (docs/howto/sentry.md): ``sentry_sdk.init(integrations=[
DjangoIQIntegration()])`` in the settings, and each failed attempt of a job is reported with
what it ran.

An event per attempt that failed for good (its last attempt, a ``Fail``, an exception the job
does not retry, a timeout, too many snoozes): the job's exception with its traceback, tagged
``django_iq.job``, ``django_iq.queue``, ``django_iq.entry_id``, ``django_iq.attempt`` and
``django_iq.final``, with a ``django_iq`` context (those, the worker, the attempts allowed, the
batch and, when ``send_arguments`` allows it, the call's arguments, which may hold personal
data). Attempts that will be retried are reported only with ``report_retried_attempts=True``.
django_iq's own log lines about those failures are not sent as events a second time (the
logging integration would); its other error lines are.

sentry-sdk is an optional dependency: ``pip install 'django-iq[sentry]'``.
"""

from __future__ import annotations

from typing import Any

try:
    import sentry_sdk
    from sentry_sdk.integrations import Integration
    from sentry_sdk.scope import add_global_event_processor
    from sentry_sdk.utils import capture_internal_exceptions, event_from_exception
except ImportError as missing:  # pragma: no cover - the extra is installed in the tests
    raise ImportError(
        "django_iq.contrib.sentry needs sentry-sdk: pip install 'django-iq[sentry]'"
    ) from missing

from django_iq import signals
from django_iq.exceptions import InvalidArgument
from django_iq.logs import process_name

# The outcomes of django_iq's log lines about a failed run (django_iq/logs.py).
FAILURE_OUTCOMES = frozenset({"retrying", "failed"})


class DjangoIQIntegration(Integration):
    """Report failed attempts of django_iq jobs to Sentry.

    ``report_retried_attempts``: also report attempts that will be retried (off: a job that
    succeeds on its second attempt reports nothing). ``send_arguments``: add the call's
    arguments to the event's ``django_iq`` context (off: they may hold personal data)."""

    identifier = "django_iq"
    origin = f"auto.queue.{identifier}"

    def __init__(self, *, report_retried_attempts: bool = False, send_arguments: bool = False):
        for name, value in (
            ("report_retried_attempts", report_retried_attempts),
            ("send_arguments", send_arguments),
        ):
            if not isinstance(value, bool):
                raise InvalidArgument(f"DjangoIQIntegration({name}=...) takes True or False")
        self.report_retried_attempts = report_retried_attempts
        self.send_arguments = send_arguments

    @staticmethod
    def setup_once() -> None:
        connect()
        add_global_event_processor(_without_failure_log_events)


def connect() -> None:
    """Connect the ``entry_failed`` receiver (once: connecting again changes nothing)."""
    signals.entry_failed.connect(
        _report_failure, dispatch_uid="django_iq.contrib.sentry", weak=False
    )


def _integration() -> DjangoIQIntegration | None:
    integration: DjangoIQIntegration | None = sentry_sdk.get_client().get_integration(
        DjangoIQIntegration
    )
    return integration


def _report_failure(
    sender: Any,
    entry: Any,
    error: Any,
    will_retry: bool,
    exception: BaseException | None = None,
    **kwargs: Any,
) -> None:
    """The ``entry_failed`` receiver: one event for the attempt, if it is to be reported."""
    integration = _integration()
    if integration is None or (will_retry and not integration.report_retried_attempts):
        return
    with capture_internal_exceptions():
        final = not will_retry
        tags = {
            "django_iq.job": entry.job_name,
            "django_iq.queue": str(entry.queue_id),
            "django_iq.entry_id": str(entry.pk),
            "django_iq.attempt": str(error.attempt),
            "django_iq.final": "yes" if final else "no",
        }
        context: dict[str, Any] = {
            "entry_id": entry.pk,
            "job": entry.job_name,
            "queue": str(entry.queue_id),
            "attempt": error.attempt,
            "max_attempts": entry.max_attempts,
            "final": final,
            "worker": error.worker_name or process_name(),
            "batch_id": entry.batch_id,
        }
        if integration.send_arguments:
            context["args"] = entry.args
            context["kwargs"] = entry.kwargs
        with sentry_sdk.new_scope() as scope:
            for key, value in tags.items():
                scope.set_tag(key, value)
            scope.set_context("django_iq", context)
            if exception is not None:
                event, hint = event_from_exception(
                    exception,
                    mechanism={"type": DjangoIQIntegration.identifier, "handled": False},
                )
            else:
                event = {"message": f"{error.exception_class}: {error.message}"}
                hint = {}
            event["level"] = "error"
            scope.capture_event(event, hint=hint)


def _without_failure_log_events(event: Any, hint: dict[str, Any]) -> Any:
    """Drop the event the logging integration makes of django_iq's own log line about a failed
    run: the integration has reported the failure with its exception."""
    record = hint.get("log_record")
    if (
        record is not None
        and record.name.startswith("django_iq")
        and getattr(record, "outcome", None) in FAILURE_OUTCOMES
        and _integration() is not None
    ):
        return None
    return event
