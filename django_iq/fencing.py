"""Self-fencing: how long a process may go without reaching the database before it must stop
acting, so that it stops before the leader may give its work to another process.

The leader declares a worker dead once its last heartbeat (stamped with the database's clock)
is ``WORKER_SILENT_AFTER_SECONDS`` old, and only then gives its entries to other workers. A
worker measures, on its own monotonic clock, the time since it *sent* its last heartbeat that
completed: that heartbeat was stamped after it was sent, so the worker's count runs ahead of
the leader's and needs no clock shared with the database. Once it passes
``fence_after_seconds()`` the worker stops claiming and raises ``WorkerFenced`` in its runs; a
run still going ``fence_grace_seconds()`` later makes the process exit at once. Both are over a
heartbeat interval before the silence limit, whenever the leader's recovery pass comes.
"""

from __future__ import annotations

from django_iq.conf import iq_settings

# The fence must leave this many heartbeat intervals between the last heartbeat and the fence
# (a heartbeat that is merely slow must not fence a worker) ...
FENCE_MIN_HEARTBEATS = 2
# ... and is this many heartbeat intervals before the silence limit: one for the runs to stop
# (the grace), one of margin before the leader may declare the worker dead.
FENCE_MARGIN_HEARTBEATS = 2


def fence_after_seconds(silent_after: float | None = None, heartbeat: float | None = None) -> float:
    """Seconds without a completed heartbeat after which a worker fences itself."""
    silent = iq_settings.WORKER_SILENT_AFTER_SECONDS if silent_after is None else silent_after
    beat = iq_settings.HEARTBEAT_INTERVAL_SECONDS if heartbeat is None else heartbeat
    return float(silent - FENCE_MARGIN_HEARTBEATS * beat)


def fence_grace_seconds(heartbeat: float | None = None) -> float:
    """How long a fenced run has to stop before its process exits at once."""
    return float(iq_settings.HEARTBEAT_INTERVAL_SECONDS if heartbeat is None else heartbeat)


def fence_leaves_margin(silent_after: float | None = None, heartbeat: float | None = None) -> bool:
    """Whether the settings leave room for the fence (check ``django_iq.E021``): at least
    ``FENCE_MIN_HEARTBEATS`` heartbeat intervals before it."""
    beat = iq_settings.HEARTBEAT_INTERVAL_SECONDS if heartbeat is None else heartbeat
    return fence_after_seconds(silent_after, beat) >= FENCE_MIN_HEARTBEATS * beat
