"""The API's routes, included by ``django_iq.urls`` under ``api/`` (namespace ``django_iq:api``)."""

from django.urls import path

from django_iq.api import views

app_name = "api"

urlpatterns = [
    path("entries/", views.entry_list, name="entry-list"),
    path("entries/count/", views.entry_count, name="entry-count"),
    path("entries/cancel/", views.entry_cancel, name="entry-cancel"),
    path("entries/<int:entry_id>/", views.entry, name="entry"),
    path("errors/", views.error_list, name="error-list"),
    path("errors/requeue/", views.error_requeue, name="error-requeue"),
    path("errors/<int:error_id>/", views.error, name="error"),
    path("jobs/stats/", views.job_stats, name="job-stats"),
    path("outcomes/", views.outcome_list, name="outcome-list"),
    path("queues/", views.queue_list, name="queue-list"),
    path("queues/<path:name>/pause/", views.queue_pause, name="queue-pause"),
    path("queues/<path:name>/resume/", views.queue_resume, name="queue-resume"),
    path("openapi.json", views.openapi_document, name="openapi"),
]
