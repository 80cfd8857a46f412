"""``manage.py iq_status``: show queues, workers, the leader, the alarms and django_iq's tables
once, as JSON, or refreshed; ``--check`` exits with status 1 while the cluster is unhealthy.

A table whose pruning is behind is warned about but does not make ``--check`` fail: the check
answers whether work flows (as ``/iq/health/`` and the dashboard's headline do), and old rows
piling up for hours is no reason to page anyone; ``--json`` gives ``retention_behind`` per
table for a separate check."""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.core.serializers.json import DjangoJSONEncoder

from django_iq.autoscale import Demand, read_demand
from django_iq.management.argtypes import seconds
from django_iq.management.output import (
    refuse_unknown_queues,
    render_demand,
    render_tables,
    render_text,
    split_names,
)
from django_iq.preflight import startup_problem
from django_iq.snapshot import Snapshot, read_snapshot
from django_iq.table_status import TableStatus, read_table_status

DEFAULT_WATCH_SECONDS = 2.0
# Cursor home, then erase the screen: the next report is drawn in place.
CLEAR_SCREEN = "\x1b[H\x1b[2J"
# With --watch the tables are read again at most this often: their sizes and oldest records
# change slowly, and on SQLite a size is read page by page.
TABLES_REFRESH_SECONDS = 60.0


watch_seconds = seconds(0, 86_400, above_minimum=True)


def wait_for_stop(stop: threading.Event, seconds: float) -> bool:
    """Wait up to ``seconds``; return True once a stop was asked for (tests replace this)."""
    return stop.wait(seconds)


@contextlib.contextmanager
def stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """Set ``stop`` on SIGINT or SIGTERM instead of raising, so a report being read or
    printed completes and the command exits 0; the previous handlers come back after."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be set in the main thread
        return
    previous = {
        signum: signal.signal(signum, lambda *_: stop.set())
        for signum in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


class Command(BaseCommand):
    help = "Show django_iq's queues, workers and leader: once, as JSON, or refreshed until stopped."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--queues",
            type=split_names,
            help="Comma-separated queues to show (default: all); workers serving none are hidden.",
        )
        parser.add_argument(
            "--json",
            action="store_true",
            help="Print one JSON document (one per line with --watch).",
        )
        parser.add_argument(
            "--check",
            action="store_true",
            help="Exit with status 1 when an alarm is raised or a queue's counts contradict "
            "each other (for cron and uptime checks); the report is printed as usual.",
        )
        parser.add_argument(
            "--watch",
            type=watch_seconds,
            nargs="?",
            const=DEFAULT_WATCH_SECONDS,
            metavar="SECONDS",
            help=f"Refresh every SECONDS (default {DEFAULT_WATCH_SECONDS:g}) until Ctrl-C.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        queues: list[str] | None = options["queues"]
        problem = startup_problem()
        if problem:
            raise CommandError(problem)
        refuse_unknown_queues(queues)
        interval: float | None = options["watch"]
        if interval is None:
            status = self._read(queues)
            report = self._render(
                status,
                read_table_status(status.now),
                self._demand(status, queues),
                as_json=options["json"],
                indent=2,
            )
            self.stdout.write(report)
            if options["check"] and not status.is_healthy:
                problems = status.problems
                raise CommandError(
                    f"{len(problems)} {'problem' if len(problems) == 1 else 'problems'}: "
                    + "; ".join(problem.describe() for problem in problems),
                    returncode=1,
                )
            return
        if options["check"]:
            raise CommandError("--check reports once: leave out --watch.")
        clear = not options["json"] and self.stdout.isatty()
        stop = threading.Event()
        printed = 0
        tables: list[TableStatus] = []
        tables_read = float("-inf")
        try:
            with stop_on_signals(stop):
                while True:
                    status = self._read(queues)
                    if time.monotonic() - tables_read >= TABLES_REFRESH_SECONDS:
                        tables, tables_read = read_table_status(status.now), time.monotonic()
                    # JSON: one document per line, so a consumer can read line by line.
                    report = self._render(
                        status,
                        tables,
                        self._demand(status, queues),
                        as_json=options["json"],
                        indent=None,
                    )
                    if clear:
                        report = CLEAR_SCREEN + report
                    elif printed and not options["json"]:
                        report = "\n" + report
                    self.stdout.write(report)
                    self.stdout.flush()
                    printed += 1
                    if wait_for_stop(stop, interval):
                        break
        except KeyboardInterrupt:
            pass  # SIGINT with no handler of ours (not the main thread) is a normal stop too

    def _read(self, queues: list[str] | None) -> Snapshot:
        # Every running worker is listed, not the dashboard's first hundred.
        return read_snapshot(
            queues=queues, worker_limit=None, include_stopped=False, unserved_jobs=True
        )

    def _demand(self, status: Snapshot, queues: list[str] | None) -> Demand:
        """The autoscaling signal, of ``queues`` only when given."""
        demand = read_demand(status.now)
        if queues is None:
            return demand
        return replace(demand, queues=tuple(q for q in demand.queues if q.queue in queues))

    def _render(
        self,
        status: Snapshot,
        tables: list[TableStatus],
        demand: Demand,
        *,
        as_json: bool,
        indent: int | None,
    ) -> str:
        if as_json:
            document = status.as_dict() | {
                "tables": [table.as_dict() for table in tables],
                "autoscale": demand.as_dict(),
            }
            return json.dumps(document, cls=DjangoJSONEncoder, indent=indent)
        return "\n\n".join([render_text(status), render_demand(demand), render_tables(tables)])
