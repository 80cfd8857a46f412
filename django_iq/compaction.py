"""Compaction: for jobs declared ``@job(group_by=..., merge=fold)``, replace the waiting
entries of a group by one entry whose arguments are ``fold`` of theirs.

What it promises: a group whose lock a worker holds is never touched; every entry either stays
as it was or is replaced, in the same transaction, by the merged entry (nothing is lost, an
entry committed meanwhile stays for the next pass); a fold that raises, or returns arguments
that are not JSON or that the job does not accept, leaves its group as it was and is reported,
and the pass goes on with the other groups. What it does not: it does not merge entries of
different jobs or queues, nor entries with a unique key, of a cron job, of a Django Tasks result,
or that already ran (see ``managers/compaction.py``). The leader runs a pass every
``COMPACT_INTERVAL_SECONDS`` (``duties/compaction.py``); ``iq_compact`` and the queue admin's
action run one on demand, through ``operations.compact``.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import Any

from django.utils import timezone

from django_iq.exceptions import InvalidJobArguments, InvalidJobOptions, LeadershipLost
from django_iq.group_keys import as_kwargs
from django_iq.logs import get_logger
from django_iq.managers.compaction import Compacted, Group
from django_iq.models import Entry
from django_iq.registry import Job, get_job, registered_jobs
from django_iq.serialization import validate_arguments

logger = get_logger(__name__)

# Bounds of one pass, so that it never holds the leader (or an operator's request) for long:
# the oldest groups first, and the oldest entries of each; the rest wait for the next pass.
MAX_GROUPS_PER_PASS = 100
MAX_ENTRIES_PER_GROUP = 1000


class FoldRefused(Exception):
    """A job's ``merge`` raised or returned what cannot be stored: the group stays as it was."""


@dataclass
class CompactionPass:
    """The groups one pass merged, and those it left alone with the reason (keyed by
    ``job queue group_key``)."""

    merged: list[Compacted] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)

    @property
    def merged_away(self) -> int:
        """Entries fewer in the queues after the pass."""
        return sum(done.merged_away for done in self.merged)


def label(group: Group) -> str:
    return f"{group.job_name} {group.queue} {group.group_key!r}"


def merging_jobs(job: str | None = None) -> dict[str, Job[Any, Any]]:
    """The registered jobs declared with ``merge``, by name; only ``job`` when given (raise
    ``JobNotRegistered`` if it is unknown, ``InvalidJobOptions`` if it has no ``merge``)."""
    if job is None:
        return {name: j for name, j in registered_jobs().items() if j.options.merge is not None}
    found = get_job(job)
    if found.options.merge is None:
        raise InvalidJobOptions(
            f"Job {found.name} has no merge function; declare it with "
            "@job(group_by=..., merge=fold) to compact its entries."
        )
    return {found.name: found}


def fold_entries(job: Job[Any, Any], entries: list[Entry]) -> dict[str, Any]:
    """The merged entry's kwargs: ``job.options.merge`` of each entry's arguments as one
    keyword dict (bound through the function's signature, defaults filled in), in enqueue
    order. Raise ``FoldRefused`` if they do not bind, if the fold raises, or if it returns
    something other than a dict of JSON values the job accepts."""
    try:
        calls = [as_kwargs(job.func, entry.args, entry.kwargs) for entry in entries]
    except InvalidJobArguments as exc:
        raise FoldRefused(f"a stored entry does not fit the job's signature: {exc}") from None
    try:
        result = job.options.merge(calls)
    except Exception as exc:  # the user's fold: any error leaves its group alone, reported
        logger.warning("merge raised job=%s", job.name, exc_info=True)
        raise FoldRefused(f"merge raised {type(exc).__name__}: {exc}"[:500]) from None
    if not isinstance(result, dict):
        raise FoldRefused(
            f"merge must return a dict of keyword arguments, got {type(result).__name__}"
        )
    try:
        _, kwargs = validate_arguments([], result)
        as_kwargs(job.func, [], kwargs)
        job.limit_keys_of([], kwargs)  # the keys of its limits, taken again at the merge
    except InvalidJobArguments as exc:
        raise FoldRefused(f"merge returned arguments that cannot be enqueued: {exc}") from None
    return kwargs


def compact(
    *,
    queue: str | None = None,
    job: str | None = None,
    atomic: Callable[[], AbstractContextManager[Any]] = nullcontext,
    now: datetime | None = None,
    max_groups: int = MAX_GROUPS_PER_PASS,
    max_entries: int = MAX_ENTRIES_PER_GROUP,
) -> CompactionPass:
    """Merge the waiting entries of up to ``max_groups`` groups (of ``queue`` and/or ``job``
    when given), each in a transaction of its own opened inside ``with atomic():`` (the
    leader passes its fence). One group that fails is reported and skipped."""
    now = now or timezone.now()
    jobs = merging_jobs(job)
    result = CompactionPass()
    if not jobs:
        return result
    for group in Entry.objects.compactable_groups(list(jobs), queue=queue, limit=max_groups):
        registered = jobs[group.job_name]
        try:
            with atomic():
                done = Entry.objects.compact_group(
                    group,
                    partial(fold_entries, registered),
                    max_attempts=registered.options.effective_max_attempts,
                    limit_keys=partial(registered.limit_keys_of, ()),
                    now=now,
                    limit=max_entries,
                )
        except LeadershipLost:
            raise
        except FoldRefused as exc:
            logger.warning(
                "compaction skipped job=%s queue=%s: %s", group.job_name, group.queue, exc
            )
            result.skipped[label(group)] = str(exc)
            continue
        except Exception as exc:  # one group that cannot be merged must not stop the pass
            logger.exception("compaction failed job=%s queue=%s", group.job_name, group.queue)
            result.skipped[label(group)] = f"{type(exc).__name__}: {exc}"[:500]
            continue
        if isinstance(done, str):
            result.skipped[label(group)] = done
            continue
        result.merged.append(done)
        logger.info(
            "compacted job=%s queue=%s entries=%s into entry=%s",
            group.job_name,
            group.queue,
            len(done.replaced),
            done.entry_id,
        )
    return result
