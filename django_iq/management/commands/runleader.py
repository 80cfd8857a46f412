"""``manage.py runleader``: parse options, configure logging, run a leader candidate."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from django.core.management.base import BaseCommand

from django_iq.leader import Leader
from django_iq.management.argtypes import seconds
from django_iq.management.logconfig import configure_logging


class Command(BaseCommand):
    help = "Run a django_iq leader candidate: election, cron, recovery of stuck entries, pruning."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--name", help="Node name prefix (default: host name); the pid is appended."
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
        if options["verbosity"] >= 1:
            configure_logging(logging.DEBUG if options["verbosity"] >= 3 else logging.INFO)
        leader = Leader(
            name=options["name"],
            lease_seconds=options["lease_seconds"],
            poll_seconds=options["poll_seconds"],
        )
        code = leader.run()
        if code:
            raise SystemExit(code)
