"""The JSON Schemas (2020-12, as OpenAPI 3.1 uses) of everything the API answers and accepts:
each object closed, so that a field added to a serializer must be described here too."""

from __future__ import annotations

from typing import Any

from django_iq.alarms import QUEUE_REASONS
from django_iq.api.endpoint import MAX_IDS
from django_iq.api.filters import ENTRY_STATES
from django_iq.states import (
    COUNTED_STATES,
    MAX_PRIORITY,
    MIN_PRIORITY,
    EntryState,
    OutcomeStatus,
)

NULLABLE_STRING = {"type": ["string", "null"]}
DATE_TIME = {"type": "string", "format": "date-time"}
NULLABLE_DATE_TIME = {"type": ["string", "null"], "format": "date-time"}
ID = {"type": "integer", "minimum": 1}
IDS = {"type": "array", "items": ID}


def closed_object(properties: dict[str, Any], optional: tuple[str, ...] = ()) -> dict[str, Any]:
    """A closed object schema: every property required except ``optional``, no others."""
    return {
        "type": "object",
        "properties": properties,
        "required": [name for name in properties if name not in optional],
        "additionalProperties": False,
    }


def ref(name: str) -> dict[str, str]:
    """A reference to the schema ``name`` of this module's SCHEMAS."""
    return {"$ref": f"#/components/schemas/{name}"}


ENTRY = {
    "id": ID,
    "queue": {"type": "string"},
    "job": {"type": "string", "description": "The registered name of the job."},
    "args": {"type": "array", "description": "Positional arguments of the call."},
    "kwargs": {"type": "object", "description": "Keyword arguments of the call."},
    "priority": {"type": "integer", "minimum": MIN_PRIORITY, "maximum": MAX_PRIORITY},
    "state": {"type": "string", "enum": list(EntryState.values), "description": "Stored state."},
    "inferred_state": {
        "type": "string",
        "enum": list(ENTRY_STATES),
        "description": "The stored state, except that a pending entry is computing while its "
        "group lock is held and awaiting_compute otherwise.",
    },
    "attempts": {"type": "integer", "minimum": 0, "description": "Attempts that failed."},
    "max_attempts": {"type": "integer", "minimum": 1},
    "run_at": DATE_TIME,
    "enqueued_at": DATE_TIME,
    "expires_at": {
        **NULLABLE_DATE_TIME,
        "description": "Not started by then, the entry never runs (expires); null: no expiry.",
    },
    "group_key": NULLABLE_STRING,
}
ERROR_RECORD = {
    "id": ID,
    "entry_id": {**ID, "description": "The entry that failed (gone once it failed for good)."},
    "queue": {"type": "string"},
    "job": {"type": "string"},
    "args": {"type": "array"},
    "kwargs": {"type": "object"},
    "priority": {"type": "integer", "minimum": MIN_PRIORITY, "maximum": MAX_PRIORITY},
    "group_key": NULLABLE_STRING,
    "attempt": {"type": "integer", "minimum": 1},
    "max_attempts": {"type": "integer", "minimum": 1},
    "exception_class": {"type": "string", "description": "Dotted path of the exception class."},
    "message": {"type": "string"},
    "worker": {"type": "string", "description": "Name of the worker that ran the attempt."},
    "enqueued_at": DATE_TIME,
    "failed_at": DATE_TIME,
    "final": {"type": "boolean", "description": "The last attempt: the entry left the queue."},
    "requeued_at": NULLABLE_DATE_TIME,
}
TRACEBACK = {"traceback": {"type": "string"}}
OUTCOME_RECORD = {
    "id": ID,
    "entry_id": {**ID, "description": "The entry that ran (gone once it ended for good)."},
    "result_id": {**NULLABLE_STRING, "description": "Its Django Tasks result id."},
    "queue": {"type": "string"},
    "job": {"type": "string"},
    "args": {"description": "Positional arguments of the call."},
    "kwargs": {"description": "Keyword arguments of the call."},
    "status": {"type": "string", "enum": list(OutcomeStatus.values)},
    "attempt": {"type": "integer", "minimum": 1},
    "return_value": {
        "description": "What the job returned (JSON), or an object whose key "
        "django_iq_return_value_not_kept says why it was not kept."
    },
    "exception_class": {"type": "string", "description": "Dotted path; empty for a success."},
    "traceback": {"type": "string", "description": "Empty for a success."},
    "worker": {"type": "string", "description": "Name of the worker that ran it."},
    "started_at": NULLABLE_DATE_TIME,
    "finished_at": DATE_TIME,
    "duration_seconds": {"type": ["number", "null"]},
}
COUNTS = COUNTED_STATES

