"""Shared fixtures: database vendor helpers, a poll-until helper, a run-at-once helper for
races, settings and signal helpers."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import pytest
from django.conf import settings
from django.db import connection, connections, transaction
from django.dispatch import Signal
from django.test import override_settings

T = TypeVar("T")


@pytest.fixture(autouse=True)
def _no_leftover_processes() -> Iterator[None]:
    """Every command a test started (tests/processes.py) is gone when it ends, failed or not:
    a worker left running would take the next tests' entries."""
    yield
    from tests.processes import kill_leftovers

    kill_leftovers()


def wait_until(
    condition: Callable[[], object],
    timeout: float = 30.0,
    interval: float = 0.05,
    message: str = "",
) -> object:
    """Poll ``condition`` until it returns a truthy value; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {message or condition}")
        time.sleep(interval)  # polling interval of the wait helper itself


def concurrently(
    action: Callable[[], T], threads: int = 50, also: Callable[[], object] | None = None
) -> list[T]:
    """Run ``action`` in ``threads`` threads released at once, each on a connection of its own
    (and ``also`` in this thread at the same moment); return what each returned. Fails the test
    if any raised."""
    barrier = threading.Barrier(threads + 1 if also else threads)
    results: list[T] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def run() -> None:
        try:
            barrier.wait()
            result = action()
            with lock:
                results.append(result)
        except BaseException as exc:  # collected: the test thread asserts on them
            with lock:
                errors.append(exc)
        finally:
            connections.close_all()

    started = [threading.Thread(target=run) for _ in range(threads)]
    for thread in started:
        thread.start()
    if also is not None:
        barrier.wait()
        also()
    for thread in started:
        thread.join(60)
    assert not errors, errors[:3]
    assert len(results) == threads, "a thread did not finish within 60 s"
    return results


def run_async(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run the coroutine function ``function`` to its end from a thread of its own (a test's
    thread may already run an event loop the browser tests left), and close the connections
    that thread opened. Its database work runs on that thread: use with committed data
    (``django_db(transaction=True)``)."""
    from asgiref.sync import async_to_sync

    result: list[Any] = []
    error: list[BaseException] = []

    def call() -> None:
        try:
            result.append(async_to_sync(function)(*args, **kwargs))
        except BaseException as exc:  # handed to the caller's thread
            error.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=call)
    thread.start()
    thread.join()
    if error:
        raise error[0]
    return result[0]


@contextmanager
def held_in_another_session(hold: Callable[[], object]) -> Iterator[Callable[[], None]]:
    """Run ``hold`` (a query taking locks) in a transaction of another session, a thread's own
    connection, kept open until the block ends or the function it yields is called."""
    holding, release = threading.Event(), threading.Event()

    def keep() -> None:
        try:
            with transaction.atomic():
                hold()
                holding.set()
                release.wait(30)
        finally:
            connections.close_all()

    holder = threading.Thread(target=keep)
    holder.start()

    def end() -> None:
        release.set()
        holder.join(30)

    try:
        assert holding.wait(10), "the other session took its locks"
        yield end
    finally:
        end()


def iq_settings_with(**overrides: object) -> override_settings:
    """``override_settings`` for ``DJANGO_IQ``: the test settings with ``overrides`` applied."""
    return override_settings(DJANGO_IQ={**settings.DJANGO_IQ, **overrides})


class SignalRecorder:
    """Collects the keyword arguments of every send of one signal while connected."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def __call__(self, sender: Any, **kwargs: Any) -> None:
        kwargs.pop("signal", None)
        self.calls.append({"sender": sender, **kwargs})


@pytest.fixture
def record_signal() -> Iterator[Callable[[Signal], SignalRecorder]]:
    """Return a function connecting a ``SignalRecorder`` to a signal until the test ends."""
    connected: list[tuple[Signal, SignalRecorder]] = []

    def connect(signal: Signal) -> SignalRecorder:
        recorder = SignalRecorder()
        signal.connect(recorder, weak=False)
        connected.append((signal, recorder))
        return recorder

    yield connect
    for signal, recorder in connected:
        signal.disconnect(recorder)


@pytest.fixture
def vendor() -> str:
    return connection.vendor


def pytest_configure(config: pytest.Config) -> None:
    """Make sure the ``iq_jobs`` fixture is there: django-iq's ``pytest11`` entry point loads
    its plugin, but an environment installed before the entry point existed lacks it."""
    import django_iq.pytest_plugin as plugin

    if not config.pluginmanager.is_registered(plugin):
        config.pluginmanager.register(plugin, "django_iq")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip = pytest.mark.skip(reason="needs PostgreSQL: run with DATABASE_URL=postgres://...")
    if connection.vendor != "postgresql":
        for item in items:
            if "postgresql" in item.keywords:
                item.add_marker(skip)
