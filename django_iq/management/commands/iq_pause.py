"""``manage.py iq_pause QUEUE...``: stop serving queues; entries already running finish."""

from __future__ import annotations

from django_iq.management.pausing import PauseCommand


class Command(PauseCommand):
    help = "Pause django_iq queues: workers stop claiming their entries; running ones finish."
    pause = True
