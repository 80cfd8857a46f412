"""Where tracing plugs in (docs/howto/opentelemetry.md): an enqueue, and a run.

Nothing here knows a tracing library. ``django_iq.contrib.opentelemetry`` installs a ``Tracer``;
until one is installed, ``enqueueing()`` and ``running()`` cost a global lookup and give
context managers that do nothing, and no entry stores a trace context.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from django_iq.models import Entry


class Sending(Protocol):
    """An enqueue being traced: the trace context its entries store (W3C ``traceparent``;
    None when no trace is active), and what is told once they are written."""

    traceparent: str | None

    def sent(self, entries: Sequence[Entry]) -> None: ...


class Tracer(Protocol):
    def enqueueing(
        self, job_name: str, queue: str, count: int
    ) -> AbstractContextManager[Sending]: ...

    def running(self, entry: Entry, attempt: int, worker: str) -> AbstractContextManager[None]: ...


class _NotSending:
    traceparent: str | None = None

    def sent(self, entries: Sequence[Entry]) -> None:
        return None

    def __enter__(self) -> _NotSending:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


class _NotRunning:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


# What an enqueue and a run get when nothing traces them (a Tracer may give them too).
NOT_SENDING = _NotSending()
NOT_RUNNING = _NotRunning()
_tracer: Tracer | None = None


def install(tracer: Tracer | None) -> None:
    """Trace enqueues and runs with ``tracer`` from now on (None: stop)."""
    global _tracer
    _tracer = tracer


def enqueueing(job_name: str, queue: str, count: int) -> AbstractContextManager[Sending]:
    """Around the insert of ``count`` entries of ``job_name``: set each entry's
    ``traceparent`` to the given one before the insert, and call ``sent(entries)`` after it."""
    if _tracer is None:
        return NOT_SENDING
    return _tracer.enqueueing(job_name, queue, count)


def running(entry: Entry, attempt: int, worker: str) -> AbstractContextManager[None]:
    """Around a run of ``entry`` (its ``attempt``): a job's exception passes through it."""
    if _tracer is None:
        return NOT_RUNNING
    return _tracer.running(entry, attempt, worker)
