"""What ``iq_pause`` and ``iq_resume`` share: check the names, change each queue, report."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from django_iq.management.output import plural, unknown_queue_message
from django_iq.models import Queue
from django_iq.registry import catalog

logger = logging.getLogger(__name__)


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
        done, source = ("paused", "iq_pause") if self.pause else ("resumed", "iq_resume")
        change = Queue.objects.pause if self.pause else Queue.objects.resume
        changed = []
        for name in names:
            # A queue declared in settings or by a job may have no row yet.
            Queue.objects.ensure(name, catalog)
            if change(name):
                changed.append(name)
                logger.info("queue %s queue=%s source=%s", done, name, source)
        unchanged = [name for name in names if name not in changed]
        if changed:
            report = f"{done.capitalize()} {plural(len(changed), 'queue')}: {', '.join(changed)}."
        else:
            report = f"No queue {done}."
        if unchanged:
            report += (
                f" {'Already paused' if self.pause else 'Not paused'}: {', '.join(unchanged)}."
            )
        if options["verbosity"]:
            self.stdout.write(report)
