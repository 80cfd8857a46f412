"""URLs for the dashboard and metrics tests: the admin, the dashboard wrapped by it, and the
metrics endpoint."""

from django.contrib import admin
from django.urls import path

from django_iq.dashboard.views import dashboard_view
from django_iq.prometheus import metrics_view

urlpatterns = [
    path("admin/iq/dashboard/", admin.site.admin_view(dashboard_view), name="iq-dashboard"),
    path("admin/", admin.site.urls),
    path("iq/dashboard/", dashboard_view),
    path("iq/metrics/", metrics_view, name="iq-metrics"),
]
