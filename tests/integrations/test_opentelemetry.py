"""The OpenTelemetry instrumentation (django_iq/contrib/opentelemetry.py,
docs/howto/opentelemetry.md): a view's trace goes on through enqueue into each run of a real
worker started by ``opentelemetry-instrument`` (the SDK configured from the environment, its
console exporter writing the spans), and, in this process with the SDK's in-memory exporter,
through dependencies, batches and cron; nothing is stored or traced without it."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import django_iq
from django_iq.contrib.opentelemetry import DjangoIQInstrumentor
from django_iq.models import CronJob, Entry, Queue
from django_iq.registry import catalog
from django_iq.testing import run_jobs
from tests.processes import ROOT, command_env
from tests.testapp.jobs import batch_done, logs_a_line, noop, record, records_its_trace
from tests.testapp.models import JobRun

pytestmark = pytest.mark.django_db(transaction=True)

OPENTELEMETRY_INSTRUMENT = Path(sys.executable).parent / "opentelemetry-instrument"


@dataclass
class Traced:
    """This process instrumented: its spans kept in memory, and a tracer for the project's own
    code (a view) on the same provider (no global provider is set)."""

    exporter: InMemorySpanExporter
    tracer: Any

    def finished(self) -> tuple[ReadableSpan, ...]:
        return self.exporter.get_finished_spans()


@contextmanager
def instrumented() -> Iterator[Traced]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    DjangoIQInstrumentor().instrument(tracer_provider=provider)
    try:
        yield Traced(exporter, provider.get_tracer("shop.views"))
    finally:
        DjangoIQInstrumentor().uninstrument()
        provider.shutdown()


@pytest.fixture
def traced() -> Iterator[Traced]:
    with instrumented() as found:
        yield found


def spans_json(stdout: str) -> list[dict[str, Any]]:
    """The spans the console exporter wrote, one JSON object each, among other output."""
    decoder, found, at = json.JSONDecoder(), [], 0
    while (start := stdout.find("{", at)) != -1:
        try:
            value, at = decoder.raw_decode(stdout, start)
        except json.JSONDecodeError:
            at = start + 1
            continue
        if isinstance(value, dict) and "context" in value and "kind" in value:
            found.append(value)
    return found


def hex_id(value: int, width: int) -> str:
    return f"0x{value:0{width}x}"


@pytest.mark.slow
def test_a_views_trace_goes_on_into_each_run_of_a_real_worker() -> None:
    with instrumented() as traced, traced.tracer.start_as_current_span("GET /checkout") as view:
        paid = logs_a_line.enqueue("paid")
        declined = logs_a_line.enqueue("declined", fail=True)  # two attempts, both fail
    trace_id = view.get_span_context().trace_id
    sent = {
        s.attributes["messaging.message.id"]: s
        for s in traced.finished()
        if s.kind == SpanKind.PRODUCER
    }
    assert set(sent) == {str(paid.pk), str(declined.pk)}
    # W3C traceparent: version, trace id, the enqueue span's id, flags.
    assert Entry.objects.get(pk=paid.pk).traceparent.startswith(  # type: ignore[union-attr]
        f"00-{trace_id:032x}-{sent[str(paid.pk)].context.span_id:016x}-"
    )

    run = subprocess.run(
        [
            str(OPENTELEMETRY_INSTRUMENT),
            sys.executable,
            "-m",
            "django",
            "runworker",
            "--burst",
            "--threads",
            "1",
        ],
        cwd=ROOT,
        env=command_env(
            OTEL_SERVICE_NAME="worker",
            OTEL_TRACES_EXPORTER="console",
            OTEL_METRICS_EXPORTER="none",
            OTEL_LOGS_EXPORTER="none",
        ),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert run.returncode == 0, run.stderr[-3000:]
    runs = [s for s in spans_json(run.stdout) if s["kind"] == "SpanKind.CONSUMER"]
    by_run = {
        (s["attributes"]["messaging.message.id"], s["attributes"]["django_iq.attempt"]): s
        for s in runs
    }
    assert set(by_run) == {(str(paid.pk), 1), (str(declined.pk), 1), (str(declined.pk), 2)}
    for (entry_id, _), span in by_run.items():
        assert span["name"] == f"run {logs_a_line.name}"
        assert span["context"]["trace_id"] == hex_id(trace_id, 32), "the view's trace"
        producer = sent[entry_id].context.span_id
        assert span["parent_id"] == hex_id(producer, 16), "a child of the enqueue"
        assert [link["context"]["span_id"] for link in span["links"]] == [hex_id(producer, 16)]
        attributes = span["attributes"]
        assert attributes["messaging.system"] == "django_iq"
        assert attributes["messaging.operation.type"] == "process"
        assert attributes["messaging.destination.name"] == "default"
        assert attributes["django_iq.job.name"] == logs_a_line.name
    assert by_run[(str(paid.pk), 1)]["status"]["status_code"] == "UNSET"
    for attempt in (1, 2):
        failed = by_run[(str(declined.pk), attempt)]
        assert failed["status"]["status_code"] == "ERROR"
        [event] = failed["events"]
        assert event["name"] == "exception"
        assert event["attributes"]["exception.type"] == "ValueError"
        assert event["attributes"]["exception.message"] == "card declined: declined"


def test_dependencies_batches_and_cron_keep_their_trace(traced: Traced) -> None:
    with traced.tracer.start_as_current_span("GET /report") as view:
        parent = record.enqueue("parent")
        child = record.using(after=[parent]).enqueue("child")
        with django_iq.batch(batch_done, label="b"):
            member = record.enqueue("member")
    Queue.objects.ensure("default", catalog)
    cron_job = CronJob.objects.create(
        name="tick", schedule="* * * * *", job_name=noop.name, queue_id="default"
    )
    assert CronJob.objects.run_now(cron_job, catalog)

    run_jobs()

    finished = traced.finished()
    runs = {
        s.attributes["messaging.message.id"]: s for s in finished if s.kind == SpanKind.CONSUMER
    }
    trace_id = view.get_span_context().trace_id
    for entry in (parent, child, member):
        assert runs[str(entry.pk)].context.trace_id == trace_id
    callback = [s for s in runs.values() if s.attributes["django_iq.job.name"] == batch_done.name]
    assert [s.context.trace_id for s in callback] == [trace_id], "the batch's callback too"
    # The cron entry's runs join the trace of the leader's enqueue, a trace of its own.
    [cron_run] = [s for s in runs.values() if s.attributes["django_iq.job.name"] == noop.name]
    # (the next fire's entry is enqueued as the run ends: its own enqueue span)
    [cron_sent] = [
        s
        for s in finished
        if s.kind == SpanKind.PRODUCER
        and s.attributes.get("messaging.message.id") == cron_run.attributes["messaging.message.id"]
    ]
    assert cron_run.context.trace_id == cron_sent.context.trace_id != trace_id
    assert cron_run.parent is not None and cron_run.parent.span_id == cron_sent.context.span_id


def test_a_failed_run_records_its_exception_and_an_enqueue_of_many_counts_them(
    traced: Traced,
) -> None:
    logs_a_line.using(max_attempts=1).enqueue("declined", fail=True)
    record.enqueue_many([(("a",), {}), (("b",), {}), (("c",), {})])

    run_jobs()

    finished = traced.finished()
    [failed] = [
        s
        for s in finished
        if s.kind == SpanKind.CONSUMER and s.status.status_code == StatusCode.ERROR
    ]
    assert failed.status.description == "ValueError: card declined: declined"
    assert [e.name for e in failed.events] == ["exception"]
    [many] = [
        s
        for s in finished
        if s.kind == SpanKind.PRODUCER and s.attributes.get("messaging.batch.message_count")
    ]
    assert many.attributes["messaging.batch.message_count"] == 3
    assert "messaging.message.id" not in many.attributes


def test_without_the_instrumentor_nothing_is_stored_or_traced() -> None:
    entry = record.enqueue("plain")

    assert Entry.objects.get(pk=entry.pk).traceparent is None
    [outcome] = run_jobs()
    assert outcome.succeeded


def test_with_no_sdk_nothing_is_made_unless_a_trace_context_was_passed_on() -> None:
    # Instrumented with the API's default provider (no SDK): spans would record nothing, so an
    # enqueue outside any trace stores nothing and its run has no trace; a trace context passed
    # on from upstream (propagation with the API alone) is still stored, and is the run's.
    from opentelemetry import context, trace
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

    upstream = SpanContext(
        trace_id=0x0AF7651916CD43DD8448EB211C80319C,
        span_id=0xB7AD6B7169203331,
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )
    DjangoIQInstrumentor().instrument()
    try:
        assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
        plain = records_its_trace.enqueue("plain")
        token = context.attach(trace.set_span_in_context(NonRecordingSpan(upstream)))
        try:
            passed_on = records_its_trace.enqueue("passed-on")
        finally:
            context.detach(token)
        stored = dict(Entry.objects.values_list("pk", "traceparent"))
        run_jobs()
    finally:
        DjangoIQInstrumentor().uninstrument()

    assert stored == {
        plain.pk: None,
        passed_on.pk: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    }
    assert set(JobRun.objects.values_list("token", flat=True)) == {
        f"plain:{0:032x}",
        "passed-on:0af7651916cd43dd8448eb211c80319c",
    }
