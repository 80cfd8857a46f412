"""The API's routes, included by ``django_iq.urls`` under ``api/`` (namespace ``django_iq:api``).

Each route answers at its path with or without the trailing slash: a script that leaves the
slash off gets the endpoint's answer, not ``CommonMiddleware``'s redirect (which would drop a
POST's body, and which it refuses to make for a POST when ``DEBUG`` is on). ``reverse()`` gives
the path with the slash."""

from django.urls import URLPattern, path

from django_iq.api import views
from django_iq.api.endpoint import Endpoint

app_name = "api"


def route(slashed: str, view: Endpoint, name: str) -> list[URLPattern]:
    """``slashed`` (named ``name``, so reversed) and the same path without its slash."""
    return [path(slashed, view, name=name), path(slashed.removesuffix("/"), view)]


urlpatterns = [
    *route("entries/", views.entry_list, "entry-list"),
    *route("entries/count/", views.entry_count, "entry-count"),
    *route("entries/cancel/", views.entry_cancel, "entry-cancel"),
    *route("entries/<int:entry_id>/", views.entry, "entry"),
    *route("autoscale/", views.autoscale, "autoscale"),
    *route("errors/", views.error_list, "error-list"),
    *route("errors/requeue/", views.error_requeue, "error-requeue"),
    *route("errors/<int:error_id>/", views.error, "error"),
    *route("jobs/stats/", views.job_stats, "job-stats"),
    *route("jobs/<path:name>/disable/", views.job_disable, "job-disable"),
    *route("jobs/<path:name>/enable/", views.job_enable, "job-enable"),
    *route("outcomes/", views.outcome_list, "outcome-list"),
    *route("queues/", views.queue_list, "queue-list"),
    *route("queues/<path:name>/pause/", views.queue_pause, "queue-pause"),
    *route("workers/", views.worker_list, "worker-list"),
    *route("queues/<path:name>/resume/", views.queue_resume, "queue-resume"),
    path("openapi.json", views.openapi_document, name="openapi"),
]
