"""What every leader duty is: a name, an interval, and ``run_once(now, fence)`` that writes only
inside ``fence()``, the leader's transaction that first renews its lease by compare-and-set."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any, Protocol

# ``with fence():`` opens a transaction in which the lease was renewed; it raises
# ``LeadershipLost`` if another leader took over, so a deposed leader writes nothing.
Fence = Callable[[], AbstractContextManager[None]]


class Duty(Protocol):
    """A leader duty. ``run_once`` does one pass and returns what it did (logged, tested)."""

    name: str

    @property
    def interval_seconds(self) -> float: ...

    def run_once(self, now: datetime, fence: Fence) -> Any: ...
