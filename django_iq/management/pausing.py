"""What ``iq_pause`` and ``iq_resume`` share: check the names, change each queue, report."""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from django_iq import operations
from django_iq.logs import get_logger
from django_iq.management.output import unknown_queue_message

logger = get_logger(__name__)


class PauseCommand(BaseCommand):
    """Pause (``pause = True``) or resume the queues named on the command line."""

    pause = True

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("queues", nargs="+", metavar="QUEUE", help="Queue names.")

    def handle(self, *args: Any, **options: Any) -> None:
        names = list(dict.fromkeys(options["queues"]))
        message = unknown_queue_message(names)
        if message:
            raise CommandError(message)
        command = "iq_pause" if self.pause else "iq_resume"
        act = operations.pause if self.pause else operations.resume
        outcome = act(names, operations.Actor.of_command(command))
        for name in outcome.done:
            logger.info("queue %s queue=%s source=%s", outcome.verb.lower(), name, command)
        report = outcome.message
        if options["verbosity"]:
            self.stdout.write(report)
