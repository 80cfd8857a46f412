"""Vacuuming: on PostgreSQL, clear the dead rows that claims, successes and heartbeats leave in
the queue's hot tables, whatever the server's autovacuum is set to.

A claim inserts a group lock and a success deletes it and its entry: a busy queue turns its
small tables over thousands of times a minute. Left to a server whose autovacuum is off, or
tuned for big, slow tables, the dead rows pile up, and every claim reads past them (a 10,000-job
drain left 300,000 dead rows and tripled the claim's time in the benchmarks). The leader looks
at the server's own counts every ``VACUUM_INTERVAL_SECONDS`` and vacuums a table once it has
more than ``VACUUM_DEAD_ROWS`` dead rows and more dead than live ones; where autovacuum keeps up,
it never has to. Other databases clean up as they go and are left alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from django.db import router

from django_iq.conf import iq_settings
from django_iq.duties.base import Fence
from django_iq.logs import get_logger
from django_iq.models import Entry, GroupLock, RunOutcome, Worker
from django_iq.queries import dead_rows, vacuum

logger = get_logger("django_iq.vacuum")

HOT_MODELS = (Entry, GroupLock, Worker, RunOutcome)


@dataclass
class VacuumPass:
    """Tables vacuumed (table to the dead rows counted before), and those that failed."""

    vacuumed: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)


class VacuumDuty:
    """Vacuum the hot tables that have more than ``VACUUM_DEAD_ROWS`` dead rows."""

    name = "vacuum"

    @property
    def interval_seconds(self) -> float:
        return float(iq_settings.VACUUM_INTERVAL_SECONDS)

    def run_once(self, now: datetime, fence: Fence) -> VacuumPass:
        result = VacuumPass()
        db = router.db_for_write(Entry)
        tables = [str(model._meta.db_table) for model in HOT_MODELS]
        counts = dead_rows(db, tables)
        if not counts:
            return result
        threshold = int(iq_settings.VACUUM_DEAD_ROWS)
        due = [t for t in tables if t in counts and counts[t][1] > max(threshold, counts[t][0])]
        if not due:
            return result
        with fence():  # still the leader: a deposed one leaves the work to the new one
            pass
        for table in due:
            try:
                vacuum(db, table)
            except Exception as exc:  # one table that cannot be vacuumed must not stop the rest
                logger.warning("vacuum failed table=%s error=%s", table, exc)
                result.skipped[table] = f"{type(exc).__name__}: {exc}"
                continue
            result.vacuumed[table] = counts[table][1]
            logger.info("vacuumed table=%s dead_rows=%s", table, counts[table][1])
        return result
