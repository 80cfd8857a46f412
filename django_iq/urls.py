"""django_iq's URLs: the JSON management API under ``api/``, the Prometheus metrics under
``metrics/`` and the health check under ``health/``. Include them with
``path("iq/", include("django_iq.urls"))``."""

from django.urls import include, path

from django_iq.health import health_view
from django_iq.prometheus import metrics_view

app_name = "django_iq"

urlpatterns = [
    path("api/", include("django_iq.api.urls")),
    path("metrics/", metrics_view, name="metrics"),
    path("health/", health_view, name="health"),
]
