"""What an operator can do, in one place for every door: cancel entries, make deferred entries
run now, requeue and delete failed entries' error records, pause, resume and compact queues,
disable and enable jobs, run cron jobs now and delete them, issue and revoke API tokens. The
admin, the API and the ``iq_*`` commands call these functions; each returns an
``ActionResult`` (done, skipped with reasons, not found) worded one way, and writes its audit
record through ``django_iq.audit`` in the same transaction, whichever door it came through.

Permissions are checked by the doors (the admin's, the API's and the same permission names);
commands run with the rights of whoever can run ``manage.py``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from django.db import router, transaction

from django_iq import audit, compaction
from django_iq.audit import Actor
from django_iq.exceptions import JobNotRegistered, QueueNotFound
from django_iq.logs import get_logger
from django_iq.models import (
    ApiToken,
    CronJob,
    DisabledJob,
    Entry,
    EntryError,
    Queue,
)
from django_iq.registry import catalog, get_job
from django_iq.states import EntryState
from django_iq.wording import plural

logger = get_logger(__name__)

# Items named in a message; past this many, only their number is given.
LISTED_ITEMS = 20

ALREADY_PAUSED = "already paused"
NOT_PAUSED = "not paused"
NOT_DEFERRED = "not deferred (only initial entries can run now)"
NOT_A_FINAL_FAILURE = "not a final failure, or already requeued"
NOT_DISABLED = "not disabled"
ALREADY_DISABLED = "already disabled"
ALREADY_ENABLED = "already enabled"
CRON_NOT_STARTED = "disabled, done, or already pending or running"
ALREADY_REVOKED = "already revoked"


@dataclass
class ActionResult:
    """What one operator action did, to what."""

    action: str
    verb: str
    noun: tuple[str, str]
    done: list[Any] = field(default_factory=list)
    # Item to the reason it was left alone.
    skipped: dict[Any, str] = field(default_factory=dict)
    not_found: list[Any] = field(default_factory=list)
    # What the action made: the new entries of a requeue.
    created: list[int] = field(default_factory=list)
    # Said after the count: "matching job=...", "(3 entries)".
    detail: str = ""
    # Item to a note said after it: "shop.jobs.x (3 entries)".
    notes: dict[Any, str] = field(default_factory=dict)
    # For an action on rows chosen by filters: how many were done (they are not named).
    counted: int | None = None
    # Why something may not be found: "finished, failed for good or already cancelled".
    not_found_hint: str = ""
    # A cancel of entries a worker holds: requested from that worker, which stops them.
    requested: list[Any] = field(default_factory=list)

    @property
    def done_count(self) -> int:
        return self.counted if self.counted is not None else len(self.done)

    @property
    def message(self) -> str:
        """One sentence per part, the same whichever door the action came through:
        ``Paused 1 queue: emails. Skipped 1, already paused: default. Not found: x.``"""
        done = plural(self.done_count, *self.noun)
        text = f"{self.verb} {done}{self.detail}"
        text += f": {self._items(self.done)}." if self.done else "."
        if self.created:
            text += f" New entries: {self._items(self.created)}."
        if self.requested:
            text += (
                f" Cancel requested for {plural(len(self.requested), *self.noun)} being run "
                f"(the worker stops them): {self._items(self.requested)}."
            )
        reasons: dict[str, list[Any]] = {}
        for item, reason in self.skipped.items():
            reasons.setdefault(reason, []).append(item)
        for reason, items in reasons.items():
            text += f" Skipped {len(items)}, {reason}: {self._items(items)}."
        if self.not_found:
            hint = f" ({self.not_found_hint})" if self.not_found_hint else ""
            text += f" Not found: {self._items(self.not_found)}{hint}."
        return text

    def _items(self, items: Sequence[Any]) -> str:
        if len(items) > LISTED_ITEMS:
            return f"{len(items):,} of them"
        return ", ".join(f"{item}{self.notes.get(item, '')}" for item in items)

    def as_dict(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "done": self.done,
            "done_count": self.done_count,
            "skipped": self.skipped,
            "not_found": self.not_found,
            "created": self.created,
            "requested": self.requested,
            "message": self.message,
        }


def _atomic() -> Any:
    return transaction.atomic(using=router.db_for_write(Entry))


T = TypeVar("T")


def _ids(ids: Iterable[T]) -> list[T]:
    """The items in their first order, each once."""
    return list(dict.fromkeys(ids))


# -- entries ---------------------------------------------------------------------------------


def cancel(ids: Iterable[int], actor: Actor) -> ActionResult:
    """Cancel these entries (``django_iq.cancel``): those no worker holds are deleted at once;
    for those a worker holds, running or in its claim, the cancel is requested from it."""
    wanted = sorted(set(ids))
    with _atomic():
        cancelled, requested = Entry.objects.cancel_or_request(wanted, catalog)
        done = sorted(entry.pk for entry in cancelled)
        ended = set(done) | set(requested)
        outcome = ActionResult(
            "cancel",
            "Cancelled",
            ("entry", "entries"),
            done=done,
            requested=sorted(requested),
            not_found=[pk for pk in wanted if pk not in ended],
            not_found_hint="finished, failed for good or already cancelled",
        )
        return audit.record(outcome, actor, f"entries {_listed(wanted)}")


def cancel_matching(
    actor: Actor, *, job: str | None = None, queue: str | None = None, dry_run: bool = False
) -> ActionResult:
    """Cancel every waiting entry of a job and/or a queue (at least one); entries a worker
    holds are left alone. ``dry_run``: count them, change and record nothing."""
    detail = matching_detail(job=job, queue=queue)
    if not detail:
        raise ValueError("cancel_matching() needs a job or a queue.")
    noun = ("waiting entry", "waiting entries")
    if dry_run:
        count = Entry.objects.waiting_matching(job_name=job, queue=queue).count()
        return ActionResult("cancel", "Would cancel", noun, detail=detail, counted=count)
    # Not one transaction: the cancels commit a batch at a time (each holding its rows only
    # while it runs), and the audit record says how many once they are done.
    count = Entry.objects.cancel_waiting_matching(job_name=job, queue=queue, jobs=catalog)
    outcome = ActionResult("cancel", "Cancelled", noun, detail=detail, counted=count)
    with _atomic():
        return audit.record(outcome, actor, f"waiting entries{detail}")


def run_now(ids: Iterable[int], actor: Actor) -> ActionResult:
    """Make these deferred (``initial``) entries ``pending`` now."""
    wanted = sorted(set(ids))
    with _atomic():
        states = dict(Entry.objects.filter(pk__in=wanted).values_list("pk", "state"))
        deferred = [pk for pk in wanted if states.get(pk) == EntryState.INITIAL]
        Entry.objects.run_now(deferred)
        made = set(
            Entry.objects.filter(pk__in=deferred, state=EntryState.PENDING).values_list(
                "pk", flat=True
            )
        )
        outcome = ActionResult(
            "run_now",
            "Made pending now",
            ("entry", "entries"),
            done=[pk for pk in wanted if pk in made],
            skipped={pk: NOT_DEFERRED for pk in wanted if pk in states and pk not in made},
            not_found=[pk for pk in wanted if pk not in states],
            not_found_hint="finished, failed for good or cancelled",
        )
        return audit.record(outcome, actor, f"entries {_listed(wanted)}")


# -- failed entries --------------------------------------------------------------------------


def requeue(error_ids: Iterable[int], actor: Actor) -> ActionResult:
    """A fresh entry for each final, not yet requeued failure among these error records."""
    wanted = sorted(set(error_ids))
    with _atomic():
        found = set(EntryError.objects.filter(pk__in=wanted).values_list("pk", flat=True))
        eligible = set(
            EntryError.objects.failed().filter(pk__in=found).values_list("pk", flat=True)
        )
        # requeue() reads only the ids, locks the rows itself and skips what is not eligible.
        created = EntryError.objects.requeue(
            [EntryError(pk=pk) for pk in sorted(eligible)], catalog
        )
        requeued = set(
            EntryError.objects.filter(pk__in=eligible, requeued_at__isnull=False).values_list(
                "pk", flat=True
            )
        )
        outcome = ActionResult(
            "requeue",
            "Requeued",
            ("failed entry", "failed entries"),
            done=[pk for pk in wanted if pk in requeued],
            skipped={
                pk: NOT_A_FINAL_FAILURE for pk in wanted if pk in found and pk not in requeued
            },
            not_found=[pk for pk in wanted if pk not in found],
            not_found_hint="no such error record, or pruned",
            created=[entry.pk for entry in created],
        )
        return audit.record(outcome, actor, f"error records {_listed(wanted)}")


def requeue_matching(
    actor: Actor,
    *,
    job: str | None = None,
    exception_class: str | None = None,
    queue: str | None = None,
) -> ActionResult:
    """Requeue every failed entry of a job, exception class and/or queue (at least one, or
    ``requeue_all``)."""
    detail = matching_detail(job=job, exception_class=exception_class, queue=queue)
    if not detail:
        raise ValueError("requeue_matching() needs a job, an exception class or a queue.")
    return _requeue_matching(actor, detail, job, exception_class, queue)


def matching_detail(
    *, job: str | None = None, exception_class: str | None = None, queue: str | None = None
) -> str:
    """`` matching job=... queue=...``, as the messages say it; empty without a filter."""
    matching = {"job": job, "exception_class": exception_class, "queue": queue}
    described = " ".join(f"{key}={value}" for key, value in matching.items() if value)
    return f" matching {described}" if described else ""


def requeue_all(actor: Actor) -> ActionResult:
    """Requeue every failed entry."""
    return _requeue_matching(actor, "", None, None, None)


def _requeue_matching(
    actor: Actor, detail: str, job: str | None, exception_class: str | None, queue: str | None
) -> ActionResult:
    with _atomic():
        count = EntryError.objects.requeue_matching(
            job_name=job, exception_class=exception_class, queue=queue, jobs=catalog
        )
        outcome = ActionResult(
            "requeue",
            "Requeued",
            ("failed entry", "failed entries"),
            detail=detail,
            counted=count,
        )
        return audit.record(outcome, actor, f"failed entries{detail or ' (all)'}")


# -- queues ----------------------------------------------------------------------------------


def pause(names: Iterable[str], actor: Actor) -> ActionResult:
    """Stop serving these queues; entries already running finish."""
    return _set_paused(_ids(names), actor, paused=True)


def resume(names: Iterable[str], actor: Actor) -> ActionResult:
    """Serve these queues again."""
    return _set_paused(_ids(names), actor, paused=False)


def _set_paused(names: list[str], actor: Actor, *, paused: bool) -> ActionResult:
    change = Queue.objects.pause if paused else Queue.objects.resume
    outcome = ActionResult(
        "pause" if paused else "resume", "Paused" if paused else "Resumed", ("queue", "queues")
    )
    with _atomic():
        for name in names:
            try:
                # A queue declared in settings or by a job may have no row yet.
                Queue.objects.ensure(name, catalog)
            except QueueNotFound:
                outcome.not_found.append(name)
                continue
            if change(name):
                outcome.done.append(name)
            else:
                outcome.skipped[name] = ALREADY_PAUSED if paused else NOT_PAUSED
        return audit.record(outcome, actor, f"queues {_listed(names)}")


def compact(
    actor: Actor, *, queues: Iterable[str] | None = None, job: str | None = None
) -> ActionResult:
    """Merge the waiting entries of each group of jobs declared with ``merge`` (in these queues
    and/or of this job when given), one bounded pass per queue (``compaction.compact``).

    Raise ``JobNotRegistered`` or ``InvalidJobOptions`` for a ``job`` that is unknown or has no
    ``merge``; a queue that does not exist is reported as not found."""
    names = _ids(queues) if queues is not None else None
    compaction.merging_jobs(job)  # refuse an unknown job before anything is written
    outcome = ActionResult("compact", "Compacted", ("group", "groups"))
    merged_away = 0
    with _atomic():
        # A queue declared in settings or by a job may have no row yet (and no entries).
        existing = set(Queue.objects.values_list("name", flat=True))
        existing.update(catalog.declared_queues())
        for name in names if names is not None else [None]:
            if name is not None and name not in existing:
                outcome.not_found.append(name)
                continue
            done = compaction.compact(queue=name, job=job)
            merged_away += done.merged_away
            for compacted in done.merged:
                item = compaction.label(compacted.group)
                outcome.done.append(item)
                outcome.notes[item] = (
                    f" ({len(compacted.replaced)} entries into entry {compacted.entry_id})"
                )
            outcome.skipped.update(done.skipped)
        outcome.detail = f" ({plural(merged_away, 'entry', 'entries')} merged away)"
        target = f"queues {_listed(names)}" if names is not None else "all queues"
        if job is not None:
            target += f", job {job}"
        return audit.record(outcome, actor, target)


# -- jobs ------------------------------------------------------------------------------------


def unknown_job(name: str, *, enabling: bool = False) -> str | None:
    """Why ``name`` names no job to disable (or enable), with a close registered name when
    there is one; None when it does. A job removed from the code may still be disabled:
    enabling it stays possible."""
    if enabling and DisabledJob.objects.filter(job_name=name).exists():
        return None
    try:
        get_job(name)
    except JobNotRegistered as exc:
        return str(exc)
    return None


def disable(job_names: Iterable[str], actor: Actor) -> ActionResult:
    """Disable these jobs: their waiting entries become ``disabled``, and so do new ones."""
    names = _ids(job_names)
    outcome = ActionResult("disable", "Disabled", ("job", "jobs"))
    with _atomic():
        already = set(
            DisabledJob.objects.filter(job_name__in=names).values_list("job_name", flat=True)
        )
        for name in names:
            # Run for a job already disabled too: it catches entries enqueued meanwhile.
            changed = Entry.objects.disable(name)
            outcome.notes[name] = f" ({plural(changed, 'entry', 'entries')})"
            if name in already:
                outcome.skipped[name] = ALREADY_DISABLED
            else:
                outcome.done.append(name)
        return audit.record(outcome, actor, f"jobs {_listed(names)}")


def enable(job_names: Iterable[str], actor: Actor) -> ActionResult:
    """Enable these disabled jobs: their entries wait or run again by their own ``run_at``."""
    names = _ids(job_names)
    outcome = ActionResult("enable", "Enabled", ("job", "jobs"))
    with _atomic():
        disabled = set(
            DisabledJob.objects.filter(job_name__in=names).values_list("job_name", flat=True)
        )
        for name in names:
            changed = Entry.objects.enable(name)
            if name in disabled:
                outcome.done.append(name)
                outcome.notes[name] = f" ({plural(changed, 'entry', 'entries')})"
            else:
                outcome.skipped[name] = NOT_DISABLED
        return audit.record(outcome, actor, f"jobs {_listed(names)}")


# -- cron jobs -------------------------------------------------------------------------------


def run_cron_now(cron_jobs: Iterable[CronJob], actor: Actor) -> ActionResult:
    """Make each cron job's waiting entry ``pending`` now (creating it if needed)."""
    chosen = list(cron_jobs)
    outcome = ActionResult("run_now", "Made pending now", ("cron job", "cron jobs"))
    with _atomic():
        for cron_job in chosen:
            if CronJob.objects.run_now(cron_job, catalog):
                outcome.done.append(cron_job.name)
            else:
                outcome.skipped[cron_job.name] = CRON_NOT_STARTED
        return audit.record(outcome, actor, f"cron jobs {_listed([c.name for c in chosen])}")


