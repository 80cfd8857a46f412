"""The API's views: each reads its input, calls the manager API (the only writer of state),
records who changed what in Django's admin log, and answers JSON."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from django.db import router, transaction
from django.db.models import QuerySet
from django.http import HttpRequest, JsonResponse
from django.http.response import HttpResponseBase
from django.urls import Resolver404, resolve, reverse
from django.utils import timezone

from django_iq import audit, operations, permissions
from django_iq.api import openapi
from django_iq.api.endpoint import (
    ApiError,
    Endpoint,
    InvalidParameter,
    csrf_refusal,
    endpoint,
    read_ids,
    read_json_object,
    refuse_unknown_keys,
)
from django_iq.api.filters import (
    ENTRY_FILTERS,
    ERROR_FILTERS,
    INCLUDE_STOPPED,
    OUTCOME_FILTERS,
    Param,
    apply_filters,
    parse_query,
)
from django_iq.api.pagination import (
    CURSOR,
    DEFAULT_LIMIT,
    FORMAT,
    LIMIT,
    paginate,
    stream_ndjson,
)
from django_iq.api.serializers import (
    entry_detail,
    entry_summary,
    error_dict,
    outcome_dict,
    queue_dict,
)
from django_iq.audit import Actor
from django_iq.autoscale import read_demand
from django_iq.managers.entry_states import lock_held, lock_held_by_live_worker
from django_iq.managers.jobstats import window_start
from django_iq.models import (
    DisabledJob,
    Entry,
    EntryError,
    GroupLock,
    JobMinute,
    OperatorAction,
    Queue,
    RunOutcome,
)
from django_iq.snapshot import read_snapshot

REQUEUE_FILTER_KEYS = ("job", "exception_class", "queue")
CANCEL_FILTER_KEYS = ("job", "queue")


def _actor(request: HttpRequest) -> Actor:
    """The signed-in user acting through the API."""
    return Actor.of_request(request, OperatorAction.Door.API)


def _listing(
    request: HttpRequest,
    rows: QuerySet[Any],
    filters: Sequence[Param],
    serialize: Callable[[Any], dict[str, Any]],
) -> HttpResponseBase:
    """Answer one page of ``rows`` filtered by the query, or all of them as NDJSON."""
    values = parse_query(request.GET, (*filters, CURSOR, LIMIT, FORMAT))
    rows = apply_filters(rows, filters, values)
    if values.get("format") == "ndjson":
        for param in (CURSOR, LIMIT):
            if param.name in values:
                raise InvalidParameter(
                    param.name,
                    request.GET[param.name],
                    "nothing: format=ndjson streams every matching row, so leave it out",
                )
        return stream_ndjson(rows, serialize)
    limit = values.get("limit", DEFAULT_LIMIT)
    return paginate(request, rows, values.get("cursor"), limit, serialize).response()


def _entries() -> QuerySet[Entry]:
    """Every entry, annotated with ``is_locked`` (its group lock is held) and
    ``is_locked_live`` (by a live worker)."""
    return Entry.objects.get_queryset().annotate(
        is_locked=lock_held(), is_locked_live=lock_held_by_live_worker()
    )


@endpoint(GET=permissions.ENTRIES)
def entry_list(request: HttpRequest) -> HttpResponseBase:
    """List entries matching the filters, by id, a page at a time or streamed as NDJSON."""
    return _listing(request, _entries(), ENTRY_FILTERS, entry_summary)


@endpoint(GET=permissions.ENTRIES)
def entry_count(request: HttpRequest) -> HttpResponseBase:
    """Count the entries matching the filters (an exact count)."""
    values = parse_query(request.GET, ENTRY_FILTERS)
    count = apply_filters(Entry.objects.all(), ENTRY_FILTERS, values).count()
    return JsonResponse({"count": count, "estimated": False})


@endpoint(GET=permissions.ENTRY_DETAIL, DELETE=(permissions.CANCEL,))
def entry(request: HttpRequest, entry_id: int) -> HttpResponseBase:
    """GET: inspect one entry, its lock and its failed attempts. DELETE: cancel it."""
    parse_query(request.GET, ())
    if request.method == "DELETE":
        return _cancel(request, [entry_id], single=True)
    found = _entries().filter(pk=entry_id).first()
    if found is None:
        raise _entry_not_found(request, entry_id)
    lock = GroupLock.objects.select_related("worker").filter(key=found.lock_key).first()
    errors = EntryError.objects.filter(entry_id=found.pk).order_by("attempt", "pk")
    return JsonResponse(entry_detail(found, lock, errors))


def _url(request: HttpRequest, name: str) -> str:
    """Reverse a route of the API under whatever namespace the project included it."""
    match = request.resolver_match
    return reverse(f"{match.namespace}:{name}" if match and match.namespace else name)


def _entry_not_found(request: HttpRequest, entry_id: int) -> ApiError:
    errors_url = _url(request, "error-list")
    return ApiError(
        404,
        f"Entry {entry_id} does not exist: it finished, failed for good or was cancelled. Its "
        f"failed attempts, if any, are at {errors_url}?entry_id={entry_id}.",
    )


@endpoint(POST=(permissions.CANCEL,))
def entry_cancel(request: HttpRequest) -> HttpResponseBase:
    """Cancel the entries of ``{"ids": [...]}`` (a worker stops those it holds), or every
    waiting entry matching ``{"job": ..., "queue": ...}`` (one at least; ``"dry_run": true``
    counts them)."""
    parse_query(request.GET, ())
    example = '{"ids": [1, 2, 3]} or {"queue": "emails", "dry_run": true}'
    body = read_json_object(request, example)
    refuse_unknown_keys(body, ("ids", *CANCEL_FILTER_KEYS, "dry_run"))
    if "ids" in body:
        if any(key in body for key in (*CANCEL_FILTER_KEYS, "dry_run")):
            raise ApiError(400, f"Give either ids or filters, not both: {example}.")
        return _cancel(request, read_ids(body.get("ids")), single=False)
    matching = {key: body.get(key) for key in CANCEL_FILTER_KEYS if body.get(key) is not None}
    if not matching:
        raise ApiError(
            400, f"Say which entries to cancel: ids, or at least one of job, queue: {example}."
        )
    for key, value in matching.items():
        if not isinstance(value, str) or not value:
            raise InvalidParameter(key, value, "a non-empty string")
    dry_run = body.get("dry_run", False)
    if not isinstance(dry_run, bool):
        raise InvalidParameter("dry_run", dry_run, "true or false")
    actor = _actor(request)
    # Batch by batch (see operations.cancel_matching), then the admin log.
    outcome = operations.cancel_matching(
        actor, job=matching.get("job"), queue=matching.get("queue"), dry_run=dry_run
    )
    if outcome.done_count and not dry_run:
        described = " ".join(f"{key}={value}" for key, value in matching.items())
        audit.admin_log_described(
            actor,
            Entry,
            f"waiting entries matching {described}",
            f"Cancelled {outcome.done_count} waiting entries through the django_iq API.",
        )
    return JsonResponse(
        {
            "count": outcome.done_count,
            "dry_run": dry_run,
            "matching": matching,
            "message": outcome.message,
        }
    )


def _cancel(request: HttpRequest, ids: list[int], *, single: bool) -> HttpResponseBase:
    with transaction.atomic(using=router.db_for_write(Entry)):
        wanted = list(Entry.objects.filter(pk__in=ids).only("pk", "job_name", "state"))
        actor = _actor(request)
        outcome = operations.cancel(ids, actor)
        audit.log_cancels(actor, wanted, outcome, "through the django_iq API")
    result = {
        "cancelled": outcome.done,
        "requested": outcome.requested,
        "not_found": outcome.not_found,
        "message": outcome.message,
    }
    if single and outcome.requested:
        # Accepted: the worker running it stops it (wait() on it, or read its outcome).
        return JsonResponse(result, status=202)
    if single and not outcome.done:
        raise _entry_not_found(request, ids[0])
    return JsonResponse(result)


@endpoint(GET=permissions.ERRORS)
def error_list(request: HttpRequest) -> HttpResponseBase:
    """List failed attempts matching the filters, by id (tracebacks left out)."""
    return _listing(request, EntryError.objects.all(), ERROR_FILTERS, error_dict)


@endpoint(GET=permissions.OUTCOMES)
def outcome_list(request: HttpRequest) -> HttpResponseBase:
    """List the records of runs that ended, matching the filters, by id."""
    return _listing(request, RunOutcome.objects.all(), OUTCOME_FILTERS, outcome_dict)


@endpoint(GET=permissions.ERRORS)
def error(request: HttpRequest, error_id: int) -> HttpResponseBase:
    """Inspect one failed attempt, traceback included."""
    parse_query(request.GET, ())
    found = EntryError.objects.filter(pk=error_id).first()
    if found is None:
        raise ApiError(404, f"Error record {error_id} does not exist (pruned, or never was).")
    return JsonResponse(error_dict(found, with_traceback=True))


@endpoint(POST=(permissions.REQUEUE,))
def error_requeue(request: HttpRequest) -> HttpResponseBase:
    """Requeue failed entries: those of ``{"ids": [...]}`` (error record ids), or every one
    matching ``{"job": ..., "exception_class": ..., "queue": ...}`` (one key at least)."""
    parse_query(request.GET, ())
    example = '{"ids": [1, 2]} or {"job": "shop.jobs.send_receipt"}'
    body = read_json_object(request, example)
    refuse_unknown_keys(body, ("ids", *REQUEUE_FILTER_KEYS))
    if "ids" in body:
        if any(key in body for key in REQUEUE_FILTER_KEYS):
            raise ApiError(400, f"Give either ids or filters, not both: {example}.")
        ids = read_ids(body["ids"])
        with transaction.atomic(using=router.db_for_write(Entry)):
            actor = _actor(request)
            outcome = operations.requeue(ids, actor)
            created = list(Entry.objects.filter(pk__in=outcome.created))
            audit.admin_log(actor, created, "addition", "Requeued through the django_iq API.")
        return JsonResponse(
            {
                "requeued": outcome.done_count,
                "entry_ids": outcome.created,
                # Found, but not a final failure still to requeue.
                "skipped": len(outcome.skipped),
                "not_found": outcome.not_found,
                "message": outcome.message,
            }
        )
    matching = {key: body.get(key) for key in REQUEUE_FILTER_KEYS if body.get(key) is not None}
    if not matching:
        raise ApiError(
            400,
            "Say which failed entries to requeue: ids, or at least one of "
            f"{', '.join(REQUEUE_FILTER_KEYS)}: {example}.",
        )
    for key, value in matching.items():
        if not isinstance(value, str) or not value:
            raise InvalidParameter(key, value, "a non-empty string")
    with transaction.atomic(using=router.db_for_write(Entry)):
        actor = _actor(request)
        outcome = operations.requeue_matching(
            actor,
            job=matching.get("job"),
            exception_class=matching.get("exception_class"),
            queue=matching.get("queue"),
        )
        if outcome.done_count:
            described = " ".join(f"{key}={value}" for key, value in matching.items())
            audit.admin_log_described(
                actor,
                EntryError,
                f"failed entries matching {described}",
                f"Requeued {outcome.done_count} failed entries through the django_iq API.",
            )
    return JsonResponse(
        {"requeued": outcome.done_count, "matching": matching, "message": outcome.message}
    )


@endpoint(GET=permissions.QUEUES)
def queue_list(request: HttpRequest) -> HttpResponseBase:
    """Every queue with its counts per state, whether the state invariant holds, and its
    oldest entry awaiting compute."""
    parse_query(request.GET, ())
    views = {view.name: view for view in read_snapshot().queues}
    return JsonResponse(
        {
            "queues": [
                queue_dict(queue, views[queue.name])
                for queue in Queue.objects.order_by("name")
                if queue.name in views
            ]
        }
    )


@endpoint(GET=permissions.QUEUES)
def autoscale(request: HttpRequest) -> HttpResponseBase:
    """The processing threads the pending entries need (django_iq/autoscale.py)."""
    parse_query(request.GET, ())
    return JsonResponse(read_demand(timezone.now()).as_dict())


@endpoint(GET=permissions.JOB_STATS)
def job_stats(request: HttpRequest) -> HttpResponseBase:
    """Each job with runs that ended in the last hour: how many, the failures among them, and
    the median and 95th percentile of their durations."""
    parse_query(request.GET, ())
    now = timezone.now()
    return JsonResponse(
        {
            "generated_at": now,
            "window_start": window_start(now),
            "jobs": [stats.as_dict() for stats in JobMinute.objects.last_hour(now)],
        }
    )


# The most processes one listing shows (live ones first).
WORKER_LIST_LIMIT = 500


@endpoint(GET=permissions.WORKERS)
def worker_list(request: HttpRequest) -> HttpResponseBase:
    """The worker and leader processes with their load and database sessions, and the
    server's sessions against its limit."""
    query = parse_query(request.GET, (INCLUDE_STOPPED,))
    snapshot = read_snapshot(
        worker_limit=WORKER_LIST_LIMIT, include_stopped=query.get("include_stopped", False)
    )
    return JsonResponse(
        {
            "generated_at": snapshot.now,
            "workers": [{**w.as_dict(), "state": w.state} for w in snapshot.workers],
            "truncated": snapshot.workers_truncated,
            "server_sessions": (
                snapshot.server_sessions.as_dict() if snapshot.server_sessions else None
            ),
        }
    )


