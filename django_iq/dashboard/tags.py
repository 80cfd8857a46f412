"""Template tags of the dashboard: a count linked to the rows it counts, and durations for
people."""

from __future__ import annotations

from typing import Any

from django import template
from django.utils.html import format_html
from django.utils.safestring import SafeString

from django_iq import permissions
from django_iq.dashboard.links import Links
from django_iq.dashboard.panels import format_age

register = template.Library()


@register.simple_tag
def iq_allows(user: Any, door: str) -> bool:
    """Whether ``user`` may open ``door`` (a name of ``django_iq.permissions``: ``"DASHBOARD"``,
    ``"JOB_STATS"``), by the table every door checks."""
    return permissions.allows(user, getattr(permissions, door))


@register.simple_tag
def count_link(value: Any, url: str | None) -> SafeString:
    """``value`` as a link to ``url``, or ``value`` alone when there is no link."""
    if not url:
        return format_html("{}", value)
    return format_html('<a href="{}" class="iq-count">{}</a>', url, value)


@register.simple_tag
def entry_link(links: Links, entry_id: int) -> SafeString:
    """An entry's id as a link to its admin page."""
    url = links.entry(entry_id)
    if not url:
        return format_html("{}", entry_id)
    return format_html('<a href="{}" class="iq-entry">{}</a>', url, entry_id)


@register.filter
def age(seconds: float | None) -> str:
    """A duration for people: ``"42 s"``, ``"3 min 5 s"``."""
    return format_age(seconds)


@register.filter
def negate(value: float) -> float:
    return -value


@register.filter
def get(mapping: dict[str, Any], key: str) -> Any:
    """``mapping[key]``, or None."""
    return mapping.get(key) if mapping else None
