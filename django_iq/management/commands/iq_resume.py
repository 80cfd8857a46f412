"""``manage.py iq_resume QUEUE...``: serve paused queues again."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from django_iq.models import Queue
from django_iq.status import plural, unknown_queue_message

logger = logging.getLogger(__name__)


class Command(BaseCommand):
    help = "Resume paused django_iq queues: workers claim their entries again."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("queues", nargs="+", metavar="QUEUE", help="Queue names.")

    def handle(self, *args: Any, **options: Any) -> None:
        names = list(dict.fromkeys(options["queues"]))
        message = unknown_queue_message(names)
        if message:
            raise CommandError(message)
        changed = []
        for name in names:
            # A queue declared in settings or by a job may have no row yet.
            Queue.objects.ensure(name)
            if Queue.objects.resume(name):
                changed.append(name)
                logger.info("queue resumed queue=%s source=iq_resume", name)
        unchanged = [name for name in names if name not in changed]
        if changed:
            report = f"Resumed {plural(len(changed), 'queue')}: {', '.join(changed)}."
        else:
            report = "No queue resumed."
        if unchanged:
            report += f" Not paused: {', '.join(unchanged)}."
        if options["verbosity"]:
            self.stdout.write(report)
