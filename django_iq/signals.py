"""Signals sent as entries move through their life; receivers observe, they never steer."""

from django.dispatch import Signal

# Sent after an entry is inserted (args: entry).
entry_enqueued = Signal()
# Sent in the processing thread just before the job is called (args: entry, worker_name).
entry_started = Signal()
# Sent after a job returned and its entry was removed (args: entry, worker_name, duration_seconds).
entry_finished = Signal()
# Sent after a failed attempt was recorded (args: entry, error, will_retry).
entry_failed = Signal()
