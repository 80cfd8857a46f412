"""The 48-process drain's settings: the test settings with django_iq's default intervals (the
test settings poll, promote and send heartbeats every 50 to 500 ms so that tests run fast; a
deployment keeps the defaults, and at 48 processes those short intervals alone would take the
machine), and the drain's jobs registered."""

from __future__ import annotations

from tests.settings import *  # noqa: F403
from tests.settings import DJANGO_IQ

DJANGO_IQ = {"QUEUES": DJANGO_IQ["QUEUES"], "JOB_MODULES": ["tests.faults.fleet_jobs"]}
