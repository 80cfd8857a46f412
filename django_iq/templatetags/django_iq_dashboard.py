"""The dashboard's template tag library, ``{% load django_iq_dashboard %}``: Django finds tag
libraries in an app's ``templatetags`` package; the tags live in ``django_iq.dashboard.tags``."""

from django_iq.dashboard.tags import register

__all__ = ["register"]
