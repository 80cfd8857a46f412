"""Entry rows before they are written: built from a validated call, and made unsaved again when
an insert is refused or rolled back."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django_iq.appmodels import iq
from django_iq.options import JobOptions, expires_at
from django_iq.states import EntryState, lock_key_for

if TYPE_CHECKING:
    from django_iq.models import Entry

_FIELD_DEFAULTS: dict[Any, list[tuple[str, Callable[[], Any]]]] = {}


def _field_defaults(model: Any) -> list[tuple[str, Callable[[], Any]]]:
    """``(attname, default)`` of ``model``'s concrete fields, in order (found once); each
    default is called for a value of its own, as Django does."""
    defaults = _FIELD_DEFAULTS.get(model)
    if defaults is None:
        defaults = _FIELD_DEFAULTS[model] = [
            (f.attname, (lambda: None) if f.primary_key else f.get_default)
            for f in model._meta.concrete_fields
        ]
    return defaults


def unsave(entry: Entry) -> None:
    """Make ``entry`` unsaved again: its insert was refused or rolled back."""
    entry.pk = None
    entry._state.adding, entry._state.db = True, None


def build_entry(
    job_name: str,
    args: Sequence[Any],
    kwargs: dict[str, Any],
    options: JobOptions,
    now: datetime,
    run_at: datetime,
    group_key: str | None = None,
) -> Entry:
    """Build an unsaved entry from arguments already checked by ``validate_arguments``;
    ``group_key`` (taken from the call) replaces the options' one."""
    group_key = group_key if group_key is not None else options.group_key
    values = {
        "queue_id": options.queue_name,
        "job_name": job_name,
        "args": list(args),
        "kwargs": kwargs,
        "priority": options.effective_priority,
        "state": EntryState.INITIAL if run_at > now else EntryState.PENDING,
        "group_key": group_key,
        "lock_key": lock_key_for(group_key),
        "run_at": run_at,
        "max_attempts": options.effective_max_attempts,
        "enqueued_at": now,
        "unique_key": options.unique_key_for(job_name, args, kwargs),
        "timeout_seconds": options.timeout,
        "expires_at": expires_at(options.expires, max(run_at, now)),
    }
    # Positional, in field order: Django's fast path (no keyword matching per field).
    model: Callable[..., Entry] = iq.Entry
    return model(
        *[
            values[name] if name in values else default()
            for name, default in _field_defaults(iq.Entry)
        ]
    )
