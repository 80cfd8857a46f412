"""The progress recipe of docs/howto/progress.md: a user's own export and the JSON its page
polls. The page shows the code of ``export_progress`` as written here."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, JsonResponse
from django.shortcuts import get_object_or_404

import django_iq
from django_iq.models import Entry
from tests.testapp.models import Export


@login_required
def export_progress(request: HttpRequest, export_id: int) -> JsonResponse:
    """The state and progress of one of the signed-in user's exports, for its page to poll."""
    # Whose export it is, the application decides: another user's is not found.
    export = get_object_or_404(Export, pk=export_id, owner=request.user)
    if export.entry_id is None:
        return JsonResponse({"state": "not started", "progress": None})
    try:
        report = django_iq.progress(export.entry_id)
    except django_iq.EntryNotFound:  # ended, and no record of it is kept
        return JsonResponse({"state": "unknown", "progress": None})
    return JsonResponse(
        {
            "state": entry_state(export.entry_id),
            "progress": report.as_dict() if report is not None else None,
        }
    )


def entry_state(entry_id: int) -> str:
    """``running``, ``waiting`` (queued, or waiting for a retry), or how it ended:
    ``succeeded``, ``failed``, ``cancelled``, ``expired``."""
    if Entry.objects.running().filter(pk=entry_id).exists():
        return "running"
    if Entry.objects.filter(pk=entry_id).exists():
        return "waiting"
    for outcome in django_iq.as_completed([entry_id], timeout=0):
        return outcome.status
    return "unknown"
