"""The test settings with Sentry set up as docs/howto/sentry.md shows, sending to the address
in IQ_TEST_SENTRY_DSN (a server of the test's own). tests/integrations/test_sentry.py starts
workers with these settings."""

import logging
import os

import sentry_sdk
from sentry_sdk.integrations.logging import LoggingIntegration

from django_iq.contrib.sentry import DjangoIQIntegration
from tests.settings import *  # noqa: F403

sentry_sdk.init(
    dsn=os.environ["IQ_TEST_SENTRY_DSN"],
    # ERROR lines as events too (sentry-sdk 2's default): django_iq's lines about the failures
    # the integration reports are not sent a second time.
    integrations=[DjangoIQIntegration(), LoggingIntegration(event_level=logging.ERROR)],
)
