"""Waking idle scheduling threads: at once when work arrives, by polling when nothing says so.

``Wakeups`` holds one event per scheduling thread, so one thread clearing its event never eats
another's wake-up. ``Listener`` is a worker thread that, on PostgreSQL, holds a connection of
its own in ``LISTEN`` on ``queries.NOTIFY_CHANNEL``: an enqueue that commits a ready entry
sends ``NOTIFY`` with its queue's name, and the listener wakes the schedulers, which claim
within milliseconds instead of at their next poll.

Notifications are a shortcut, never the guarantee: a notification lost (the listening
connection dropped, the server restarted, a pooler in between) only means the entry waits for
the next poll (``POLL_INTERVAL_SECONDS``). After each (re)connection the listener wakes the
schedulers once, for whatever arrived while it was not listening.

The listener connects to ``LISTEN_DATABASE`` (by default the entries' write database). Through
a pooler in transaction mode (PgBouncer) a ``LISTEN`` stays on whichever server connection ran
it, and nothing is ever delivered to the listener. So after each connection the listener sends
itself a probe (an empty payload) through the write database; when none arrives within
``PROBE_TIMEOUT_SECONDS`` it says so in a warning, naming the setting, and stops listening: the
worker polls.
"""

from __future__ import annotations

import select
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections, router

from django_iq.conf import iq_settings
from django_iq.logs import get_logger
from django_iq.models import Entry
from django_iq.queries import CANCEL_PREFIX, NOTIFY_CHANNEL, notify

logger = get_logger(__name__)

# How long one wait for notifications lasts before the stop flag is looked at again.
LISTEN_TIMEOUT_SECONDS = 1.0
# Back-off between attempts to connect again: 0.5 s doubling up to this.
RECONNECT_MAX_SECONDS = 15.0
# The payload of the probe a listener sends after connecting (no queue has an empty name), and
# how long it waits for the probe, or any other notification, before it concludes that none
# reach its connection.
PROBE_PAYLOAD = ""
PROBE_TIMEOUT_SECONDS = 10.0


class Wakeups:
    """One event per sleeping scheduling thread; ``wake_all()`` sets them all."""

    def __init__(self) -> None:
        self._events: list[threading.Event] = []
        self._lock = threading.Lock()

    def event(self) -> threading.Event:
        event = threading.Event()
        with self._lock:
            self._events.append(event)
        return event

    def wake_all(self) -> None:
        with self._lock:
            events = list(self._events)
        for event in events:
            event.set()


def listening_supported(alias: str | None = None) -> bool:
    """True where workers can LISTEN (PostgreSQL, with ``LISTEN_NOTIFY`` on)."""
    alias = alias or router.db_for_write(Entry) or DEFAULT_DB_ALIAS
    return bool(iq_settings.LISTEN_NOTIFY) and connections[alias].vendor == "postgresql"


def listening_alias() -> str:
    """The alias workers LISTEN on: ``LISTEN_DATABASE``, else the entries' write database."""
    return str(iq_settings.LISTEN_DATABASE or router.db_for_write(Entry) or DEFAULT_DB_ALIAS)


