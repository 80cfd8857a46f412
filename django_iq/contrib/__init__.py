"""Integrations with other tools: ``django_iq.contrib.sentry`` (docs/howto/sentry.md)."""