@endpoint(POST=(permissions.PAUSE,))
def queue_pause(request: HttpRequest, name: str) -> HttpResponseBase:
    """Stop serving a queue; entries already running finish."""
    return _set_paused(request, name, paused=True)


@endpoint(POST=(permissions.PAUSE,))
def queue_resume(request: HttpRequest, name: str) -> HttpResponseBase:
    """Serve a paused queue again."""
    return _set_paused(request, name, paused=False)


def _set_paused(request: HttpRequest, name: str, *, paused: bool) -> HttpResponseBase:
    parse_query(request.GET, ())
    act = operations.pause if paused else operations.resume
    with transaction.atomic(using=router.db_for_write(Entry)):
        actor = _actor(request)
        outcome = act([name], actor)
        if outcome.not_found:
            raise ApiError(404, f"Queue {name!r} does not exist.")
        if outcome.done:
            verb = "Paused" if paused else "Resumed"
            audit.admin_log(
                actor,
                [Queue.objects.get(name=name)],
                "change",
                f"{verb} through the django_iq API.",
            )
    return JsonResponse(
        {
            "queue": name,
            "is_paused": paused,
            "changed": bool(outcome.done),
            "message": outcome.message,
        }
    )


@endpoint(POST=(permissions.CHANGE_ENTRY,))
def job_disable(request: HttpRequest, name: str) -> HttpResponseBase:
    """Stop claiming a job's entries, waiting ones and any enqueued later; running ones finish."""
    return _set_disabled(request, name, disabled=True)


