"""How a cancel reaches a worker's runs: ``django_iq.cancel()`` marks a claimed or running entry
(``Entry.cancel_requested_at``) and, on PostgreSQL, announces it (``NOTIFY`` with
``CANCEL_PREFIX`` and the id, on the channel workers listen on). ``RunCancels`` is a worker's
view: the entries of its claims whose cancel was requested, read with each heartbeat and added
to as notifications arrive. A processing thread ends such an entry before it starts; the
watchdog raises ``JobCancelled`` in a run going on (``Watchdog.request_cancel``)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

from django_iq.logs import get_logger
from django_iq.models import Entry, GroupLock
from django_iq.queries import CANCEL_PREFIX

logger = get_logger(__name__)


def cancel_payload_id(payload: str | None) -> int | None:
    """The entry id of a cancel's notification payload, or None for any other payload."""
    if payload is None or not payload.startswith(CANCEL_PREFIX):
        return None
    try:
        return int(payload[len(CANCEL_PREFIX) :])
    except ValueError:
        return None


class RunCancels:
    """The ids of this worker's claimed entries whose cancel was requested (``ids``, read by
    processing threads), and the hand-over of those running to ``request_cancel``."""

    def __init__(self, request_cancel: Callable[[int], bool]) -> None:
        self.ids: set[int] = set()
        self._request_cancel = request_cancel
        self._lock = threading.Lock()

    def look(self, lock_ids: Iterable[int]) -> set[int]:
        """Read which entries under this worker's locks ``lock_ids`` have a cancel requested
        (one query, none without locks); cancel those running. Return them."""
        locks = sorted(set(lock_ids))
        found: set[int] = set()
        if locks:
            keys = GroupLock.objects.filter(pk__in=locks).values("key")
            found = set(
                Entry.objects.filter(
                    cancel_requested_at__isnull=False, lock_key__in=keys
                ).values_list("pk", flat=True)
            )
        with self._lock:
            # Ids heard of that are not under our locks (another worker's entries) go.
            self.ids.intersection_update(found)
            self.ids.update(found)
        for entry_id in sorted(found):
            self._request_cancel(entry_id)
        return found

    def heard(self, entry_id: int) -> None:
        """A notification said ``entry_id``'s cancel was requested: end it before it starts if
        it is ours and waiting in a claim, and cancel its run if it runs here."""
        with self._lock:
            self.ids.add(entry_id)
        if self._request_cancel(entry_id):
            logger.debug("cancel heard entry=%s: its run here is being stopped", entry_id)
