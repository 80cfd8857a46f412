"""The operators' audit trail in the admin: every action taken through the admin, the API or an
``iq_*`` command, read-only."""

from __future__ import annotations

from django.contrib import admin

from django_iq.admin.common import EstimatedCountPaginator, ReadOnlyAdmin
from django_iq.models import OperatorAction


@admin.register(OperatorAction)
class OperatorActionAdmin(ReadOnlyAdmin):
    list_display = ("at", "actor", "door", "action", "done", "skipped", "not_found", "message")
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