def set_cron_enabled(cron_jobs: Iterable[CronJob], enabled: bool, actor: Actor) -> ActionResult:
    """Enable or disable cron jobs; the leader adds or removes their entry on its next pass."""
    chosen = list(cron_jobs)
    outcome = ActionResult(
        "enable" if enabled else "disable",
        "Enabled" if enabled else "Disabled",
        ("cron job", "cron jobs"),
    )
    with _atomic():
        targets = [c for c in chosen if c.is_enabled != enabled]
        CronJob.objects.set_enabled([c.pk for c in targets], enabled)
        outcome.done = [c.name for c in targets]
        outcome.skipped = {
            c.name: ALREADY_ENABLED if enabled else ALREADY_DISABLED
            for c in chosen
            if c not in targets
        }
        return audit.record(outcome, actor, f"cron jobs {_listed([c.name for c in chosen])}")


def delete_errors(ids: Iterable[int], actor: Actor) -> ActionResult:
    """Delete these error records; the entries they are about are not touched."""
    wanted = sorted(set(ids))
    with _atomic():
        done = EntryError.objects.delete_records(wanted)
        outcome = ActionResult(
            "delete",
            "Deleted",
            ("error record", "error records"),
            done=done,
            not_found=[pk for pk in wanted if pk not in set(done)],
        )
        return audit.record(outcome, actor, f"error records {_listed(wanted)}")


