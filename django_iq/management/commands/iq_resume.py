"""``manage.py iq_resume QUEUE...``: serve paused queues again."""

from __future__ import annotations

from django_iq.management.pausing import PauseCommand


class Command(PauseCommand):
    help = "Resume paused django_iq queues: workers claim their entries again."
    pause = False
