"""The dashboard's row in the admin index and its page: a proxy model whose list page is the
operations dashboard, shown to those the dashboard lets in (``permissions.DASHBOARD``). Served at
the model's own address (``<admin>/django_iq/dashboard/``), so the admin's sidebar marks
*Dashboard* as the current page while it is open."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, path

from django_iq import permissions
from django_iq.dashboard.views import dashboard_view
from django_iq.models import Dashboard


@admin.register(Dashboard)
class DashboardAdmin(admin.ModelAdmin):
    """Nothing to add, change or delete: its list page is the dashboard."""

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # The dashboard's own rule, so the index shows the row to exactly those it admits.
        return permissions.allows(request.user, permissions.DASHBOARD)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_urls(self) -> list[URLPattern]:
        # The dashboard's name for the list page's address (the list page is the dashboard),
        # before the default routes.
        return [
            path(
                "",
                self.admin_site.admin_view(self.changelist_view),
                name="django_iq_dashboard",
            ),
            *super().get_urls(),
        ]

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        # The dashboard checks its own permissions (403 with the reason).
        return dashboard_view(request, admin_site=self.admin_site)
