"""Who may read and change what, for every door: the admin, the dashboard and job statistics
pages, the API, the metrics. Each door takes the permissions it checks from here, so that the
same rows need the same permission wherever they are shown.

Reads need Django's ``view`` permission of the model whose rows they show, as the admin's
changelists do; changes need the action's permission (``cancel_entry``, ``requeue_entryerror``,
``pause_queue``, ``change_*``). Every door also needs an active staff user, whether signed in
with a session or sending an API token of that user. The ``iq_*`` commands check nothing: they
run with the rights of whoever can run ``manage.py``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

VIEW_ENTRY = "django_iq.view_entry"
VIEW_ERROR = "django_iq.view_entryerror"
VIEW_QUEUE = "django_iq.view_queue"
VIEW_WORKER = "django_iq.view_worker"
VIEW_OUTCOME = "django_iq.view_runoutcome"

CANCEL = "django_iq.cancel_entry"
REQUEUE = "django_iq.requeue_entryerror"
# Pause, resume and compact queues.
PAUSE = "django_iq.pause_queue"
# Disable and enable jobs, run deferred entries now.
CHANGE_ENTRY = "django_iq.change_entry"
# Revoke API tokens in the admin.
REVOKE_TOKEN = "django_iq.change_apitoken"  # noqa: S105 (a permission name)

# What each read needs, door by door.
ENTRIES = (VIEW_ENTRY,)
# One entry's page shows its failed attempts too, tracebacks included.
ENTRY_DETAIL = (VIEW_ENTRY, VIEW_ERROR)
ERRORS = (VIEW_ERROR,)
OUTCOMES = (VIEW_OUTCOME,)
# Counts per state and the oldest waiting entry of each queue.
QUEUES = (VIEW_QUEUE,)
# Runs, failures and durations per job over the last hour (the page and the API).
JOB_STATS = (VIEW_QUEUE,)
# The queues, and the worker processes with their hosts and pids.
WORKERS = (VIEW_WORKER,)
DASHBOARD = (VIEW_QUEUE, VIEW_WORKER)
# Queue depths, job statistics, worker counts (no names): what the queue pages show.
METRICS = (VIEW_QUEUE,)
# The API's description: no rows, any active staff user.
OPENAPI: tuple[str, ...] = ()


def is_operator(user: Any) -> bool:
    """Whether ``user`` may use any door at all: signed in, active and staff."""
    return bool(
        user is not None
        and user.is_authenticated
        and user.is_active
        and getattr(user, "is_staff", False)
    )


def missing(user: Any, needed: Iterable[str]) -> list[str]:
    """The permissions of ``needed`` that ``user`` lacks. A ``view_`` permission is held also
    by whoever may change the model's rows, as Django's admin decides (``has_view_permission``)."""
    return [permission for permission in needed if not _holds(user, permission)]


def _holds(user: Any, permission: str) -> bool:
    if user.has_perm(permission):
        return True
    app_label, _, codename = permission.partition(".")
    if codename.startswith("view_"):
        return bool(user.has_perm(f"{app_label}.change_{codename.removeprefix('view_')}"))
    return False


def allows(user: Any, needed: Iterable[str]) -> bool:
    """Whether ``user`` is an operator holding every permission of ``needed``."""
    return is_operator(user) and not missing(user, needed)


def named(permissions: Iterable[str]) -> str:
    """``"django_iq.view_queue and django_iq.view_worker"``."""
    return " and ".join(permissions)
