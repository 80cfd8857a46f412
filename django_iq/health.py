"""The health endpoint for load balancers and uptime checks: 200 while the cluster is healthy,
503 with the reason codes while it is not, answered without a session.

What an anonymous caller learns is limited to the reason codes and the queue names they concern
(``Alarm.public_dict``): no counts of entries, no job names (an ``unserved_job`` reason names
the queue its entries wait in; ``iq_status --check``, the dashboard and the metrics name the
job), arguments or errors. The response is
never cached, so that a cache in front of the site cannot hide a failure or a recovery.
"""

from __future__ import annotations

from django.contrib.auth.decorators import login_not_required
from django.db import DatabaseError, transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils.cache import add_never_cache_headers
from django.views.decorators.http import require_safe

from django_iq.alarms import Alarm
from django_iq.dbconn import is_connection_error, is_missing_table
from django_iq.snapshot import read_snapshot

# Reasons of the endpoint's own, when the snapshot cannot be read at all.
NOT_MIGRATED = "not_migrated"
DATABASE_UNREACHABLE = "database_unreachable"


# Exempt from LoginRequiredMiddleware: uptime checks and load balancers have no session.
# Outside ATOMIC_REQUESTS' transaction, so that the reads get a snapshot of their own.
@login_not_required
@transaction.non_atomic_requests
@require_safe
def health_view(request: HttpRequest) -> HttpResponse:
    """Answer ``{"status": "ok"}`` (200), or ``{"status": "failing", "reasons": [...]}`` (503)
    listing each alarm and each queue whose counts contradict each other.

    Reads the operator snapshot without its worker list, with the jobs no live worker serves:
    thirteen queries, whatever the data. django_iq's tables missing (``migrate`` not run) or
    its database unreachable answer 503 too, with the reason ``not_migrated`` or
    ``database_unreachable``.
    """
    try:
        problems = read_snapshot(worker_limit=0, unserved_jobs=True, server_sessions=False).problems
    except DatabaseError as exc:
        if is_missing_table(exc):
            reason = NOT_MIGRATED
        elif is_connection_error(exc):
            reason = DATABASE_UNREACHABLE
        else:
            raise
        response = JsonResponse(
            {"status": "failing", "reasons": [{"reason": reason, "queue": None}]}, status=503
        )
    else:
        response = _verdict(problems)
    add_never_cache_headers(response)
    return response


def _verdict(problems: list[Alarm]) -> JsonResponse:
    if problems:
        return JsonResponse(
            {"status": "failing", "reasons": [problem.public_dict() for problem in problems]},
            status=503,
        )
    return JsonResponse({"status": "ok"})
