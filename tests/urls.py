from django.contrib import admin
from django.urls import include, path

from tests.testapp.views import export_progress

urlpatterns = [
    path("admin/", admin.site.urls),
    path("iq/", include("django_iq.urls")),
    # The progress recipe of docs/howto/progress.md.
    path("exports/<int:export_id>/progress/", export_progress, name="export-progress"),
]
