"""``django_iq.cancel()``: stop work, whether it waits or runs.

A waiting entry (no worker holds it) ends at once with a ``cancelled`` outcome record. For an
entry a worker holds, running or waiting in its claim, the cancel is requested: the worker
raises ``JobCancelled`` in the run (a coroutine job's task is cancelled), or ends the entry
before it starts; the run's outcome record says ``cancelled``, it is never retried, and its
group's next entry is free. A run that does not stop within ``TIMEOUT_GRACE_SECONDS`` is given
up as a stuck timeout is. The worker learns of the request by ``NOTIFY`` on PostgreSQL, and with
each heartbeat everywhere (``django_iq.cancels``)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from django_iq.exceptions import EntryNotFound
from django_iq.models import Entry
from django_iq.registry import catalog
from django_iq.waiting import entry_ids


@dataclass(frozen=True)
class CancelReport:
    """What ``cancel()`` did: the ids ``cancelled`` at once (no worker held them), those whose
    cancel was ``requested`` from the worker running or holding them, and those ``not_found``
    (ended already, or never enqueued)."""

    cancelled: list[int]
    requested: list[int]
    not_found: list[int]


def cancel(entries: Entry | int | Iterable[Entry | int]) -> CancelReport:
    """Cancel an entry (an ``Entry`` or its id) or a list of them; see the module docstring.

    For one entry that does not exist, raise ``EntryNotFound``; for a list, report it
    (``not_found``). Raise ``InvalidArgument`` for what is not an entry or an id, with nothing
    written."""
    single = isinstance(entries, (Entry, int))
    ids = entry_ids([entries] if isinstance(entries, (Entry, int)) else entries)
    ended, requested = Entry.objects.cancel_or_request(ids, catalog)
    done = {entry.pk for entry in ended} | set(requested)
    missing = [pk for pk in ids if pk not in done]
    if single and missing:
        raise EntryNotFound(missing)
    return CancelReport(
        cancelled=sorted(entry.pk for entry in ended),
        requested=sorted(requested),
        not_found=missing,
    )
