"""The operators' audit trail in the admin: every action taken through the admin, the API or an
``iq_*`` command, read-only."""

from __future__ import annotations

from django.contrib import admin

from django_iq.admin.common import (
    EstimatedCountPaginator,
    ReadOnlyAdmin,
    cut_column,
    time_column,
)
from django_iq.models import OperatorAction


@admin.register(OperatorAction)
class OperatorActionAdmin(ReadOnlyAdmin):
    list_display = (
        "when",
        "who",
        "door",
        "action",
        "done",
        "skipped",
        "not_found",
        "what",
    )
    when = time_column("at", "at")
    who = cut_column("actor", "actor", "narrow")
    what = cut_column("message", "message", "fill", sortable=False)
    list_filter = ("door", "action")
    search_fields = ("actor", "target", "message")
    date_hierarchy = "at"
    paginator = EstimatedCountPaginator
    fields = (
        "at",
        "door",
        "actor",
        "user_pk",
        "action",
        "target",
        "done",
        "skipped",
        "not_found",
        "message",
    )
