"""``manage.py runleader``: parse options, configure logging, run a leader candidate."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from django_iq.exceptions import InvalidProcessName
from django_iq.leader import Leader
from django_iq.management.argtypes import seconds
from django_iq.management.logconfig import configure_logging
from django_iq.preflight import startup_problem
from django_iq.process import MAX_NAME_LENGTH, check_name


class Command(BaseCommand):
    help = "Run a django_iq leader candidate: election, cron, recovery of stuck entries, pruning."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--name",
            help=f"Prefix of the process's name (default: the node name), at most "
            f"{MAX_NAME_LENGTH} characters; the pid, a random part and ':leader' are appended.",
        )
        parser.add_argument(
            "--lease-seconds", type=seconds(1, 3600), help="Leadership lease length (1 to 3600)."
        )
        parser.add_argument(
            "--poll-seconds",
            type=seconds(0.01, 600),
            help="Seconds between passes (0.01 to 600).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            check_name(options["name"])
        except InvalidProcessName as exc:
            raise CommandError(f"--name: {exc}") from None
        if options["verbosity"] >= 1:
            configure_logging(logging.DEBUG if options["verbosity"] >= 3 else logging.INFO)
        problem = startup_problem()
        if problem:
            raise CommandError(problem)
        leader = Leader(
            name=options["name"],
            lease_seconds=options["lease_seconds"],
            poll_seconds=options["poll_seconds"],
        )
        code = leader.run()
        if code:
            raise SystemExit(code)
