"""The OpenAPI 3.1 document of the API, generated from one description: the operations below,
the schemas of ``schemas.py`` and the query parameters declared in ``filters.py``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.http import HttpRequest
from django.urls import reverse

from django_iq import __version__, permissions
from django_iq.api.filters import (
    ENTRY_FILTERS,
    ERROR_FILTERS,
    INCLUDE_STOPPED,
    OUTCOME_FILTERS,
    Param,
)
from django_iq.api.pagination import FORMAT, NDJSON_CONTENT_TYPE, PAGE_PARAMS
from django_iq.api.schemas import SCHEMAS, ref


@dataclass(frozen=True)
class Operation:
    """One method of one path (relative to the API's root) and what it answers."""

    path: str
    method: str
    operation_id: str
    summary: str
    responses: dict[int, tuple[str, str]]  # status -> (description, schema name)
    description: str = ""
    parameters: tuple[Param, ...] = ()
    path_parameters: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Every permission the caller needs, besides being active staff.
    permissions: tuple[str, ...] = ()
    request_body: dict[str, Any] | None = None
    ndjson_schema: str | None = None


ENTRY_ID = {"entry_id": {"type": "integer", "minimum": 1}}
QUEUE_NAME = {"name": {"type": "string"}}
JOB_NAME = {"name": {"type": "string", "description": "A dotted job name: shop.jobs.send_receipt."}}
NOT_FOUND_JOB = ("No registered job of this name (a close name is suggested).", "Error")
NOT_FOUND_ENTRY = ("No entry with this id: finished, failed for good or cancelled.", "Error")

OPERATIONS: tuple[Operation, ...] = (
    Operation(
        "/entries/",
        "get",
        "listEntries",
        "List entries",
        {200: ("A page of entries by id, or every one as NDJSON.", "EntryPage")},
        "Entries matching every filter given, ordered by id. Follow next until it is null; "
        "or ask format=ndjson for all of them in one streamed response.",
        parameters=(*ENTRY_FILTERS, *PAGE_PARAMS, FORMAT),
        ndjson_schema="Entry",
        permissions=permissions.ENTRIES,
    ),
    Operation(
        "/entries/count/",
        "get",
        "countEntries",
        "Count entries",
        {200: ("How many entries match.", "Count")},
        "An exact count of the entries matching the same filters as the listing.",
        parameters=ENTRY_FILTERS,
        permissions=permissions.ENTRIES,
    ),
    Operation(
        "/entries/{entry_id}/",
        "get",
        "getEntry",
        "Inspect an entry",
        {
            200: ("The entry, its group lock and its failed attempts.", "EntryDetail"),
            404: NOT_FOUND_ENTRY,
        },
        path_parameters=ENTRY_ID,
        permissions=permissions.ENTRY_DETAIL,
    ),
    Operation(
        "/entries/{entry_id}/",
        "delete",
        "cancelEntry",
        "Cancel an entry",
        {
            200: ("Cancelled.", "CancelResult"),
            202: (
                "A worker holds it (running, or in its claim): the cancel is requested from "
                "that worker, which stops it; its outcome record will say cancelled.",
                "CancelResult",
            ),
            404: NOT_FOUND_ENTRY,
        },
        "Deletes the entry if no worker holds it; otherwise requests the cancel from the "
        "worker that does. Records who did it in Django's admin log.",
        path_parameters=ENTRY_ID,
        permissions=(permissions.CANCEL,),
    ),
    Operation(
        "/entries/cancel/",
        "post",
        "cancelEntries",
        "Cancel entries",
        {200: ("What became of each id, or how many matched.", "CancelResult|CancelledMatching")},
        "By ids: deletes the entries named that no worker holds, requests the cancel of those "
        "a worker holds (running, or in its claim) from that worker, and records who did it in "
        "Django's admin log, one log entry per entry. By job and/or queue: cancels every "
        "waiting entry that matches (those a worker holds are left), or with dry_run only "
        "counts them.",
        permissions=(permissions.CANCEL,),
        request_body={"oneOf": [ref("Ids"), ref("CancelMatching")]},
    ),
    Operation(
        "/errors/",
        "get",
        "listErrors",
        "List failed attempts",
        {
            200: (
                "A page of error records by id (no tracebacks), or every one as NDJSON.",
                "ErrorPage",
            )
        },
        "Error records matching every filter given, ordered by id. final=true&requeued=false "
        "lists the entries shown as failed.",
        parameters=(*ERROR_FILTERS, *PAGE_PARAMS, FORMAT),
        ndjson_schema="ErrorRecord",
        permissions=permissions.ERRORS,
    ),
    Operation(
        "/errors/{error_id}/",
        "get",
        "getError",
        "Inspect a failed attempt",
        {
            200: ("The error record with its traceback.", "ErrorRecordDetail"),
            404: ("No error record with this id.", "Error"),
        },
        path_parameters={"error_id": {"type": "integer", "minimum": 1}},
        permissions=permissions.ERRORS,
    ),
    Operation(
        "/errors/requeue/",
        "post",
        "requeueErrors",
        "Requeue failed entries",
        {200: ("How many were requeued.", "RequeuedByIds|RequeuedMatching")},
        "Enqueues a fresh entry for each final failure not yet requeued: those named by error "
        "record ids, or every one matching job, exception_class and/or queue (one at least).",
        permissions=(permissions.REQUEUE,),
        request_body={"oneOf": [ref("Ids"), ref("RequeueMatching")]},
    ),
    Operation(
        "/outcomes/",
        "get",
        "listOutcomes",
        "List outcome records",
        {
            200: (
                "A page of outcome records by id, or every one as NDJSON.",
                "OutcomePage",
            )
        },
        "Records of runs that ended (succeeded, failed, timed_out, cancelled), kept for "
        "OUTCOME_RETENTION_SECONDS, matching every filter given, ordered by id.",
        parameters=(*OUTCOME_FILTERS, *PAGE_PARAMS, FORMAT),
        permissions=permissions.OUTCOMES,
        ndjson_schema="OutcomeRecord",
    ),
    Operation(
        "/queues/",
        "get",
        "listQueues",
        "Queue statistics",
        {200: ("Every queue by name.", "QueueList")},
        "Counts per state, stored and inferred, read by several queries in one snapshot of the "
        "database (one read-only transaction) so that the invariant can be checked, and the "
        "oldest entry awaiting compute.",
        permissions=permissions.QUEUES,
    ),
    Operation(
        "/autoscale/",
        "get",
        "getAutoscale",
        "The autoscaling signal",
        {200: ("The threads the pending entries need, per queue and in all.", "Autoscale")},
        "Per queue, the pending entries (due to run), their run time at each job's mean "
        "duration over the last hour, and the processing threads that would run them within "
        "AUTOSCALE_TARGET_SECONDS (a job's share at most its max_concurrency); threads_needed "
        "is their sum, for an autoscaler to divide by the threads one worker runs "
        "(docs/howto/autoscaling.md).",
        permissions=permissions.QUEUES,
    ),
    Operation(
        "/jobs/stats/",
        "get",
        "getJobStats",
        "Job statistics over the last hour",
        {200: ("Every job with runs that ended in the last hour, by name.", "JobStatsList")},
        "Runs that ended (the current minute and the 59 before it, as workers flushed them with "
        "their heartbeats), the failures among them (every attempt that ended without success, "
        "timeouts included), and the median and 95th percentile of their durations, failures "
        "included, within 11.1 % of the true durations.",
        permissions=permissions.JOB_STATS,
    ),
    Operation(
        "/workers/",
        "get",
        "listWorkers",
        "Worker and leader processes",
        {200: ("Live processes first, then by latest heartbeat.", "WorkerList")},
        "Each process's load as its heartbeats report it, and the database sessions it holds, "
        "beside the server's max_connections and the sessions open on it: the room left for "
        "more worker hosts. At most 500 processes, live ones first; stopped ones are left out "
        "unless include_stopped=true.",
        parameters=(INCLUDE_STOPPED,),
        permissions=permissions.WORKERS,
    ),
    Operation(
        "/queues/{name}/pause/",
        "post",
        "pauseQueue",
        "Pause a queue",
        {200: ("Paused.", "QueueChange"), 404: ("No queue of this name.", "Error")},
        "Workers stop claiming its entries; running ones finish.",
        path_parameters=QUEUE_NAME,
        permissions=(permissions.PAUSE,),
    ),
    Operation(
        "/queues/{name}/resume/",
        "post",
        "resumeQueue",
        "Resume a queue",
        {200: ("Served again.", "QueueChange"), 404: ("No queue of this name.", "Error")},
        path_parameters=QUEUE_NAME,
        permissions=(permissions.PAUSE,),
    ),
    Operation(
        "/jobs/{name}/disable/",
        "post",
        "disableJob",
        "Disable a job",
        {200: ("Disabled.", "JobChange"), 404: NOT_FOUND_JOB},
        "Its waiting entries, and any enqueued later, are not claimed until it is enabled; "
        "running ones finish, and claimed ones not yet started are handed back.",
        path_parameters=JOB_NAME,
        permissions=(permissions.CHANGE_ENTRY,),
    ),
    Operation(
        "/jobs/{name}/enable/",
        "post",
        "enableJob",
        "Enable a job",
        {
            200: ("Enabled: its entries wait or run by their own run_at.", "JobChange"),
            404: ("Neither a registered job nor a disabled one.", "Error"),
        },
        path_parameters=JOB_NAME,
        permissions=(permissions.CHANGE_ENTRY,),
    ),
    Operation(
        "/openapi.json",
        "get",
        "getOpenAPI",
        "This document",
        {200: ("The OpenAPI 3.1 document of the API.", "OpenAPI")},
    ),
)


def _schema(names: str) -> dict[str, Any]:
    refs = [ref(name) for name in names.split("|")]
    return refs[0] if len(refs) == 1 else {"oneOf": refs}


def _parameter(param: Param) -> dict[str, Any]:
    return {
        "name": param.name,
        "in": "query",
        "required": False,
        "description": f"{param.description} Expects {param.expected}.",
        "schema": param.schema,
    }


def _operation(op: Operation) -> dict[str, Any]:
    responses: dict[str, Any] = {}
    for status, (description, names) in sorted(op.responses.items()):
        content: dict[str, Any] = {"application/json": {"schema": _schema(names)}}
        if status == 200 and op.ndjson_schema:
            content[NDJSON_CONTENT_TYPE] = {
                "schema": ref(op.ndjson_schema),
                "description": "One such JSON object per line (format=ndjson).",
            }
        responses[str(status)] = {"description": description, "content": content}
    needs = permissions.named(op.permissions)
    refusals = {
        "400": "Bad or unknown parameters, or a bad body: the message names the parameter, "
        "the value and what is expected.",
        "401": "Not logged in, or an API token that is unknown, expired or revoked.",
        "403": "Not active staff"
        + (f", or without {needs}" if op.permissions else "")
        + (
            ", or (session only) the CSRF token is missing or wrong." if op.method != "get" else "."
        ),
        "405": "Method not allowed here.",
    }
    for code, description in refusals.items():
        responses[code] = {
            "description": description,
            "content": {"application/json": {"schema": ref("Error")}},
        }
    parameters = [
        {"name": name, "in": "path", "required": True, "schema": schema}
        for name, schema in op.path_parameters.items()
    ] + [_parameter(param) for param in op.parameters]
    security: list[dict[str, list[str]]] = [{"bearer": []}, {"session": []}]
    if op.method != "get":
        security = [{"bearer": []}, {"session": [], "csrf": []}]
    permission = f" Needs {needs}." if op.permissions else ""
    operation: dict[str, Any] = {
        "operationId": op.operation_id,
        "summary": op.summary,
        "description": f"{op.description} Staff only.{permission}".strip(),
        "parameters": parameters,
        "responses": responses,
        "security": security,
    }
    operation["x-permissions"] = list(op.permissions)
    if op.request_body is not None:
        operation["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": op.request_body}},
        }
    return operation


