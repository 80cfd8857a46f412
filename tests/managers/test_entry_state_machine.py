"""The life of entries as a state machine (hypothesis): enqueue, claim, complete, fail with and
without retry, a worker's death and recovery, cancel, disable and enable, requeue, promotion and
run-now, in any order, on a real database. After every step the rows must agree with what the
steps did, counted independently, so the invariants can fail."""

from __future__ import annotations

import itertools
import os
from datetime import timedelta

import pytest
from django.utils import timezone
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from django_iq.duties import RecoveryDuty
from django_iq.leader import Leader
from django_iq.managers import Claim
from django_iq.models import Entry, EntryError, GroupLock, LeaderLease, Queue, Worker
from tests.factories import complete
from tests.testapp.jobs import record

pytestmark = pytest.mark.django_db(transaction=True)

GROUPS = ["g1", "g2", None, None]


class EntryLife(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        for model in (Entry, GroupLock, EntryError, Worker, LeaderLease, Queue):
            model.objects.all().delete()
        self.tokens = itertools.count()
        self.created = self.completed = self.cancelled = 0
        self.claims: dict[int, list[Claim]] = {}  # worker id -> claims it holds
        self.workers = [self.register() for _ in range(2)]
        # One leader for the whole run (a second one would wait for the first one's lease),
        # whose recovery duty runs at every death, not on its own interval.
        self.leader = Leader(name="leader", duties=[], lease_seconds=60)
        assert self.leader.run_once().is_leader

    def register(self) -> Worker:
        worker = Worker.objects.register(
            name=f"host:{next(self.tokens)}",
            role="worker",
            host="host",
            pid=1,
            queues=[],
            processing_threads=4,
        )
        self.claims[worker.pk] = []
        return worker

    def held(self) -> list[tuple[Worker, Claim]]:
        return [(w, c) for w in self.workers for c in self.claims[w.pk]]

    # -- steps ------------------------------------------------------------------------------

    @rule(group=st.sampled_from(GROUPS), deferred=st.booleans(), attempts=st.integers(1, 3))
    def enqueue(self, group: str | None, deferred: bool, attempts: int) -> None:
        options: dict[str, object] = {"max_attempts": attempts}
        if group:
            options["group_key"] = group
        if deferred:
            options["run_at"] = timedelta(hours=1)
        record.using(**options).enqueue(f"t{next(self.tokens)}")
        self.created += 1

    @rule(index=st.integers(0, 1), limit=st.integers(1, 4))
    def claim(self, index: int, limit: int) -> None:
        worker = self.workers[index]
        # A live worker heartbeats: without it, an example that runs past the silence limit
        # would claim nothing, and hypothesis would see the same steps behave differently.
        self.beat(worker)
        self.claims[worker.pk] += Entry.objects.claim(worker, limit, "default")

    def beat(self, worker: Worker) -> None:
        assert Worker.objects.heartbeat(
            worker,
            busy_threads=0,
            cpu_percent=0.0,
            memory_percent=0.0,
            is_throttled=False,
            held_lock_ids=[claim.lock_id for claim in self.claims[worker.pk]],
        )

    def pick(self, position: int) -> tuple[Worker, Claim]:
        held = self.held()
        return held[position % len(held)]

    @precondition(lambda self: bool(self.held()))
    @rule(position=st.integers(0, 20))
    def complete_a_claim(self, position: int) -> None:
        worker, claim = self.pick(position)
        self.claims[worker.pk].remove(claim)
        for index, entry in enumerate(claim.entries):
            last = index == len(claim.entries) - 1
            if index:
                GroupLock.objects.track(claim.lock_id, entry.pk)
            complete(entry, claim.lock_id if last else None)
            self.completed += 1

    @precondition(lambda self: bool(self.held()))
    @rule(position=st.integers(0, 20), retry=st.booleans())
    def fail_the_first_entry_of_a_claim(self, position: int, retry: bool) -> None:
        worker, claim = self.pick(position)
        self.claims[worker.pk].remove(claim)
        first, rest = claim.entries[0], claim.entries[1:]
        Entry.objects.fail(
            first,
            None if rest else claim.lock_id,
            exception_class="builtins.ValueError",
            message="no",
            traceback="",
            retry_at=timezone.now() - timedelta(seconds=1) if retry else None,
            worker_name=worker.name,
        )
        for index, entry in enumerate(rest, start=1):
            GroupLock.objects.track(claim.lock_id, entry.pk)
            complete(entry, claim.lock_id if index == len(rest) else None)
            self.completed += 1

    @rule(index=st.integers(0, 1))
    def a_worker_dies_and_recovery_runs(self, index: int) -> None:
        worker = self.workers[index]
        # The survivor heartbeats first: only the worker this step kills may look silent, however
        # long the example has run (otherwise hypothesis sees the same steps behave differently).
        for other in self.workers:
            if other.pk != worker.pk:
                self.beat(other)
        Worker.objects.filter(pk=worker.pk).update(heartbeat_at=timezone.now() - timedelta(hours=1))
        RecoveryDuty().run_once(timezone.now(), self.leader.fence)
        del self.claims[worker.pk]
        self.workers[index] = self.register()

    @rule(positions=st.lists(st.integers(0, 20), max_size=3))
    def cancel(self, positions: list[int]) -> None:
        ids = list(Entry.objects.order_by("pk").values_list("pk", flat=True))
        chosen = [ids[p % len(ids)] for p in positions] if ids else []
        cancelled, _ = Entry.objects.cancel(chosen)
        self.cancelled += cancelled

    @rule()
    def disable(self) -> None:
        Entry.objects.disable(record.name)

    @rule()
    def enable(self) -> None:
        Entry.objects.enable(record.name)

    @rule()
    def requeue_failures(self) -> None:
        self.created += len(EntryError.objects.requeue(EntryError.objects.failed()))

    @rule()
    def promote_and_run_now(self) -> None:
        Entry.objects.promote_due(timezone.now())
        Entry.objects.run_now(Entry.objects.initial().values_list("pk", flat=True)[:2])

    # -- invariants -------------------------------------------------------------------------

    @invariant()
    def every_entry_is_accounted_for(self) -> None:
        # Counted independently: rows left, final error records, and what the steps did.
        finals = EntryError.objects.filter(is_final=True).count()
        assert Entry.objects.count() == self.created - self.completed - self.cancelled - finals

    @invariant()
    def the_states_add_up(self) -> None:
        by_state = {s: Entry.objects.filter(state=s).count() for s in ("initial", "pending")}
        disabled = Entry.objects.filter(state="disabled").count()
        locked_keys = set(GroupLock.objects.values_list("key", flat=True))
        pending_keys = list(
            Entry.objects.filter(state="pending").values_list("lock_key", flat=True)
        )
        computing = sum(key in locked_keys for key in pending_keys)
        awaiting = Entry.objects.pending().exclude(lock_key__in=locked_keys).count()
        assert by_state["pending"] == computing + awaiting
        assert by_state["initial"] + by_state["pending"] + disabled == Entry.objects.count()

    @invariant()
    def every_lock_belongs_to_a_claim_held_and_no_entry_is_held_twice(self) -> None:
        held = [claim for _, claim in self.held()]
        assert set(GroupLock.objects.values_list("pk", flat=True)) == {c.lock_id for c in held}
        entry_ids = [e.pk for c in held for e in c.entries]
        assert len(entry_ids) == len(set(entry_ids))

    @invariant()
    def attempts_stay_within_max_attempts(self) -> None:
        for attempts, most in Entry.objects.values_list("attempts", "max_attempts"):
            assert attempts < most

    @invariant()
    def every_failed_attempt_left_an_error_record(self) -> None:
        for entry_id, attempts in Entry.objects.values_list("pk", "attempts"):
            assert EntryError.objects.filter(entry_id=entry_id).count() >= attempts


def test_any_order_of_operations_keeps_the_invariants() -> None:
    from hypothesis.stateful import run_state_machine_as_test

    run_state_machine_as_test(
        EntryLife,
        settings=settings(
            max_examples=int(os.environ.get("IQ_STATE_MACHINE_EXAMPLES", "15")),
            stateful_step_count=25,
            deadline=None,
            suppress_health_check=list(HealthCheck),
        ),
    )