@endpoint(POST=(permissions.CHANGE_ENTRY,))
def job_enable(request: HttpRequest, name: str) -> HttpResponseBase:
    """Claim a disabled job's entries again."""
    return _set_disabled(request, name, disabled=False)


def _set_disabled(request: HttpRequest, name: str, *, disabled: bool) -> HttpResponseBase:
    parse_query(request.GET, ())
    problem = operations.unknown_job(name, enabling=not disabled)
    if problem is not None:
        raise ApiError(404, problem)
    act = operations.disable if disabled else operations.enable
    with transaction.atomic(using=router.db_for_write(Entry)):
        before = list(DisabledJob.objects.filter(job_name=name))
        actor = _actor(request)
        outcome = act([name], actor)
        if outcome.done:
            # The admin log names the job by its DisabledJob row: added, or deleted.
            rows = list(DisabledJob.objects.filter(job_name=name)) if disabled else before
            verb = "Disabled" if disabled else "Enabled"
            effect: audit.Effect = "addition" if disabled else "deletion"
            audit.admin_log(actor, rows, effect, f"{verb} through the django_iq API.")
    return JsonResponse(
        {
            "job": name,
            "is_disabled": disabled,
            "changed": bool(outcome.done),
            "message": outcome.message,
        }
    )


@endpoint(GET=permissions.OPENAPI)
def openapi_document(request: HttpRequest) -> HttpResponseBase:
    """The OpenAPI 3.1 document of this API."""
    parse_query(request.GET, ())
    return JsonResponse(openapi.document(request))


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponseBase:
    """Refuse a request that failed CSRF verification: JSON for the API's URLs, Django's own
    page for every other URL. Opt in with ``CSRF_FAILURE_VIEW = "django_iq.api.views.csrf_failure"``."""
    try:
        match = resolve(request.path_info)
    except Resolver404:
        match = None
    if match is None or not isinstance(match.func, Endpoint):
        from django.views.csrf import csrf_failure as django_csrf_failure

        return django_csrf_failure(request, reason)
    return csrf_refusal(reason).response()
