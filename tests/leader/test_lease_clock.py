"""A leader stops acting once its lease may have run out by its own clock, without waiting on
the database to be told (a leader cut off from it: its statements hang)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import pytest

from django_iq.duties.base import Fence
from django_iq.leader import Leader

pytestmark = pytest.mark.django_db(transaction=True)


@dataclass
class Sleeper:
    """A duty that takes ``seconds`` (a statement hanging on a silent network)."""

    seconds: float
    name: str = "sleeper"
    interval_seconds: float = 0.0
    runs: list[float] = field(default_factory=list)

    def run_once(self, now: datetime, fence: Fence) -> Any:
        self.runs.append(time.monotonic())
        time.sleep(self.seconds)  # the duty's own slowness is what is under test


def test_duties_after_one_that_outlasted_the_lease_do_not_run() -> None:
    slow, next_one = Sleeper(0.9), Sleeper(0.0, name="next")
    leader = Leader(name="clocked", duties=[slow, next_one], lease_seconds=1, poll_seconds=0.1)
    passed = leader.run_once()
    assert not passed.is_leader and leader.epoch is None
    assert len(slow.runs) == 1 and next_one.runs == []


def test_duties_within_the_lease_all_run() -> None:
    quick, next_one = Sleeper(0.1), Sleeper(0.0, name="next")
    leader = Leader(name="clocked", duties=[quick, next_one], lease_seconds=1, poll_seconds=0.1)
    passed = leader.run_once()
    assert passed.is_leader and len(quick.runs) == 1 and len(next_one.runs) == 1
