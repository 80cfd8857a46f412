"""The dashboard's row in the admin index: a proxy model whose list page is the operations
dashboard, shown to those the dashboard lets in (``permissions.DASHBOARD``)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest, HttpResponseRedirect
from django.urls import reverse

from django_iq import permissions
from django_iq.models import Dashboard


@admin.register(Dashboard)
class DashboardAdmin(admin.ModelAdmin):
    """Nothing to add, change or delete: "view" leads to the dashboard."""

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # The dashboard's own rule, so the index shows the row to exactly those it admits.
        return permissions.allows(request.user, permissions.DASHBOARD)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponseRedirect:
        return HttpResponseRedirect(reverse(f"{self.admin_site.name}:django_iq_dashboard"))