def delete_cron_jobs(cron_jobs: Iterable[CronJob], actor: Actor) -> ActionResult:
    """Delete cron jobs and their entries not running yet (``CronJobManager.remove``); one
    declared in ``DJANGO_IQ["CRON"]`` comes back at the leader's next pass."""
    chosen = list(cron_jobs)
    with _atomic():
        stored = set(
            CronJob.objects.filter(pk__in=[c.pk for c in chosen]).values_list("pk", flat=True)
        )
        CronJob.objects.remove([c for c in chosen if c.pk in stored])
        outcome = ActionResult(
            "delete",
            "Deleted",
            ("cron job", "cron jobs"),
            done=[c.name for c in chosen if c.pk in stored],
            not_found=[c.name for c in chosen if c.pk not in stored],
        )
        return audit.record(outcome, actor, f"cron jobs {_listed([c.name for c in chosen])}")


def save_cron_job(
    cron_job: CronJob, changed: Iterable[str], actor: Actor, *, created: bool
) -> ActionResult:
    """Save a cron job an operator created or edited (only the ``changed`` fields of an edit)
    and re-time its waiting entry when what it is built from changed. Raises
    ``InvalidSchedule`` (writing nothing) for a schedule that cannot be used: not five cron
    fields, no fire time to come, a one-off time outside what a run may be set for."""
    outcome = ActionResult(
        "add_cron" if created else "edit_cron",
        "Added" if created else "Changed",
        ("cron job", "cron jobs"),
    )
    with _atomic():
        fields = CronJob.objects.save_edited(cron_job, changed, catalog, created=created)
        outcome.done = [cron_job.name]
        if not created:
            outcome.notes[cron_job.name] = f" ({', '.join(fields) or 'nothing changed'})"
        return audit.record(outcome, actor, f"cron job {cron_job.name}: {cron_job.describe()}")


