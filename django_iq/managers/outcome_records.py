"""Outcome records: one row per run that ended, written in the transaction that ended it (the
batch of acknowledgements, a failure, a cancel), and pruned by age."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db import models
from django.utils.functional import Promise

from django_iq.bounds import MAX_RETURN_DEPTH, text_problem
from django_iq.conf import iq_settings
from django_iq.managers.common import delete_first, storable_text, stored_json
from django_iq.options import JobCatalog
from django_iq.states import OutcomeStatus

if TYPE_CHECKING:
    from django_iq.models import Entry, RunOutcome

# The key of the object stored in place of a return value that is not kept whole.
NOT_KEPT_KEY = "django_iq_return_value_not_kept"
TIMEOUT_CLASS_SUFFIX = ".JobTimeout"


def keeps_outcomes(entry: Entry, jobs: JobCatalog | None) -> bool:
    """Whether a run of ``entry`` leaves an outcome record: always for a Django Tasks entry
    (the framework reads its result from them), else unless its job says
    ``keep_outcomes=False``."""
    return entry.result_id is not None or jobs is None or jobs.keeps_outcomes(entry.job_name)


def not_kept(why: str, **more: Any) -> dict[str, Any]:
    """The object stored in place of a return value that is not kept, saying ``why``."""
    return {NOT_KEPT_KEY: storable_text(why[:500]), **more}


def unstorable_part(value: Any) -> str | None:
    """Why some part of ``value`` cannot be stored in a JSON column of every supported database,
    or None: text (a string or a key) holding NUL, which PostgreSQL refuses, or a lone
    surrogate, which no database takes, or lists and dicts nested deeper than
    ``MAX_RETURN_DEPTH``, which MariaDB refuses. Checked before the JSON is written, without
    recursion (a value nested thousands deep is answered, not a ``RecursionError``)."""
    # (value, depth of the lists and dicts it sits in, where it is)
    stack: list[tuple[Any, int, tuple[Any, ...]]] = [(value, 0, ())]
    while stack:
        item, depth, path = stack.pop()
        if isinstance(item, Promise):  # a lazy string: stored as its text
            item = str(item)
        if isinstance(item, str):
            problem = text_problem(item)
            if problem is not None:
                return f"the text at {where(path)} {problem}"
            continue
        if not isinstance(item, (dict, list, tuple)):
            continue
        if depth >= MAX_RETURN_DEPTH:
            return (
                f"nested more than {MAX_RETURN_DEPTH} lists or dicts deep (at {where(path)}), "
                "more than the database stores"
            )
        if isinstance(item, dict):
            for key, member in item.items():
                if isinstance(key, str):
                    problem = text_problem(key)
                    if problem is not None:
                        return f"the key {key!a} at {where(path)} {problem}"
                stack.append((member, depth + 1, (path, key)))
        else:
            stack.extend((member, depth + 1, (path, i)) for i, member in enumerate(item))
    return None


def where(path: tuple[Any, ...]) -> str:
    """``path`` (nested ``(parent, key)`` pairs) as ``value[0]['a']``."""
    keys = []
    while path:
        path, key = path
        keys.append(f"[{key!a}]")
    return "value" + "".join(reversed(keys))


def return_json(value: Any) -> str | None:
    """The JSON text a return value is stored as (None for None): the value itself, or, when it
    is not JSON, cannot be stored (see ``unstorable_part``) or its JSON takes more than
    ``OUTCOME_MAX_RETURN_BYTES``, an object saying so
    (``{"django_iq_return_value_not_kept": why, "bytes": size}``)."""
    if value is None:
        return None
    problem = unstorable_part(value)
    if problem is not None:
        return json.dumps(not_kept(f"not storable: {problem}"))
    try:
        # ASCII only, so the text's length is its size in bytes.
        text = json.dumps(value, cls=DjangoJSONEncoder, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        return json.dumps(not_kept(f"not JSON: {type(exc).__name__}: {exc}"))
    limit = int(iq_settings.OUTCOME_MAX_RETURN_BYTES)
    if len(text) > limit:
        why = f"{len(text)} bytes of JSON, more than OUTCOME_MAX_RETURN_BYTES ({limit})"
        return json.dumps(not_kept(why, bytes=len(text)))
    return text


def unstarted_text(status: str, attempts: int) -> str:
    """What the outcome record of an entry that ended without this attempt says: whether it
    had run before (``attempts`` failed)."""
    ended = "expired" if status == OutcomeStatus.EXPIRED else "was cancelled"
    if not attempts:
        return f"The entry {ended} before it started."
    return (
        f"The entry {ended} before its retry (attempt {attempts + 1}) started; {attempts} "
        "earlier attempt(s) had failed (see its error records)."
    )


def failure_status(exception_class: str) -> str:
    """The status of an attempt that ended without success by ``exception_class``."""
    if exception_class.endswith(TIMEOUT_CLASS_SUFFIX):
        return OutcomeStatus.TIMED_OUT.value
    return OutcomeStatus.FAILED.value


class RunOutcomeManager(models.Manager["RunOutcome"]):
    """Writes outcome records, each in its caller's transaction, and prunes them."""

    def _record(self, entry: Entry, **fields: Any) -> RunOutcome:
        return self.model(
            entry_id=entry.pk,
            result_id=entry.result_id,
            job_name=entry.job_name,
            queue=entry.queue_id,
            args=stored_json(entry.args),
            kwargs=stored_json(entry.kwargs),
            enqueued_at=entry.enqueued_at,
            **fields,
        )

    def record_successes(
        self,
        done: Sequence[tuple[Entry, Any, datetime, float | None, str]],
    ) -> None:
        """One row per ``(entry, return value, finished at, duration, worker name)``, in one
        INSERT."""
        rows = []
        for entry, value, finished_at, duration, worker_name in done:
            stored = return_json(value)
            rows.append(
                self._record(
                    entry,
                    status=OutcomeStatus.SUCCEEDED,
                    attempt=entry.attempts + 1,
                    return_value=None if stored is None else json.loads(stored),
                    worker_name=worker_name,
                    started_at=started_at(finished_at, duration),
                    finished_at=finished_at,
                    duration_seconds=duration,
                )
            )
        if rows:
            self.bulk_create(rows)

    def record_failure(
        self,
        entry: Entry,
        *,
        attempt: int,
        exception_class: str,
        traceback: str,
        worker_name: str,
        started: datetime | None,
        now: datetime,
        status: str | None = None,
    ) -> RunOutcome:
        """The row of an attempt that ended without success (timed out if by ``JobTimeout``;
        ``status`` says otherwise: ``snoozed``)."""
        return self.bulk_create(
            [
                self._record(
                    entry,
                    status=status or failure_status(exception_class),
                    attempt=attempt,
                    exception_class=exception_class[:255],
                    traceback=traceback,
                    worker_name=worker_name[:200],
                    started_at=started,
                    finished_at=now,
                    duration_seconds=(
                        None if started is None else max(0.0, (now - started).total_seconds())
                    ),
                )
            ]
        )[0]

    def record_unstarted(self, entries: Sequence[Entry], now: datetime, status: str) -> None:
        """The rows of entries that ended without running (this attempt): ``cancelled``
        while they waited, or ``expired`` before they started (or, retried, started again)."""
        exception_class = (
            "django_iq.exceptions.EntryExpired"
            if status == OutcomeStatus.EXPIRED
            else "django_iq.exceptions.EntryCancelled"
        )
        rows = [
            self._record(
                entry,
                status=status,
                attempt=entry.attempts + 1,
                exception_class=exception_class,
                traceback=unstarted_text(status, entry.attempts),
                finished_at=now,
            )
            for entry in entries
        ]
        if rows:
            self.bulk_create(rows)

    def prune(self, older_than: datetime, batch_size: int) -> int:
        """Delete up to ``batch_size`` records of runs that finished before ``older_than``."""
        return delete_first(self.filter(finished_at__lt=older_than), "finished_at", batch_size)


def started_at(finished_at: datetime, duration: float | None) -> datetime | None:
    """When a run that took ``duration`` seconds and finished at ``finished_at`` started."""
    return None if duration is None else finished_at - timedelta(seconds=duration)
