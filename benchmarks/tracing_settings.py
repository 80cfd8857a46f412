"""The test settings with the OpenTelemetry set-up of benchmarks/tracing.py, chosen by
IQ_BENCH_TRACING: ``off`` (not instrumented), ``noop`` (instrumented, no SDK: the default
no-op provider) or ``sdk`` (instrumented, a TracerProvider exporting to nothing)."""

from __future__ import annotations

import os
from collections.abc import Sequence

from tests.settings import *  # noqa: F403

_providers: list[object] = []


def set_up_tracing(mode: str) -> None:
    """Instrument this process as ``mode`` says."""
    if mode == "off":
        return
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )

    from django_iq.contrib.opentelemetry import DjangoIQInstrumentor

    class Dropped(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    if mode == "sdk":
        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(Dropped()))
        _providers.append(provider)
        DjangoIQInstrumentor().instrument(tracer_provider=provider)
    else:
        DjangoIQInstrumentor().instrument()


def tear_down_tracing() -> None:
    from django_iq.contrib.opentelemetry import DjangoIQInstrumentor

    if DjangoIQInstrumentor().is_instrumented_by_opentelemetry:
        DjangoIQInstrumentor().uninstrument()
    while _providers:
        _providers.pop().shutdown()  # type: ignore[attr-defined]


set_up_tracing(os.environ.get("IQ_BENCH_TRACING", "off"))
