"""The compaction duty: the leader merges waiting groups every ``COMPACT_INTERVAL_SECONDS``,
inside its fence, so a deposed leader merges nothing."""

from __future__ import annotations

import pytest
from django.test import override_settings
from django.utils import timezone

from django_iq.duties import CompactionDuty, default_duties
from django_iq.exceptions import LeadershipLost
from django_iq.leader import Leader
from django_iq.models import Entry
from tests.conftest import wait_until
from tests.testapp.jobs import invalidate

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_leader_merges_waiting_groups_in_its_pass() -> None:
    for n in range(3):
        invalidate.enqueue("o1", [n])
    leader = Leader(name="a", duties=[CompactionDuty()], lease_seconds=30)

    ran = leader.run_once().ran["compaction"]

    assert ran.merged_away == 2
    assert [e.kwargs["ids"] for e in Entry.objects.all()] == [[0, 1, 2]]


def test_compaction_is_one_of_the_default_duties_with_its_own_interval() -> None:
    assert "compaction" in [duty.name for duty in default_duties()]
    with override_settings(DJANGO_IQ={"COMPACT_INTERVAL_SECONDS": 2.5}):
        assert CompactionDuty().interval_seconds == 2.5
    assert CompactionDuty().interval_seconds == 10.0


def test_a_deposed_leader_merges_nothing() -> None:
    for n in range(2):
        invalidate.enqueue("o1", [n])
    old = Leader(name="old", duties=[], lease_seconds=0.3)
    new = Leader(name="new", duties=[], lease_seconds=30)
    assert old.run_once().is_leader
    wait_until(lambda: new.run_once().is_leader, timeout=10, message="the standby to take over")

    with pytest.raises(LeadershipLost):
        CompactionDuty().run_once(timezone.now(), old.fence)

    assert Entry.objects.count() == 2, "a stale leader's merge rolls back"