def document(request: HttpRequest | None = None) -> dict[str, Any]:
    """Return the OpenAPI 3.1 document, with the server URL where the API is routed: absolute,
    from the request for the document when given, else from the ``django_iq:api`` namespace."""
    if request is not None:  # served: the document sits at the API's root
        root = request.path.removesuffix("openapi.json").rstrip("/")
    else:
        root = reverse("django_iq:api:openapi").removesuffix("openapi.json").rstrip("/")
    paths: dict[str, dict[str, Any]] = {}
    for op in OPERATIONS:
        paths.setdefault(op.path, {})[op.method] = _operation(op)
    csrf_header = settings.CSRF_HEADER_NAME.removeprefix("HTTP_").replace("_", "-")
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "django_iq management API",
            "version": __version__,
            "description": "Inspect, count and cancel entries, requeue failures, read queue "
            'and job statistics, pause or resume queues and disable or enable jobs. JSON; errors are {"error": "..."}. '
            "Staff users authenticate with an API token (Authorization: Bearer <token>) or "
            "Django's session; with the session, POST and DELETE also need the CSRF token (any "
            "GET of the API sets the csrftoken cookie). Each operation needs the permissions "
            "listed in its x-permissions.",
        },
        "servers": [{"url": request.build_absolute_uri(root) if request else root}],
        "paths": paths,
        "components": {
            "schemas": SCHEMAS,
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "An API token (django_iq ApiToken) of a staff user, made in "
                    "the admin or with manage.py iq_token create; it acts with that user's "
                    "permissions and needs no CSRF token.",
                },
                "session": {
                    "type": "apiKey",
                    "in": "cookie",
                    "name": settings.SESSION_COOKIE_NAME,
                    "description": "Django's session cookie of a staff user.",
                },
                "csrf": {
                    "type": "apiKey",
                    "in": "header",
                    "name": csrf_header,
                    "description": "The value of the CSRF cookie.",
                },
            },
        },
    }