class Listener:
    """Call ``on_ready(queue)`` when a queue in ``queues`` (every queue when None) gets ready
    work, and ``on_ready(None)`` after each connection (work may have come meanwhile).

    A cancel's payload (``CANCEL_PREFIX`` and an entry id) is handed on whatever the queues.
    On another ``channel`` the payloads are that channel's (``ENDED_CHANNEL``: entry ids), and
    ``queues`` filters them alike."""

    def __init__(
        self,
        queues: Sequence[str] | None,
        on_ready: Callable[[str | None], None],
        stopping: threading.Event,
        alias: str | None = None,
        channel: str = NOTIFY_CHANNEL,
    ) -> None:
        self.queues = frozenset(queues) if queues else None
        self.channel = channel
        self.on_ready = on_ready
        self.stopping = stopping
        self.alias = alias or listening_alias()
        self.connected = threading.Event()
        self.received = 0
        # None until a probe (or any notification) arrives: then True. False once none arrived
        # within PROBE_TIMEOUT_SECONDS of a connection, and the listener has stopped.
        self.delivers: bool | None = None

    def run(self) -> None:
        """Listen until ``stopping`` is set, connecting again after any failure."""
        backoff = 0.5
        while not self.stopping.is_set():
            wrapper = connections.create_connection(self.alias)
            try:
                wrapper.ensure_connection()
                raw = wrapper.connection
                raw.autocommit = True
                raw.cursor().execute(f"LISTEN {self.channel}")
                self.connected.set()
                backoff = 0.5
                logger.debug("listening alias=%s channel=%s", self.alias, self.channel)
                self.on_ready(None)  # anything enqueued while nobody listened
                if not self._listen(raw):
                    return
            except Exception as exc:  # a dropped connection: polling covers the gap
                self.connected.clear()
                if self.stopping.is_set():
                    break
                logger.warning(
                    "listening connection lost, polling until it is back "
                    "error=%s: %s retry_in=%.1fs",
                    type(exc).__name__,
                    str(exc).strip()[:200],
                    backoff,
                )
                self.stopping.wait(backoff)
                backoff = min(RECONNECT_MAX_SECONDS, backoff * 2)
            finally:
                self.connected.clear()
                try:
                    wrapper.close()
                except Exception:  # closing a broken connection may fail too: it is gone
                    logger.debug("closing the listening connection failed", exc_info=True)

    def _listen(self, raw: Any) -> bool:
        """Hand each notification on until ``stopping`` is set; return False, having given up
        listening, if no notification reached ``raw`` within ``PROBE_TIMEOUT_SECONDS``."""
        probe_sent = time.monotonic()
        heard = False
        write_alias = router.db_for_write(Entry) or DEFAULT_DB_ALIAS
        try:
            notify(write_alias, self.channel, [PROBE_PAYLOAD])
        finally:
            connections[write_alias].close()  # this thread's only use of it
        for queue in self._notifications(raw):
            if queue is None:
                if heard or time.monotonic() - probe_sent < PROBE_TIMEOUT_SECONDS:
                    continue
                self.delivers = False
                logger.warning(
                    "notifications do not reach the listening connection alias=%s: a pooler "
                    "in transaction mode in between? Polling every %ss; set "
                    "DJANGO_IQ['LISTEN_DATABASE'] to an alias that connects to PostgreSQL "
                    "directly",
                    self.alias,
                    iq_settings.POLL_INTERVAL_SECONDS,
                )
                # Through a pooler this most likely reaches the server connection that ran the
                # LISTEN (the one last used); at worst that connection keeps listening.
                raw.cursor().execute(f"UNLISTEN {self.channel}")
                return False
            if not heard:
                heard = self.delivers = True
            if queue == PROBE_PAYLOAD:
                continue
            self.received += 1
            if self.queues is None or queue in self.queues or queue.startswith(CANCEL_PREFIX):
                self.on_ready(queue)
        return True

    def _notifications(self, raw: Any) -> Iterator[str | None]:
        """Yield each notification's payload, and None after each wait of
        ``LISTEN_TIMEOUT_SECONDS``, until ``stopping`` is set; raise if the connection breaks.
        Works with psycopg 3 and psycopg2."""
        if callable(getattr(raw, "notifies", None)):  # psycopg 3
            while not self.stopping.is_set():
                for message in raw.notifies(timeout=LISTEN_TIMEOUT_SECONDS):
                    yield message.payload
                if raw.closed or raw.broken:
                    raise ConnectionError("the listening connection closed")
                yield None
            return
        while not self.stopping.is_set():  # psycopg2
            readable, _, _ = select.select([raw], [], [], LISTEN_TIMEOUT_SECONDS)
            if readable:
                raw.poll()
                while raw.notifies:
                    yield raw.notifies.pop(0).payload
            if raw.closed:
                raise ConnectionError("the listening connection closed")
            yield None
