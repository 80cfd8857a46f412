"""``Entry.objects``: every way entries are read by state and changed, listed in one place.

Each method is a function of the module that does the work, taking the manager as its first
argument; the state filters come from the queryset and are on the manager too.

=========================  ==========================================================  =================
What                       Methods                                                     Module
=========================  ==========================================================  =================
states (the queryset)      ``initial pending disabled blocked computing`` ...          ``entry_states``
                           ``awaiting_compute running locked_by_dead_workers due``
enqueue                    ``enqueue enqueue_many enqueue_blocked``                    ``enqueue``
claim                      ``claim``                                                   ``claims``
how an attempt ends        ``complete_many fail snooze end_attempt expire cancel_run`` ``attempts``
waiting entries            ``promote_due run_now cancel cancel_returning disable``     ``entry_actions``
                           ``enable waiting_times mark_awaited expire_due``
                           ``cancel_or_request end_requested_cancels``
                           ``waiting_matching cancel_waiting_matching``
compaction                 ``compactable_groups compact_group``                        ``compaction``
a run's progress           ``report_progress``                                         ``progress``
=========================  ==========================================================  =================
"""

from __future__ import annotations

from django.db import models

from django_iq.managers import attempts, claims, compaction, entry_actions, progress
from django_iq.managers import enqueue as enqueueing
from django_iq.managers.entry_states import EntryQuerySet

# The queryset's state filters, on the manager too (``Entry.objects.pending()``).
EntryManagerBase = models.Manager.from_queryset(EntryQuerySet)


class EntryManager(EntryManagerBase):
    """See the module docstring: what it can do, and where each is done."""

    def get_queryset(self) -> EntryQuerySet:  # type: ignore[override]
        # Typed here: the type checker's plugin does not carry the queryset's type through
        # ``from_queryset``.
        return EntryQuerySet(self.model, using=self._db)

    def on(self, db: str) -> EntryQuerySet:
        """The entries of database ``db`` (the caller's write database, as a rule)."""
        return self.get_queryset().using(db)

    # -- enqueue -----------------------------------------------------------------------------
    enqueue = enqueueing.enqueue
    enqueue_many = enqueueing.enqueue_many
    enqueue_blocked = enqueueing.enqueue_blocked

    # -- claim -------------------------------------------------------------------------------
    claim = claims.claim

    # -- how an attempt ends -----------------------------------------------------------------
    complete_many = attempts.complete_many
    fail = attempts.fail
    snooze = attempts.snooze
    end_attempt = attempts.end_attempt
    expire = attempts.expire
    cancel_run = attempts.cancel_run

    # -- waiting entries ---------------------------------------------------------------------
    promote_due = entry_actions.promote_due
    run_now = entry_actions.run_now
    cancel = entry_actions.cancel
    cancel_returning = entry_actions.cancel_returning
    mark_awaited = entry_actions.mark_awaited
    expire_due = entry_actions.expire_due
    cancel_or_request = entry_actions.cancel_or_request
    end_requested_cancels = entry_actions.end_requested_cancels
    waiting_matching = entry_actions.waiting_matching
    cancel_waiting_matching = entry_actions.cancel_waiting_matching
    disable = entry_actions.disable
    enable = entry_actions.enable
    waiting_times = entry_actions.waiting_times

    # -- compaction --------------------------------------------------------------------------
    compactable_groups = compaction.compactable_groups
    compact_group = compaction.compact_group

    # -- a run's progress --------------------------------------------------------------------
    report_progress = progress.report_progress
