"""OpenTelemetry instrumentation (docs/howto/opentelemetry.md): traces that go on from the code
that enqueues to each run of the entry.

``DjangoIQInstrumentor().instrument()`` (or ``opentelemetry-instrument python manage.py
runworker``, which finds it by its ``opentelemetry_instrumentor`` entry point) installs a
``django_iq.tracing.Tracer`` that

- wraps each enqueue in a ``PRODUCER`` span (``enqueue <job>``) and stores its trace context
  with the entries (W3C ``traceparent``), when a trace is active;
- wraps each run in a ``CONSUMER`` span (``run <job>``) that continues that trace and links
  to the enqueue's span; a job's exception is recorded on it and sets its status to error.

Both carry the messaging attributes of OpenTelemetry's semantic conventions:
``messaging.system`` (``django_iq``), ``messaging.operation.type`` (``send``, ``process``),
``messaging.operation.name`` (``enqueue``, ``run``), ``messaging.destination.name`` (the
queue), ``messaging.message.id`` (the entry id; ``messaging.batch.message_count`` for an
enqueue of several), and ``django_iq.job.name``, ``django_iq.attempt`` on a run.

With no SDK configured (the API's default provider, whose spans record nothing) no span is
made, unless a trace context is already active at the enqueue or stored with the entry: that
context is still passed on.

The extra ``django-iq[otel]`` installs the API, the SDK and the instrumentation package.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any

try:
    from opentelemetry import trace
    from opentelemetry.instrumentation.instrumentor import (  # type: ignore[attr-defined]
        BaseInstrumentor,
    )
    from opentelemetry.trace import Link, SpanKind, Status, StatusCode
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError as missing:  # pragma: no cover - the extra is installed in the tests
    raise ImportError(
        "django_iq.contrib.opentelemetry needs OpenTelemetry: pip install 'django-iq[otel]'"
    ) from missing

from django_iq import tracing
from django_iq.exceptions import Snooze

if TYPE_CHECKING:
    from django_iq.models import Entry

SYSTEM = "django_iq"
_propagator = TraceContextTextMapPropagator()


class _Sending:
    """The ``PRODUCER`` span of one enqueue, as ``django_iq.tracing`` sees it."""

    def __init__(self, span: trace.Span, traceparent: str | None) -> None:
        self.span = span
        self.traceparent = traceparent

    def sent(self, entries: Sequence[Entry]) -> None:
        if len(entries) == 1 and entries[0].pk is not None:
            self.span.set_attribute("messaging.message.id", str(entries[0].pk))


# The providers of the API alone (no SDK configured): their spans record nothing.
_NO_OP_PROVIDERS = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)


class _Tracer:
    def __init__(self, tracer: trace.Tracer, provider: trace.TracerProvider | None) -> None:
        self.tracer = tracer
        self.provider = provider  # None: the global one, read at each call (set at any time)

    def _no_op(self) -> bool:
        provider = self.provider if self.provider is not None else trace.get_tracer_provider()
        return isinstance(provider, _NO_OP_PROVIDERS)

    def enqueueing(
        self, job_name: str, queue: str, count: int
    ) -> AbstractContextManager[tracing.Sending]:
        # With no SDK, a span records nothing: only a trace context already active (passed on
        # from the caller's caller) is worth storing, so without one nothing is done at all.
        if self._no_op() and not trace.get_current_span().get_span_context().is_valid:
            return tracing.NOT_SENDING
        return self._enqueueing(job_name, queue, count)

    def running(self, entry: Entry, attempt: int, worker: str) -> AbstractContextManager[None]:
        if self._no_op() and not entry.traceparent:
            return tracing.NOT_RUNNING
        return self._running(entry, attempt, worker)

    @contextmanager
    def _enqueueing(self, job_name: str, queue: str, count: int) -> Iterator[_Sending]:
        attributes: dict[str, Any] = {
            "messaging.system": SYSTEM,
            "messaging.operation.type": "send",
            "messaging.operation.name": "enqueue",
            "messaging.destination.name": queue,
            "django_iq.job.name": job_name,
        }
        if count > 1:
            attributes["messaging.batch.message_count"] = count
        with self.tracer.start_as_current_span(
            f"enqueue {job_name}", kind=SpanKind.PRODUCER, attributes=attributes
        ) as span:
            carrier: dict[str, str] = {}
            if span.get_span_context().is_valid:
                _propagator.inject(carrier)
            yield _Sending(span, carrier.get("traceparent"))

    @contextmanager
    def _running(self, entry: Entry, attempt: int, worker: str) -> Iterator[None]:
        parent = None
        links = []
        if entry.traceparent:
            parent = _propagator.extract({"traceparent": entry.traceparent})
            sent = trace.get_current_span(parent).get_span_context()
            if sent.is_valid:
                links.append(Link(sent))
        attributes: dict[str, Any] = {
            "messaging.system": SYSTEM,
            "messaging.operation.type": "process",
            "messaging.operation.name": "run",
            "messaging.destination.name": str(entry.queue_id),
            "messaging.message.id": str(entry.pk),
            "django_iq.job.name": entry.job_name,
            "django_iq.attempt": attempt,
            "django_iq.worker": worker,
        }
        with self.tracer.start_as_current_span(
            f"run {entry.job_name}",
            context=parent,
            kind=SpanKind.CONSUMER,
            links=links,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                yield
            except Snooze:
                span.set_attribute("django_iq.snoozed", True)
                raise
            except BaseException as exc:
                span.record_exception(exc)
                span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
                raise


class DjangoIQInstrumentor(BaseInstrumentor):
    """Trace django_iq's enqueues and runs: ``DjangoIQInstrumentor().instrument()``, with an
    optional ``tracer_provider=`` (else the global one); ``.uninstrument()`` stops."""

    def instrumentation_dependencies(self) -> Collection[str]:
        return ("django-iq",)

    def _instrument(self, **kwargs: Any) -> None:
        from django_iq import __version__

        provider = kwargs.get("tracer_provider")
        tracer = trace.get_tracer(__name__, __version__, tracer_provider=provider)
        tracing.install(_Tracer(tracer, provider))

    def _uninstrument(self, **kwargs: Any) -> None:
        tracing.install(None)