# -- API tokens ------------------------------------------------------------------------------


def issue_token(
    user: Any, name: str, actor: Actor, *, expires_at: datetime | None = None
) -> tuple[ApiToken, str]:
    """Make an API token acting as ``user``; return its row and the token, shown to the caller
    once and never stored. Raises ``InvalidApiToken`` (writing nothing) for a bad name, user
    or expiry."""
    with _atomic():
        row, token = ApiToken.objects.issue(user, name, expires_at=expires_at)
        outcome = ActionResult(
            "issue_token", "Issued", ("API token", "API tokens"), done=[str(row)]
        )
        outcome.detail = f" for {user.get_username()}"
        audit.record(outcome, actor, f"API token {row.pk}")
        return row, token


def revoke_tokens(ids: Iterable[int], actor: Actor) -> ActionResult:
    """Revoke these API tokens: each is refused from its next request on."""
    wanted = sorted(set(ids))
    with _atomic():
        labels = {row.pk: str(row) for row in ApiToken.objects.filter(pk__in=wanted)}
        revoked, already = ApiToken.objects.revoke(wanted)
        outcome = ActionResult(
            "revoke_token",
            "Revoked",
            ("API token", "API tokens"),
            done=[labels[pk] for pk in revoked],
            skipped=dict.fromkeys((labels[pk] for pk in already), ALREADY_REVOKED),
            not_found=[pk for pk in wanted if pk not in labels],
        )
        return audit.record(outcome, actor, f"API tokens {_listed(wanted)}")


def _listed(items: Sequence[Any]) -> str:
    if len(items) > LISTED_ITEMS:
        shown = ", ".join(str(item) for item in items[:LISTED_ITEMS])
        return f"{shown} and {len(items) - LISTED_ITEMS:,} more"
    return ", ".join(str(item) for item in items)