# What an operator action did, worded as the admin and the iq_* commands word it.
MESSAGE = {"type": "string", "description": "What was done, skipped and not found."}

SCHEMAS: dict[str, dict[str, Any]] = {
    "Error": closed_object(
        {
            "error": {"type": "string", "description": "What was wrong and how to fix it."},
            "parameter": {"type": "string", "description": "The parameter or field at fault."},
            "value": {"description": "The value received."},
            "expected": {"type": "string", "description": "What the parameter accepts."},
            "allowed": {"type": "array", "items": {"type": "string"}},
        },
        optional=("parameter", "value", "expected", "allowed"),
    ),
    "Entry": closed_object(ENTRY),
    "EntryDetail": closed_object(
        {
            **ENTRY,
            "lock_key": {"type": "string", "description": "Key of the group lock covering it."},
            "lock": {"oneOf": [ref("Lock"), {"type": "null"}]},
            "cron_job_id": {"type": ["integer", "null"]},
            "result_id": {**NULLABLE_STRING, "description": "Its Django Tasks result id."},
            "progress": {
                "oneOf": [ref("Progress"), {"type": "null"}],
                "description": "The last progress its job reported (set_progress); null before "
                "the first report.",
            },
            "errors": {
                "type": "array",
                "items": ref("ErrorRecordDetail"),
                "description": "Its failed attempts, oldest first.",
            },
        }
    ),
    "Progress": closed_object(
        {
            "done": {"type": "number", "minimum": 0},
            "total": {
                "type": ["number", "null"],
                "minimum": 0,
                "description": "Null when the job did not say.",
            },
            "percent": {
                "type": ["number", "null"],
                "description": "done as a percentage of total; null without a total or with 0.",
            },
            "note": {"type": "string", "maxLength": 200},
            "reported_at": {**DATE_TIME, "description": "When the job reported it."},
        }
    ),
    "Lock": closed_object(
        {
            "id": ID,
            "key": {"type": "string"},
            "locked_at": DATE_TIME,
            "worker": NULLABLE_STRING,
            "running_entry_id": {
                "type": ["integer", "null"],
                "description": "The entry of the claim being run (a sibling for a group).",
            },
        }
    ),
    "EntryPage": closed_object(
        {
            "results": {"type": "array", "items": ref("Entry")},
            "next": {"type": ["string", "null"], "format": "uri"},
        }
    ),
    "Count": closed_object(
        {
            "count": {"type": "integer", "minimum": 0},
            "estimated": {"type": "boolean", "description": "Always false: counts are exact."},
        }
    ),
    "Ids": closed_object({"ids": {**IDS, "minItems": 1, "maxItems": MAX_IDS}}),
    "CancelResult": closed_object(
        {
            "cancelled": {**IDS, "description": "Entries deleted: no worker held them."},
            "requested": {
                **IDS,
                "description": "Entries a worker holds (running, or in its claim): the cancel "
                "is requested from it, and it stops them.",
            },
            "not_found": {**IDS, "description": "Ids that matched no entry."},
            "message": MESSAGE,
        }
    ),
    "CancelMatching": {
        **closed_object(
            {
                "job": {"type": "string", "minLength": 1},
                "queue": {"type": "string", "minLength": 1},
                "dry_run": {"type": "boolean", "description": "Only count; change nothing."},
            },
            optional=("job", "queue", "dry_run"),
        ),
        "minProperties": 1,
    },
    "CancelledMatching": closed_object(
        {
            "count": {
                "type": "integer",
                "minimum": 0,
                "description": "Waiting entries cancelled (with dry_run: that would be).",
            },
            "dry_run": {"type": "boolean"},
            "matching": {"type": "object", "additionalProperties": {"type": "string"}},
            "message": MESSAGE,
        }
    ),
    "OutcomeRecord": closed_object(OUTCOME_RECORD),
    "OutcomePage": closed_object(
        {
            "results": {"type": "array", "items": ref("OutcomeRecord")},
            "next": {"type": ["string", "null"], "format": "uri"},
        }
    ),
    "ErrorRecord": closed_object(ERROR_RECORD),
    "ErrorRecordDetail": closed_object({**ERROR_RECORD, **TRACEBACK}),
    "ErrorPage": closed_object(
        {
            "results": {"type": "array", "items": ref("ErrorRecord")},
            "next": {"type": ["string", "null"], "format": "uri"},
        }
    ),
    "RequeueMatching": {
        **closed_object(
            {
                key: {"type": "string", "minLength": 1}
                for key in ("job", "exception_class", "queue")
            },
            optional=("job", "exception_class", "queue"),
        ),
        "minProperties": 1,
    },
    "RequeuedByIds": closed_object(
        {
            "requeued": {"type": "integer", "minimum": 0},
            "entry_ids": {**IDS, "description": "The new entries."},
            "skipped": {
                "type": "integer",
                "minimum": 0,
                "description": "Records found but not final failures still to requeue.",
            },
            "not_found": IDS,
            "message": MESSAGE,
        }
    ),
    "RequeuedMatching": closed_object(
        {
            "requeued": {"type": "integer", "minimum": 0},
            "matching": {"type": "object", "additionalProperties": {"type": "string"}},
            "message": MESSAGE,
        }
    ),
    "Queue": closed_object(
        {
            "name": {"type": "string"},
            "weight": {"type": "integer", "minimum": 1},
            "max_concurrency": {"type": ["integer", "null"], "minimum": 1},
            "alert_waiting_seconds": {
                "type": "integer",
                "minimum": 1,
                "description": "The queue's alarm threshold: its own, else ALERT_WAITING_SECONDS.",
            },
            "is_paused": {"type": "boolean"},
            "counts": closed_object({name: {"type": "integer", "minimum": 0} for name in COUNTS}),
            "invariant_holds": {
                "type": "boolean",
                "description": "pending == computing + awaiting_compute and no lock lacks its "
                "entry, each state counted on its own in one snapshot of the database.",
            },
            "locked_by_dead_workers": {
                "type": "integer",
                "minimum": 0,
                "description": "Pending entries whose group lock's worker is not live.",
            },
            "locks_without_entries": {
                "type": "integer",
                "minimum": 0,
                "description": "Group locks of the queue that no entry has as its lock key.",
            },
            "merged": {
                "type": "integer",
                "minimum": 0,
                "description": "Waiting entries compaction merged away in the queue so far.",
            },
            "alarm": {
                "oneOf": [
                    {"type": "null"},
                    closed_object(
                        {
                            "reason": {"type": "string", "enum": list(QUEUE_REASONS)},
                            "waiting_seconds": {"type": "number", "minimum": 0},
                        }
                    ),
                ],
                "description": "Raised when an entry awaited compute past the threshold and "
                "no live worker serves the queue, or nothing started in it for as long.",
            },
            "oldest_waiting_enqueued_at": {
                **NULLABLE_DATE_TIME,
                "description": "Enqueue time of the oldest entry awaiting compute.",
            },
            "oldest_waiting_seconds": {"type": ["number", "null"], "minimum": 0},
        }
    ),
    "JobStats": closed_object(
        {
            "job_name": {"type": "string", "description": "The registered name of the job."},
            "runs": {"type": "integer", "minimum": 1, "description": "Runs that ended."},
            "failed": {
                "type": "integer",
                "minimum": 0,
                "description": "Runs among them that ended without success.",
            },
            "p50_seconds": {"type": "number", "minimum": 0},
            "p95_seconds": {"type": "number", "minimum": 0},
            "mean_seconds": {
                "type": "number",
                "minimum": 0,
                "description": "The mean duration, each run counted at its bucket's duration.",
            },
        }
    ),
    "JobStatsList": closed_object(
        {
            "generated_at": DATE_TIME,
            "window_start": {**DATE_TIME, "description": "The first minute counted."},
            "jobs": {"type": "array", "items": ref("JobStats")},
        }
    ),
    "QueueList": closed_object({"queues": {"type": "array", "items": ref("Queue")}}),
    "QueueDemand": closed_object(
        {
            "queue": {"type": "string"},
            "pending": {
                "type": "integer",
                "minimum": 0,
                "description": "Entries due to run: awaiting compute, or claimed and running.",
            },
            "backlog_seconds": {
                "type": "number",
                "minimum": 0,
                "description": "The pending entries' run time, each at its job's mean duration "
                "over the last hour.",
            },
            "threads_needed": {
                "type": "integer",
                "minimum": 0,
                "description": "Processing threads that do the backlog within target_seconds.",
            },
        }
    ),
    "Autoscale": closed_object(
        {
            "generated_at": DATE_TIME,
            "target_seconds": {"type": "number", "exclusiveMinimum": 0},
            "threads_needed": {
                "type": "integer",
                "minimum": 0,
                "description": "The sum over the queues: the number to scale workers by.",
            },
            "threads_live": {
                "type": "integer",
                "minimum": 0,
                "description": "Processing threads of the live workers now.",
            },
            "queues": {"type": "array", "items": ref("QueueDemand")},
        }
    ),
    "Worker": closed_object(
        {
            "name": {"type": "string"},
            "role": {"type": "string", "enum": ["worker", "leader"]},
            "host": {"type": "string"},
            "pid": {"type": "integer"},
            "queues": {
                "type": "array",
                "items": {"type": "string"},
                "description": "The queues it serves; empty: every queue.",
            },
            "is_live": {"type": "boolean"},
            "state": {"type": "string", "enum": ["live", "stopped", "dead"]},
            "heartbeat_at": DATE_TIME,
            "heartbeat_age_seconds": {"type": "number"},
            "processing_threads": {"type": "integer"},
            "busy_threads": {"type": "integer"},
            "idle_threads": {"type": "integer"},
            "cpu_percent": {"type": "number"},
            "memory_percent": {"type": "number"},
            "is_throttled": {"type": "boolean"},
            "sessions": {
                "type": ["integer", "null"],
                "description": "Database sessions the process holds, as its last heartbeat "
                "reporting a change said (null on SQLite, or before its first report).",
            },
        }
    ),
    "ServerSessions": closed_object(
        {
            "max_connections": {"type": "integer"},
            "reserved": {
                "type": "integer",
                "description": "Of max_connections, kept for superusers.",
            },
            "in_use": {
                "type": "integer",
                "description": "Client sessions open on the server, every database's and user's.",
            },
            "django_iq": {
                "type": "integer",
                "description": "The sessions the live django_iq processes report.",
            },
            "headroom": {
                "type": "integer",
                "description": "Sessions an ordinary user may still open.",
            },
            "is_short": {
                "type": "boolean",
                "description": "Less than a tenth of max_connections (at least 5) left.",
            },
        }
    ),
    "WorkerList": closed_object(
        {
            "generated_at": DATE_TIME,
            "workers": {"type": "array", "items": ref("Worker")},
            "truncated": {
                "type": "boolean",
                "description": "More processes than listed: live ones come first.",
            },
            "server_sessions": {
                "oneOf": [ref("ServerSessions"), {"type": "null"}],
                "description": "The database server's sessions against its limit (null on SQLite).",
            },
        }
    ),
    "QueueChange": closed_object(
        {
            "queue": {"type": "string"},
            "is_paused": {"type": "boolean"},
            "changed": {"type": "boolean", "description": "False if it already was."},
            "message": MESSAGE,
        }
    ),
    "JobChange": closed_object(
        {
            "job": {"type": "string"},
            "is_disabled": {"type": "boolean"},
            "changed": {"type": "boolean", "description": "False if it already was."},
            "message": MESSAGE,
        }
    ),
    "OpenAPI": {"type": "object", "description": "This document."},
}
