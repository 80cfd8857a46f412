"""django_iq's URLs: the JSON management API under ``api/`` and the Prometheus metrics under
``metrics/``. Include them with ``path("iq/", include("django_iq.urls"))``."""

from django.http import HttpRequest, HttpResponse
from django.urls import include, path
from django.views.decorators.http import require_safe

app_name = "django_iq"

METRICS_UNAVAILABLE = "The django_iq metrics endpoint is not available in this version.\n"


@require_safe
def metrics(request: HttpRequest) -> HttpResponse:
    """Serve ``django_iq.prometheus.metrics_view``, imported on the first scrape, so that
    including these URLs never imports the metrics code (501 if the module is missing)."""
    try:
        from django_iq.prometheus import metrics_view
    except ImportError as exc:
        if exc.name != "django_iq.prometheus":
            raise
        return HttpResponse(
            METRICS_UNAVAILABLE, status=501, content_type="text/plain; charset=utf-8"
        )
    return metrics_view(request)


urlpatterns = [
    path("api/", include("django_iq.api.urls")),
    path("metrics/", metrics, name="metrics"),
]
