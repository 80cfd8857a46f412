"""The process's one listening connection for ``django_iq.wait()`` (PostgreSQL): ``Hub`` holds a
``Listener`` on ``ENDED_CHANNEL`` and wakes the waiters of each entry it hears of."""

from __future__ import annotations

import os
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable

from django_iq.queries import ENDED_CHANNEL
from django_iq.wakeup import Listener, listening_alias, listening_supported


class Hub:
    """The process's one listening connection for waiters, and who waits for which entry.

    Started by the first wait on PostgreSQL (with ``LISTEN_NOTIFY``) and kept for the life of
    the process (a forked child starts its own). Each notification wakes the waiters of its
    entry; each (re)connection wakes them all, for what ended while nobody listened."""

    _instance: Hub | None = None
    _pid = 0
    _creating = threading.Lock()

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiters: defaultdict[int, set[Callable[[], None]]] = defaultdict(set)
        self.listener = Listener(
            None, self._heard, threading.Event(), alias=listening_alias(), channel=ENDED_CHANNEL
        )
        self.thread = threading.Thread(
            target=self.listener.run, name="iq-wait-listener", daemon=True
        )
        self.thread.start()

    @classmethod
    def for_process(cls) -> Hub | None:
        """The process's hub, started on first use; None where nothing notifies."""
        if not listening_supported():
            return None
        with cls._creating:
            if cls._instance is None or cls._pid != os.getpid():
                cls._instance = cls()
                cls._pid = os.getpid()
            return cls._instance

    @classmethod
    def stop_for_process(cls, timeout: float = 5.0) -> None:
        """Stop the process's hub, closing its connection (a test suite about to drop its
        database does); the next wait starts another."""
        with cls._creating:
            hub, cls._instance = cls._instance, None
        if hub is not None and cls._pid == os.getpid():
            hub.listener.stopping.set()
            hub.thread.join(timeout)

    def register(self, ids: Iterable[int], wake: Callable[[], None]) -> None:
        with self._lock:
            for pk in ids:
                self._waiters[pk].add(wake)

    def unregister(self, ids: Iterable[int], wake: Callable[[], None]) -> None:
        with self._lock:
            for pk in ids:
                waiters = self._waiters.get(pk)
                if waiters is not None:
                    waiters.discard(wake)
                    if not waiters:
                        del self._waiters[pk]

    def _heard(self, payload: str | None) -> None:
        with self._lock:
            if payload is None:
                wakes = {wake for waiters in self._waiters.values() for wake in waiters}
            else:
                try:
                    wakes = set(self._waiters.get(int(payload), ()))
                except ValueError:  # not an entry id: nothing of ours
                    return
        for wake in wakes:
            try:
                wake()
            except RuntimeError:  # an async waiter whose event loop has closed
                continue
