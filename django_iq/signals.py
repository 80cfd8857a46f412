"""Signals sent as entries move through their life; receivers observe, they never steer.

Every signal is sent through ``send()``: a receiver that raises is logged and changes nothing, so
that no receiver can undo an enqueue that committed or alter what happens to an entry.
"""

from __future__ import annotations

from typing import Any

from django.dispatch import Signal

from django_iq.logs import get_logger

logger = get_logger(__name__)

# Sent after an entry is inserted (args: entry).
entry_enqueued = Signal()
# Sent in the processing thread just before the job is called (args: entry, worker_name).
entry_started = Signal()
# Sent after a job returned and its entry was removed (args: entry, worker_name, duration_seconds).
entry_finished = Signal()
# Sent once per batch of successes written together, before entry_finished for each of them
# (args: entries, worker_name): for receivers that read something per entry in one query.
entries_finished = Signal()
# Sent after a failed attempt was recorded (args: entry, error, will_retry, exception: what
# the job raised, or the database's refusal of its success).
entry_failed = Signal()


def send(signal: Signal, sender: Any, **kwargs: Any) -> None:
    """Send ``signal`` to every receiver; log each receiver that raised, and go on. Costs
    nothing where the signal has no receivers."""
    if not signal.receivers:
        return
    for receiver, response in signal.send_robust(sender=sender, **kwargs):
        if isinstance(response, Exception):
            logger.error(
                "signal receiver failed receiver=%s",
                getattr(receiver, "__qualname__", receiver),
                exc_info=response,
            )
